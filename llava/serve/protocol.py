"""The wire format shared by the controller, model workers and web servers (upstream LLaVA's).

``/worker_generate_stream`` answers with JSON objects separated by NUL bytes, each
``{"text": prompt + answer so far, "error_code": 0}``; a non-zero ``error_code`` ends the stream and its
``text`` is a message for the user. The codes:

* 0 — a partial (or the final) answer;
* 1 — the worker refused or failed the request (bad input, generation error);
* 2 — the controller knows no worker for the model;
* 3 — the worker could not be reached.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from llava.net import parse_json

OK = 0
WORKER_ERROR = 1
NO_WORKER = 2
WORKER_UNREACHABLE = 3

CHUNK_DELIMITER = b"\0"


@dataclass(frozen=True)
class StreamChunk:
    """One message of a generation stream: ``text`` and ``error_code`` as on the wire."""

    text: str
    error_code: int = OK

    @property
    def ok(self) -> bool:
        return self.error_code == OK

    def encode(self) -> bytes:
        """The chunk as sent: UTF-8 JSON followed by a NUL byte."""
        return json.dumps({"text": self.text, "error_code": self.error_code}).encode() + CHUNK_DELIMITER


def sentence(message: str) -> str:
    """``message`` as a sentence for the user: capitalised, ending in a full stop."""
    message = message.strip()
    if not message:
        return "The request failed."
    message = message[0].upper() + message[1:]
    return message if message.endswith((".", "!", "?")) else message + "."


def no_model_message(model: str) -> str:
    """What the user sees when no worker serves ``model``."""
    shown = f"'{model}'" if model else "the selected model"
    return (
        f"No model is available: no running worker serves {shown}. Start a model worker (python -m "
        "llava.serve.model_worker ...) and reload the page."
    )


def unreachable_message(address: str) -> str:
    return (
        f"The model worker at {address} cannot be reached; it may have stopped. Try again in a moment or reload "
        "the page."
    )


def decode_chunks(pieces: Iterable[bytes]) -> Iterator[StreamChunk]:
    """Parse a NUL-delimited stream (e.g. ``response.iter_lines(delimiter=b"\\0")``) into chunks.

    Raises:
        ValueError: If a piece is not a JSON object with ``text`` and ``error_code``.
    """
    for piece in pieces:
        if not piece:
            continue
        try:
            data: Any = parse_json(piece, "a stream chunk")
            yield StreamChunk(text=str(data["text"]), error_code=int(data["error_code"]))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"malformed stream chunk from the worker: {piece[:200]!r}") from None


__all__ = [
    "CHUNK_DELIMITER",
    "NO_WORKER",
    "OK",
    "WORKER_ERROR",
    "WORKER_UNREACHABLE",
    "StreamChunk",
    "decode_chunks",
    "no_model_message",
    "sentence",
    "unreachable_message",
]
