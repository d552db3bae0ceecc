"""Request-body helpers shared by the controller's and the model worker's FastAPI apps.

Bodies are read as a stream and cut off at a size limit (``--max-request-mb``, default 32 MiB), so a client
cannot make a server hold an arbitrarily large body in memory: a larger body gets a 413 answer
``{"error": "..."}`` naming the limit.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse


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


async def read_body(
    request: Request, *required: str, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES
) -> dict[str, Any] | JSONResponse:
    """The body as a JSON object (``{}`` when empty), or a 400/413 answer naming what is wrong with it.

    Args:
        request: The incoming request.
        *required: Keys the object must have.
        max_bytes: Largest body accepted; a larger one gets a 413 answer.
    """
    raw = await read_limited(request, max_bytes)
    if raw is None:
        return too_large(max_bytes)
    if not raw.strip():
        data: Any = {}
    else:
        try:
            data = json.loads(raw)
        except ValueError:
            return bad_request("the request body is not valid JSON")
    if not isinstance(data, dict):
        return bad_request(f"the request body must be a JSON object, got {type(data).__name__}")
    missing = [key for key in required if key not in data]
    if missing:
        return bad_request(f"the request body lacks {', '.join(missing)}")
    return data


__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "bad_request", "read_body", "read_limited", "too_large"]
