"""Where a loader's answers come from: the checkpoint loaded in this process (``--backend local``, the default), or an
OpenAI-compatible endpoint serving it (``--backend openai --endpoint URL``, e.g. ``vllm serve`` with this project's
plugin; see docs/SERVING.md).

:func:`loader_backend` chooses the backend once, from the flags; :func:`llava.eval.core.run_parsed` asks it for the
``model_id``, the provenance record and the generator, and runs the same question loop, chunking, resuming and
answers file either way. An endpoint's answers record the endpoint and the model it serves instead of a checkpoint
fingerprint, so resuming a file with the other backend (or another endpoint or model) is refused.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

from llava.mm_utils import get_model_name_from_path
from llava.utils import UserError

BACKENDS = ("local", "openai")
#: The flags of the endpoint; they do not enter a local run's record (old answers files keep resuming).
ENDPOINT_FLAGS = ("backend", "endpoint", "served_model", "request_timeout")


def add_backend_flags(parser: argparse.ArgumentParser) -> None:
    """``--backend``, ``--endpoint``, ``--served-model``, ``--request-timeout``."""
    from llava.openai_client import DEFAULT_TIMEOUT, KEY_ENV

    group = parser.add_argument_group("answering through an OpenAI-compatible endpoint (e.g. vllm serve)")
    group.add_argument("--backend", choices=BACKENDS, default="local",
                       help="local: load --model-path here (default); openai: ask --endpoint")
    group.add_argument("--endpoint", type=str, default=None,
                       help=f"the API root for --backend openai, e.g. http://127.0.0.1:8000/v1 (key: ${KEY_ENV})")
    group.add_argument("--served-model", "--served_model", dest="served_model", type=str, default=None,
                       help="the endpoint's model to ask, when it serves several")
    group.add_argument("--request-timeout", "--request_timeout", dest="request_timeout", type=float, default=DEFAULT_TIMEOUT,
                       help="seconds one answer may take in all (--backend openai)")


class LocalBackend:
    """The checkpoint ``--model-path`` (with ``--model-base``), loaded in this process."""

    name = "local"

    def __init__(self, args: argparse.Namespace, settings: dict[str, Any]) -> None:
        if getattr(args, "endpoint", None):
            raise UserError("--endpoint is for --backend openai; add --backend openai, or drop --endpoint")
        self.args = args

    def model_id(self) -> str:
        return get_model_name_from_path(os.path.expanduser(self.args.model_path))

    def check(self, items: Sequence[Any]) -> None:
        """Refuse a plain language model asked about images, before anything loads."""
        if any(item.images for item in items):
            from llava.model.checkpoint_layout import require_multimodal

            require_multimodal(os.path.expanduser(self.args.model_path), self.args.model_base)

    def record(self, producer: dict[str, Any]) -> dict[str, Any]:
        return producer

    def generator_factory(self, device: str, settings: dict[str, Any], fast: str = "none") -> Callable[[], tuple[Any, str]]:
        from llava.generation import load_generator

        args = self.args
        return lambda: load_generator(args.model_path, args.model_base, args.conv_mode, device, settings,
                                      getattr(args, "projector_type", None), fast=fast, reducer=getattr(args, "reducer", None))


class EndpointBackend:
    """An OpenAI-compatible endpoint (:class:`llava.openai_client.ChatEndpoint`), asked one request per question,
    ``--batch-size`` of them at once. Its served model is looked up before anything is written."""

    name = "openai"

    def __init__(self, args: argparse.Namespace, settings: dict[str, Any]) -> None:
        from llava.openai_client import ChatEndpoint, api_key_from_env

        if not args.endpoint:
            raise UserError("--backend openai needs --endpoint URL, the API root, e.g. http://127.0.0.1:8000/v1")
        if args.num_beams != 1:
            raise UserError(f"--num_beams {args.num_beams}: an OpenAI-compatible endpoint has no beam search; use --num_beams 1 or --backend local")
        if settings:
            raise UserError("--projector-setting changes a model loaded here; with --backend openai, set it on the served checkpoint")
        if getattr(args, "reducer", None) not in (None, "none"):
            raise UserError(f"--reducer {args.reducer} runs inside a model loaded here, and the endpoint would answer without it; "
                            "use --backend local, or drop --reducer")
        self.args = args
        self.endpoint = ChatEndpoint(args.endpoint, api_key_from_env(), timeout=args.request_timeout)
        self._model: str | None = None

    @property
    def model(self) -> str:
        """The served model (asked of the endpoint once)."""
        if self._model is None:
            self._model = self.endpoint.resolve_model(self.args.served_model)
        return self._model

    def model_id(self) -> str:
        return get_model_name_from_path(self.model)

    def check(self, items: Sequence[Any]) -> None:
        """Refuse video questions (the endpoint takes images), then reach the endpoint: an unreachable one, or one
        without the model, fails before any output."""
        if any(getattr(ref, "kind", "image") == "video" for item in items for ref in item.images):
            raise UserError("--backend openai sends images, not videos; answer video questions with --backend local")
        self.model_id()

    def record(self, producer: dict[str, Any]) -> dict[str, Any]:
        """The record names the endpoint and its model instead of a checkpoint's fingerprint."""
        producer = {key: value for key, value in producer.items() if key not in ("model_base", "backend", "endpoint")}
        producer["model"] = {"endpoint": self.endpoint.url, "served_model": self.model}
        producer["backend"] = self.name
        return producer

    def generator_factory(self, device: str, settings: dict[str, Any], fast: str = "none") -> Callable[[], tuple[Any, str]]:
        """The endpoint's generator; ``fast`` is the server's business and is not used here."""
        from llava.openai_client import EndpointGenerator

        return lambda: (EndpointGenerator(self.endpoint, self.model, self.args.batch_size), self.model)


def loader_backend(args: argparse.Namespace, settings: dict[str, Any]) -> LocalBackend | EndpointBackend:
    """The backend the flags choose (the one place that decides); ``settings``: the runtime projector settings.

    Raises:
        UserError: For flags the backend cannot honour (see each backend).
    """
    backend = getattr(args, "backend", None) or "local"
    return EndpointBackend(args, settings) if backend == "openai" else LocalBackend(args, settings)


def recorded_flags(args: argparse.Namespace, names: Sequence[str] = ENDPOINT_FLAGS) -> argparse.Namespace:
    """``args`` without the endpoint's flags (the backend's :meth:`record` adds what it must)."""
    return argparse.Namespace(**{key: value for key, value in vars(args).items() if key not in names})


__all__ = ["BACKENDS", "ENDPOINT_FLAGS", "EndpointBackend", "LocalBackend", "add_backend_flags", "loader_backend", "recorded_flags"]
