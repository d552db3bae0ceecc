"""What every server of ``llava.serve`` shares: bounded request bodies, deadlines, connection limits.

* Bodies are read as a stream and cut off at a size limit (``--max-request-mb``, default 32 MiB), so a client
  cannot make a server hold an arbitrarily large body in memory: a larger body gets a 413 answer
  ``{"error": "..."}`` naming the limit (:func:`read_body`).
* A request must deliver its whole body within ``--body-timeout`` seconds, or it gets a 408 answer and its
  connection is closed (:class:`BodyDeadline`; uvicorn itself waits for a body forever).
* At most ``--limit-concurrency`` connections are served at once (uvicorn answers 503 beyond that), and an idle
  keep-alive connection is closed after ``--timeout-keep-alive`` seconds (:func:`uvicorn_server`).
* :class:`PendingLimit` bounds how many requests (and how many bytes of their bodies) a server holds at once;
  one beyond either bound is refused at once, before its body is read.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from llava.net import parse_json
from llava.numeric import MAX_COUNT, MAX_SECONDS, check_number, check_seconds

logger = logging.getLogger(__name__)

ASGIApp = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


#: Default cap on a request body: room for a few base64 images at the default 20 MiB per-image limit is not
#: needed for chat use, and this bounds the memory a single request can take.
DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024


def bad_request(message: str) -> JSONResponse:
    """A 400 answer ``{"error": message}``."""
    return JSONResponse({"error": message}, status_code=400)


def too_large(max_bytes: int) -> JSONResponse:
    """A 413 answer naming the limit."""
    shown = f"{max_bytes / (1024 * 1024):.1f} MiB" if max_bytes >= 1024 * 1024 else f"{max_bytes} bytes"
    message = (
        f"the request body is larger than the {shown} this server accepts (--max-request-mb); "
        "send smaller or fewer images"
    )
    return JSONResponse({"error": message}, status_code=413)


async def read_limited(request: Request, max_bytes: int) -> bytes | None:
    """The raw body, read chunk by chunk; ``None`` as soon as it exceeds ``max_bytes`` (nothing more is read)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        return None
    received = bytearray()
    async for chunk in request.stream():
        received.extend(chunk)
        if len(received) > max_bytes:
            return None
    return bytes(received)


#: What :func:`read_body` answers when the client left (or missed ``--body-timeout``) before its body was read.
GONE = "the client closed the connection before sending the whole request body"


async def read_body(
    request: Request, *required: str, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES
) -> dict[str, Any] | JSONResponse:
    """The body as a JSON object (``{}`` when empty), or a 400/413 answer naming what is wrong with it.

    Args:
        request: The incoming request.
        *required: Keys the object must have.
        max_bytes: Largest body accepted; a larger one gets a 413 answer.
    """
    try:
        raw = await read_limited(request, max_bytes)
    except ClientDisconnect:
        return bad_request(GONE)  # nobody reads it; the request ends without a traceback in the log
    if raw is None:
        return too_large(max_bytes)
    if not raw.strip():
        data: Any = {}
    else:
        try:
            data = parse_json(raw, "the request body")
        except ValueError as error:  # malformed, or nested too deeply for Python's parser
            return bad_request(str(error))
    if not isinstance(data, dict):
        return bad_request(f"the request body must be a JSON object, got {type(data).__name__}")
    missing = [key for key in required if key not in data]
    if missing:
        return bad_request(f"the request body lacks {', '.join(missing)}")
    return data


@dataclass(frozen=True)
class ServerLimits:
    """Connection limits of one server (the ``--limit-concurrency --timeout-keep-alive --body-timeout`` flags).

    Args:
        limit_concurrency: Connections served at once; uvicorn answers 503 to requests beyond that.
        timeout_keep_alive: Seconds an idle keep-alive connection stays open.
        body_timeout: Seconds a request has to deliver its whole body.
    """

    limit_concurrency: int = 256
    timeout_keep_alive: int = 5
    body_timeout: float = 60.0

    def __post_init__(self) -> None:
        check_number(self.limit_concurrency, "--limit-concurrency", 2, MAX_COUNT, integer=True)
        check_number(self.timeout_keep_alive, "--timeout-keep-alive", 1, MAX_SECONDS, integer=True, unit="seconds")
        check_seconds(self.body_timeout, "--body-timeout")


