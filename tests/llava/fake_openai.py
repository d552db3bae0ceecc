"""A loopback OpenAI-compatible server for the client tests: ``/v1/models`` and ``/v1/chat/completions`` (whole or
streamed as server-sent events), answering with a function of the question and its images.

It reads messages the way vLLM does for a template that takes text content: each user turn's ``image_url`` parts
(data URLs, decoded to PIL images) and its text. Misbehaviour for the fault cases is scripted per test through
:class:`~tests.llava.http_server.Handled` in the tests themselves.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from .http_server import Handled, ScriptedServer, scripted_server

#: answer(question, images, body) -> text
Answer = Callable[[str, list[Image.Image], dict[str, Any]], str]


def decode_data_url(url: str) -> Image.Image:
    head, _, data = url.partition(",")
    if not head.startswith("data:image/") or not head.endswith(";base64"):
        raise ValueError(f"not a base64 image data URL: {url[:40]!r}")
    return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


def last_user_turn(body: dict[str, Any]) -> tuple[str, list[Image.Image]]:
    """The last user message's text and images."""
    content = [message for message in body["messages"] if message["role"] == "user"][-1]["content"]
    if isinstance(content, str):
        return content, []
    images = [decode_data_url(part["image_url"]["url"]) for part in content if part["type"] == "image_url"]
    text = "\n".join(part["text"] for part in content if part["type"] == "text")
    return text, images


@dataclass
class FakeOpenAI:
    """What a test sets and reads: the served model, the answer function, and the bodies received."""

    model: str
    answer: Answer
    bodies: list[dict[str, Any]] = field(default_factory=list)
    server: ScriptedServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url + "/v1"

    def handle(self, handled: Handled) -> None:
        seen = handled.seen
        if seen.method == "GET" and seen.path == "/v1/models":
            handled.reply(200, json.dumps({"object": "list", "data": [{"id": self.model, "object": "model"}]}).encode())
            return
        if seen.method != "POST" or seen.path != "/v1/chat/completions":
            handled.reply(404, json.dumps({"error": {"message": f"no route {seen.path}"}}).encode())
            return
        body = json.loads(seen.body)
        self.bodies.append(body)
        question, images = last_user_turn(body)
        text = self.answer(question, images, body)
        if not body.get("stream"):
            reply = {"model": self.model, "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
            handled.reply(200, json.dumps(reply).encode(), {"Content-Type": "application/json"})
            return
        handled.start(200, {"Content-Type": "text/event-stream"})
        for piece in [text[i:i + 3] for i in range(0, len(text), 3)]:
            chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
            handled.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        handled.write(b"data: [DONE]\n\n")


@contextmanager
def fake_openai(model: str, answer: Answer) -> Iterator[FakeOpenAI]:
    """Serve a :class:`FakeOpenAI` on a free loopback port for the duration of the block."""
    fake = FakeOpenAI(model, answer)
    with scripted_server(fake.handle) as server:
        fake.server = server
        yield fake
