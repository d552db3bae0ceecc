"""Request-body helpers shared by the controller's and the model worker's FastAPI apps."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse


def bad_request(message: str) -> JSONResponse:
    """A 400 answer ``{"error": message}``."""
    return JSONResponse({"error": message}, status_code=400)


async def read_body(request: Request, *required: str) -> dict[str, Any] | JSONResponse:
    """The body as a JSON object (``{}`` when empty), or a 400 answer naming what is wrong with it.

    Args:
        request: The incoming request.
        *required: Keys the object must have.
    """
    raw = await request.body()
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


__all__ = ["bad_request", "read_body"]
