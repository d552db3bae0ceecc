"""A fake OpenAI-compatible judge on 127.0.0.1 for the GPT-judge tests (no network, real HTTP)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from llava.eval import judge as judge_module

_real_sleep = time.sleep  # serving() makes time.sleep a no-op for the client's retry pauses


class FakeJudge:
    """Answers each ``/chat/completions`` body with ``respond(body)``; first fails with the codes in ``failures``.

    ``respond`` returns the reply text, or ``(text, model)`` to name the replying model. Misbehaviours, for the
    fault cases: ``redirect_to`` (answer ``302 Location: <it>``), ``padding`` (bytes of filler inside an otherwise
    valid reply), ``trickle`` (seconds between single bytes of the reply).
    """

    def __init__(self, respond: Callable[[dict[str, Any]], Any]) -> None:
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []  # the path (and query) of every request
        self.failures: list[int] = []  # HTTP codes to answer with before the next success
        self.redirect_to: str | None = None
        self.padding = 0
        self.trickle: float | None = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.headers.append(dict(self.headers))
                outer.paths.append(self.path)
                if outer.failures:
                    self.send_response(outer.failures.pop(0))
                    self.end_headers()
                    self.wfile.write(b'{"error": "try later"}')
                    return
                if outer.redirect_to:
                    self.send_response(302)
                    self.send_header("Location", outer.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                outer.requests.append(body)
                answer = outer.respond(body)
                text, model = answer if isinstance(answer, tuple) else (answer, body["model"])
                reply = {"model": model, "choices": [{"message": {"role": "assistant", "content": text}}]}
                if outer.padding:
                    reply["padding"] = "x" * outer.padding
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    if outer.trickle is None:
                        self.wfile.write(data)
                        return
                    for byte in data:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        _real_sleep(outer.trickle)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@contextmanager
def serving(respond: Callable[[dict[str, Any]], Any], monkeypatch: pytest.MonkeyPatch, model: str = "judge-1") -> Iterator[FakeJudge]:
    """Run a :class:`FakeJudge` and point the environment at it (key ``sk-test``, judge ``model``)."""
    fake = FakeJudge(respond)
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("LLAVA_JUDGE_MODEL", model)
    monkeypatch.setattr(judge_module.time, "sleep", lambda seconds: None)
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()