def _json_message(status: int, payload: dict[str, Any], *, close: bool) -> tuple[dict, dict]:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    return ({"type": "http.response.start", "status": status, "headers": headers},
            {"type": "http.response.body", "body": body, "more_body": False})


class BodyDeadline:
    """ASGI middleware: a request that has not delivered its whole body ``seconds`` after it arrived gets a 408
    ``{"error"}`` answer and its connection is closed; the app then sees the client as gone.

    Only the body is timed: a streamed answer may take as long as it needs.
    """

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        state = {"body_done": False, "started": False, "timed_out": False}

        async def timed_receive() -> dict:
            if state["body_done"]:
                return await receive()
            if state["timed_out"]:
                return {"type": "http.disconnect"}
            try:
                message = await asyncio.wait_for(receive(), timeout=max(deadline - loop.time(), 0.0))
            except asyncio.TimeoutError:
                state["timed_out"] = True
                logger.warning("a request to %s sent no complete body within %g s; closed", scope.get("path"), self.seconds)
                if not state["started"]:
                    message = (f"the request body did not arrive within {self.seconds:g} s (--body-timeout); "
                               "send the whole body at once")
                    for part in _json_message(408, {"error": message}, close=True):
                        await send(part)
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                state["body_done"] = True
            return message

        async def guarded_send(message: dict) -> None:
            if state["timed_out"]:
                return  # the 408 answer went out already
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        await self.app(scope, timed_receive, guarded_send)


class PendingLimit:
    """ASGI middleware: at most ``max_requests`` requests to ``paths`` held at once, together carrying at most
    ``max_bytes`` of body; a request beyond either bound is refused at once, before its body is read.

    A request counts from its arrival to the end of its answer, by its declared ``Content-Length`` (a body
    without one counts as ``max_request_bytes``, the largest it may be).

    Args:
        app: The app to guard.
        paths: Paths the bound applies to (other requests pass through).
        max_requests: Requests held at once.
        max_bytes: Body bytes held at once.
        max_request_bytes: Largest body of one request (``--max-request-mb``).
        refusal: ``message -> (status, JSON payload)`` of the answer to a refused request.
    """

    def __init__(self, app: ASGIApp, *, paths: Collection[str], max_requests: int, max_bytes: int, max_request_bytes: int,
                 refusal: Callable[[str], tuple[int, dict[str, Any]]]) -> None:
        if max_bytes < max_request_bytes:
            raise ValueError(f"--max-pending-mb must be at least --max-request-mb, got {max_bytes / 2**20:g} < {max_request_bytes / 2**20:g}")
        self.app, self.paths, self.refusal = app, frozenset(paths), refusal
        self.max_requests, self.max_bytes, self.max_request_bytes = max_requests, max_bytes, max_request_bytes
        self.requests = 0
        self.bytes = 0

    def _declared(self, scope: dict) -> int:
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit():
                return min(int(value), self.max_request_bytes + 1)
        return self.max_request_bytes

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        size = self._declared(scope)
        if self.requests >= self.max_requests or self.bytes + size > self.max_bytes:
            message = (f"the server is busy: it already holds {self.requests} requests ({self.bytes / 2**20:.1f} MiB), "
                       "as many as it accepts; try again in a moment")
            status, payload = self.refusal(message)
            # The unread body is discarded by the server as it arrives; the connection stays usable.
            for part in _json_message(status, payload, close=False):
                await send(part)
            return
        self.requests += 1
        self.bytes += size
        try:
            await self.app(scope, receive, send)
        finally:
            self.requests -= 1
            self.bytes -= size


def uvicorn_server(app: Any, host: str, port: int, limits: ServerLimits = ServerLimits(), *, log_level: str = "warning") -> Any:
    """A ``uvicorn.Server`` for ``app`` under ``limits`` (body deadline, connection limit, keep-alive timeout)."""
    import uvicorn

    config = uvicorn.Config(
        BodyDeadline(app, limits.body_timeout), host=host, port=port, log_level=log_level,
        limit_concurrency=limits.limit_concurrency, timeout_keep_alive=limits.timeout_keep_alive,
    )
    return uvicorn.Server(config)


__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "BodyDeadline",
    "PendingLimit",
    "ServerLimits",
    "bad_request",
    "read_body",
    "read_limited",
    "too_large",
    "uvicorn_server",
]
