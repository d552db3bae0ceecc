"""Where the chat UI gets answers from: a controller and its workers over HTTP, or a model in this process.

Both backends offer the same three calls, so ``chat_ui`` has one code path:

* ``list_models()`` — model names that can answer now;
* ``stream(payload)`` — upstream's ``/worker_generate_stream`` body in, :class:`StreamChunk` s out (never
  raises; a missing or dead worker becomes an error chunk with a message for the user);
* ``compressor_view(model, images)`` — the compressor panel's JSON (``{"available": False}`` when there is
  none; see :mod:`llava.serve.panels`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import requests

from .protocol import (
    CHUNK_DELIMITER,
    NO_WORKER,
    WORKER_ERROR,
    WORKER_UNREACHABLE,
    StreamChunk,
    decode_chunks,
    no_model_message,
    unreachable_message,
)

if TYPE_CHECKING:
    from .engine import ModelEngine

logger = logging.getLogger(__name__)

HEADERS = {"User-Agent": "LLaVA Client"}


class ChatBackend(Protocol):
    def list_models(self) -> list[str]: ...

    def stream(self, payload: dict[str, Any]) -> Iterator[StreamChunk]: ...

    def compressor_view(self, model: str, images: Sequence[str], videos: Sequence[str] = ()) -> dict[str, Any]: ...


class ControllerBackend:
    """Talks to a controller (``--controller-url``) and the workers it names.

    Args:
        controller_url: e.g. ``http://localhost:21001``.
        connect_timeout: Seconds to wait for a connection to the controller or a worker.
        read_timeout: Seconds to wait between two chunks of an answer.
    """

    def __init__(self, controller_url: str, *, connect_timeout: float = 5.0, read_timeout: float = 120.0) -> None:
        self.controller_url = controller_url.rstrip("/")
        self.timeout = (connect_timeout, read_timeout)

    def _post(self, path: str, payload: dict[str, Any] | None = None) -> requests.Response:
        response = requests.post(self.controller_url + path, json=payload, headers=HEADERS, timeout=self.timeout)
        response.raise_for_status()
        return response

    def list_models(self) -> list[str]:
        """Ask the controller to re-check its workers, then list their models (empty if it is unreachable)."""
        try:
            self._post("/refresh_all_workers")
            return sorted(self._post("/list_models").json()["models"])
        except (requests.RequestException, ValueError, KeyError) as error:
            logger.warning("cannot list models from the controller at %s: %s", self.controller_url, error)
            return []

    def worker_address(self, model: str) -> str:
        """The address of a worker serving ``model``, or ``""`` when there is none.

        Raises:
            requests.RequestException: If the controller cannot be reached.
        """
        return str(self._post("/get_worker_address", {"model": model}).json().get("address") or "")

    def stream(self, payload: dict[str, Any]) -> Iterator[StreamChunk]:
        model = str(payload.get("model") or "")
        try:
            address = self.worker_address(model) if model else ""
        except (requests.RequestException, ValueError) as error:
            logger.warning("controller %s unreachable: %s", self.controller_url, error)
            yield StreamChunk(
                f"No model is available: the controller at {self.controller_url} cannot be reached.", WORKER_UNREACHABLE
            )
            return
        if not address:
            yield StreamChunk(no_model_message(model), NO_WORKER)
            return
        try:
            response = requests.post(
                address + "/worker_generate_stream", json=payload, headers=HEADERS, stream=True, timeout=self.timeout
            )
            with response:
                response.raise_for_status()
                yield from decode_chunks(response.iter_lines(delimiter=CHUNK_DELIMITER))
        except requests.RequestException as error:
            logger.warning("worker %s failed: %s", address, error)
            yield StreamChunk(unreachable_message(address), WORKER_UNREACHABLE)
        except ValueError as error:
            yield StreamChunk(str(error), WORKER_ERROR)

    def compressor_view(self, model: str, images: Sequence[str], videos: Sequence[str] = ()) -> dict[str, Any]:
        try:
            address = self.worker_address(model)
            if not address:
                return {"available": False}
            body = {"images": list(images), **({"videos": list(videos)} if videos else {})}
            response = requests.post(
                address + "/worker_get_compressor_view", json=body, headers=HEADERS,
                timeout=self.timeout,
            )
            data = response.json()
        except (requests.RequestException, ValueError) as error:
            logger.warning("no compressor view for %s: %s", model, error)
            return {"available": False, "error": f"The compressor view could not be fetched ({error})."}
        if response.status_code != 200:
            return {"available": False, "error": str(data.get("error", response.reason))}
        return data


class LocalBackend:
    """Serves one in-process :class:`ModelEngine` (the one-process demo).

    Args:
        engine: The loaded model.
        limit_model_concurrency: Generations allowed to run at once; others wait.
    """

    def __init__(self, engine: ModelEngine, limit_model_concurrency: int = 5) -> None:
        if limit_model_concurrency < 1:
            raise ValueError(f"limit_model_concurrency must be at least 1, got {limit_model_concurrency}")
        self.engine = engine
        self._gate = threading.BoundedSemaphore(limit_model_concurrency)

    def list_models(self) -> list[str]:
        return [self.engine.model_name]

    def stream(self, payload: dict[str, Any]) -> Iterator[StreamChunk]:
        model = payload.get("model")
        if model != self.engine.model_name:
            yield StreamChunk(no_model_message(str(model or "")), NO_WORKER)
            return
        with self._gate:
            yield from self.engine.generate_stream(payload)

    def compressor_view(self, model: str, images: Sequence[str], videos: Sequence[str] = ()) -> dict[str, Any]:
        if model != self.engine.model_name:
            return {"available": False}
        try:
            with self._gate:
                return self.engine.compressor_view({"images": list(images), "videos": list(videos)})
        except ValueError as error:
            return {"available": False, "error": str(error)}


__all__ = ["ChatBackend", "ControllerBackend", "LocalBackend"]
