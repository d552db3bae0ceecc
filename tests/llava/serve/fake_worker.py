"""A stand-in model worker on 127.0.0.1 for controller tests: answers ``/worker_get_status`` with a given status
and ``/worker_generate_stream`` with a scripted stream (real HTTP, no model)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..http_server import Handled, ScriptedServer, scripted_server


def status(*models: str, queue_length: int = 0, speed: float = 1) -> dict[str, Any]:
    return {"model_names": list(models), "speed": speed, "queue_length": queue_length}


def answer(text: str, error_code: int = 0) -> bytes:
    return json.dumps({"text": text, "error_code": error_code}).encode() + b"\0"


@contextmanager
def fake_worker(worker_status: Any, stream: Callable[[Handled], None] | None = None) -> Iterator[ScriptedServer]:
    """A worker reporting ``worker_status`` (any JSON: a test may make it malformed); ``stream`` answers
    generation requests (default: one chunk ``"<prompt> ok"``)."""

    def handle(handled: Handled) -> None:
        if handled.seen.path == "/worker_get_status":
            handled.reply(200, json.dumps(worker_status).encode(), {"Content-Type": "application/json"})
        elif handled.seen.path == "/worker_generate_stream":
            if stream is not None:
                stream(handled)
            else:
                handled.reply(200, answer(json.loads(handled.seen.body)["prompt"] + " ok"))
        else:
            handled.reply(404, b'{"detail": "Not Found"}')

    with scripted_server(handle) as server:
        yield server
