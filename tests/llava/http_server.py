"""A scripted HTTP server on 127.0.0.1 for tests of network clients: each request is answered by a function that
writes to the raw socket file, so a test can trickle bytes, redirect, send huge bodies or hang.

Usage::

    with scripted_server(handler) as server:   # handler(request: Handled) -> None
        net.request("GET", server.url + "/x", ...)
    server.requests  # [(method, path, headers, body), ...]
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class ScriptedServer:
    server: ThreadingHTTPServer
    requests: list[Seen] = field(default_factory=list)
    #: Set when a handler's write failed because the client had gone (the time it noticed).
    client_gone_at: list[float] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Handled:
    """What a handler gets: the request and helpers to answer it."""

    def __init__(self, handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        self.handler, self.seen = handler, seen

    def reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.handler.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.handler.send_header(name, value)
        self.handler.end_headers()
        self.handler.wfile.write(body)

    def start(self, status: int, headers: dict[str, str] | None = None) -> None:
        """Status line and headers, no Content-Length: the body ends when the connection closes."""
        self.handler.send_response(status)
        for name, value in (headers or {}).items():
            self.handler.send_header(name, value)
        self.handler.send_header("Connection", "close")
        self.handler.end_headers()
        self.handler.wfile.flush()

    def write(self, data: bytes) -> None:
        self.handler.wfile.write(data)
        self.handler.wfile.flush()


def scripted(handle: Callable[[Handled], Any], host: str = "127.0.0.1") -> ScriptedServer:
    """A server (not yet serving, bound to ``host``) whose every request goes to ``handle``."""
    box: list[ScriptedServer] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen = Seen(self.command, self.path, dict(self.headers), self.rfile.read(length) if length else b"")
            box[0].requests.append(seen)
            try:
                handle(Handled(self, seen))
            except OSError:  # the client went away (broken pipe, reset)
                box[0].client_gone_at.append(time.monotonic())
            self.close_connection = True

        do_GET = do_POST = _any  # noqa: N815 (http.server's names)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    box.append(ScriptedServer(server))
    return box[0]


@contextmanager
def scripted_server(handle: Callable[[Handled], Any], host: str = "127.0.0.1") -> Iterator[ScriptedServer]:
    """Serve ``handle`` on a free port of ``host`` (default loopback) for the duration of the block."""
    server = scripted(handle, host)
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
