"""Where the chat UI gets answers from: a controller and its workers over HTTP, a model in this process, or an
OpenAI-compatible endpoint (``vllm serve`` with this project's plugin).

The backends offer the same three calls, so ``chat_ui`` has one code path:

* ``list_models()`` — model names that can answer now;
* ``stream(payload)`` — upstream's ``/worker_generate_stream`` body in, :class:`StreamChunk` s out (never
  raises; a missing or dead worker becomes an error chunk with a message for the user);
* ``compressor_view(model, images, videos, prompt)`` — the compressor panel's JSON (``{"available": False}`` when there is
  none; see :mod:`llava.serve.panels`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from llava import net
from llava.endpoints import join_url

from .protocol import (
    CHUNK_DELIMITER,
    NO_WORKER,
    WORKER_ERROR,
    WORKER_UNREACHABLE,
    StreamChunk,
    decode_chunks,
    no_model_message,
    sentence,
    unreachable_message,
)

if TYPE_CHECKING:
    from llava.openai_client import ChatEndpoint

    from .engine import ModelEngine

logger = logging.getLogger(__name__)

HEADERS = {"User-Agent": "LLaVA Client"}
#: Largest answer chunk and compressor-view reply read from a worker (a view carries a PNG in base64).
MAX_CHUNK_BYTES = 64 * 1024 * 1024
MAX_VIEW_BYTES = 64 * 1024 * 1024


class ChatBackend(Protocol):
    def list_models(self) -> list[str]: ...

    def stream(self, payload: dict[str, Any]) -> Iterator[StreamChunk]: ...

    def compressor_view(self, model: str, images: Sequence[str], videos: Sequence[str] = (), prompt: str | None = None) -> dict[str, Any]: ...


class ControllerBackend:
    """Talks to a controller (``--controller-url``) and the workers it names, through :mod:`llava.net`.

    Args:
        controller_url: e.g. ``http://localhost:21001``.
        call_timeout: Seconds, in all, for one call to the controller or a compressor view from a worker.
        stream_timeout: Seconds, in all, for one streamed answer.
    """

    def __init__(self, controller_url: str, *, call_timeout: float = 30.0, stream_timeout: float = 600.0) -> None:
        self.controller_url = controller_url.rstrip("/")
        self.call_timeout, self.stream_timeout = call_timeout, stream_timeout

    def _post(self, path: str, payload: dict[str, Any] | None = None) -> Any:
        """The controller's JSON answer to ``path``.

        Raises:
            net.NetError, ValueError: If the controller cannot be reached or does not answer with JSON.
        """
        url = join_url(self.controller_url, path, "--controller-url")
        response = net.request("POST", url, json=payload, headers=HEADERS,
                               deadline=self.call_timeout, max_bytes=1024 * 1024, max_redirects=0)
        if response.status != 200:
            raise ValueError(f"HTTP {response.status} from {url}")
        return response.json()

    def list_models(self) -> list[str]:
        """Ask the controller to re-check its workers, then list their models (empty if it is unreachable)."""
        try:
            self._post("/refresh_all_workers")
            return sorted(str(name) for name in self._post("/list_models")["models"])
        except (net.NetError, ValueError, KeyError, TypeError) as error:
            logger.warning("cannot list models from the controller at %s: %s", self.controller_url, error)
            return []

    def worker_address(self, model: str) -> str:
        """The address of a worker serving ``model``, or ``""`` when there is none.

        Raises:
            net.NetError, ValueError: If the controller cannot be reached.
        """
        answer = self._post("/get_worker_address", {"model": model})
        return str(answer.get("address") or "") if isinstance(answer, dict) else ""

    def stream(self, payload: dict[str, Any]) -> Iterator[StreamChunk]:
        model = str(payload.get("model") or "")
        try:
            address = self.worker_address(model) if model else ""
        except (net.NetError, ValueError) as error:
            logger.warning("controller %s unreachable: %s", self.controller_url, error)
            yield StreamChunk(
                f"No model is available: the controller at {self.controller_url} cannot be reached.", WORKER_UNREACHABLE
            )
            return
        if not address:
            yield StreamChunk(no_model_message(model), NO_WORKER)
            return
        try:
            with net.open_stream("POST", address + "/worker_generate_stream", json=payload, headers=HEADERS,
                                 deadline=self.stream_timeout) as response:
                # A refusal (busy, body too large) carries its own message; decode it like a chunk.
                yield from decode_chunks(_refusal_or_pieces(response))
        except net.DeadlineExceeded:
            yield StreamChunk(f"The model worker at {address} did not finish the answer within "
                              f"{self.stream_timeout:g} s; ask for fewer tokens or try again.", WORKER_UNREACHABLE)
        except net.NetError as error:
            logger.warning("worker %s failed: %s", address, error)
            yield StreamChunk(unreachable_message(address), WORKER_UNREACHABLE)
        except ValueError as error:
            yield StreamChunk(str(error), WORKER_ERROR)

    def compressor_view(self, model: str, images: Sequence[str], videos: Sequence[str] = (), prompt: str | None = None) -> dict[str, Any]:
        try:
            address = self.worker_address(model)
            if not address:
                return {"available": False}
            body = {"images": list(images), **({"videos": list(videos)} if videos else {}), **({"prompt": prompt} if prompt else {})}
            response = net.request("POST", address + "/worker_get_compressor_view", json=body,
                                   headers=HEADERS, deadline=self.call_timeout, max_bytes=MAX_VIEW_BYTES, max_redirects=0)
            data = response.json()
        except (net.NetError, ValueError) as error:
            logger.warning("no compressor view for %s: %s", model, error)
            return {"available": False, "error": f"The compressor view could not be fetched ({error})."}
        if not isinstance(data, dict):
            return {"available": False, "error": "The worker's compressor view is not a JSON object."}
        if response.status != 200:
            return {"available": False, "error": str(data.get("error", f"HTTP {response.status}"))}
        return data


def _refusal_or_pieces(response: net.Stream) -> Iterator[bytes]:
    """The stream's NUL-separated pieces; for a non-200 answer, its JSON body as the one piece (a worker's
    ``{"text", "error_code"}``), or a made-up error piece for a body of another shape."""
    if response.status == 200:
        yield from response.pieces(CHUNK_DELIMITER, MAX_CHUNK_BYTES)
        return
    body = response.read(64 * 1024)
    try:
        data = net.parse_json(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and "text" in data and "error_code" in data:
        yield body
    else:
        message = data.get("error") if isinstance(data, dict) else None
        yield StreamChunk(str(message or f"The model worker answered HTTP {response.status}."), WORKER_ERROR).encode()[:-1]


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

    def compressor_view(self, model: str, images: Sequence[str], videos: Sequence[str] = (), prompt: str | None = None) -> dict[str, Any]:
        if model != self.engine.model_name:
            return {"available": False}
        try:
            with self._gate:
                return self.engine.compressor_view({"images": list(images), "videos": list(videos), "prompt": prompt})
        except ValueError as error:
            return {"available": False, "error": str(error)}


class EndpointBackend:
    """An OpenAI-compatible endpoint (``--endpoint``): each answer streams from ``/chat/completions``, the page's
    conversation sent as chat messages (``payload["messages"]``, the images with the first turn), so the server's chat
    template renders the prompt. There is no compressor panel (the endpoint does not offer one).

    Args:
        endpoint: The client (:class:`llava.openai_client.ChatEndpoint`).
    """

    def __init__(self, endpoint: ChatEndpoint) -> None:
        self.endpoint = endpoint

    def list_models(self) -> list[str]:
        """The endpoint's models (empty, with a warning, when it cannot be asked)."""
        try:
            return self.endpoint.served_models()
        except ValueError as error:
            logger.warning("cannot list the endpoint's models: %s", error)
            return []

    def stream(self, payload: dict[str, Any]) -> Iterator[StreamChunk]:
        from llava.openai_client import Sampling, image_data_url_of_base64

        prompt = str(payload.get("prompt") or "")
        messages = [dict(message) for message in payload.get("messages") or []]
        images = [image_data_url_of_base64(image) for image in payload.get("images") or []]
        if payload.get("videos"):
            yield StreamChunk("This endpoint takes images, not videos; upload an image.", WORKER_ERROR)
            return
        if images and messages:
            text = messages[0]["content"]
            messages[0] = {"role": "user", "content": [*({"type": "image_url", "image_url": {"url": url}} for url in images),
                                                       {"type": "text", "text": text}]}
        try:
            sampling = Sampling(float(payload.get("temperature", 0.2)), payload.get("top_p"), int(payload.get("max_new_tokens", 512)),
                                payload.get("stop") or None)
            for answer in self.endpoint.stream(messages, str(payload.get("model") or ""), sampling):
                yield StreamChunk(prompt + answer)
        except ValueError as error:
            yield StreamChunk(sentence(str(error)), WORKER_ERROR)

    def compressor_view(self, model: str, images: Sequence[str], videos: Sequence[str] = (), prompt: str | None = None) -> dict[str, Any]:
        return {"available": False}


__all__ = ["ChatBackend", "ControllerBackend", "EndpointBackend", "LocalBackend"]
