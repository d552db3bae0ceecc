"""The worker's concurrency gate: at most ``limit`` requests use the model at once, the rest wait and count."""

from __future__ import annotations

import asyncio

import pytest

from llava.serve.model_worker import ConcurrencyGate


def test_gate_bounds_concurrency_and_counts_the_queue() -> None:
    async def scenario() -> tuple[int, int, int]:
        gate = ConcurrencyGate(3)
        running, peak, peak_queue = 0, 0, 0

        async def request() -> None:
            nonlocal running, peak
            async with gate:
                running += 1
                peak = max(peak, running)
                await asyncio.sleep(0.01)
                running -= 1

        async def monitor(task: asyncio.Future) -> None:
            nonlocal peak_queue
            while not task.done():
                peak_queue = max(peak_queue, gate.queue_length)
                await asyncio.sleep(0.001)

        requests = asyncio.gather(*(request() for _ in range(20)))
        await asyncio.gather(requests, monitor(requests))
        return peak, peak_queue, gate.queue_length

    peak, peak_queue, final_queue = asyncio.run(scenario())
    assert peak == 3
    assert peak_queue == 20  # three running, seventeen waiting
    assert final_queue == 0


def test_gate_releases_on_errors() -> None:
    async def scenario() -> int:
        gate = ConcurrencyGate(1)
        for _ in range(3):
            with pytest.raises(RuntimeError):
                async with gate:
                    raise RuntimeError("bad request")
        async with gate:
            return gate.queue_length

    assert asyncio.run(scenario()) == 1


def test_gate_limit_is_checked() -> None:
    with pytest.raises(ValueError, match="limit_model_concurrency must be at least 1, got 0"):
        ConcurrencyGate(0)


# ------------------------------------------------------------------------------------------------ request limits
# (issue 14, item 8: a 150 MB body was read whole, and any number of images was accepted)

import base64  # noqa: E402

from fastapi.testclient import TestClient  # noqa: E402

from llava.serve import controller as controller_module  # noqa: E402
from llava.serve.model_worker import build_parser, create_app  # noqa: E402
from llava.serve.protocol import CHUNK_DELIMITER  # noqa: E402

from .conftest import png_bytes  # noqa: E402


def _worker_client(engine, max_request_bytes: int) -> TestClient:
    return TestClient(create_app(engine, ConcurrencyGate(1), max_request_bytes=max_request_bytes))


def test_oversized_body_gets_413_before_it_is_read(braco_engine) -> None:
    client = _worker_client(braco_engine, max_request_bytes=1024)
    body = b'{"prompt": "' + b"x" * 5000 + b'"}'
    answer = client.post("/worker_generate_stream", content=body)
    assert answer.status_code == 413
    assert answer.json() == {"error": "the request body is larger than the 1024 bytes this server accepts (--max-request-mb); send smaller or fewer images"}

    # No Content-Length (chunked upload): the streaming read stops at the limit as well.
    def pieces():
        for _ in range(10):
            yield b"y" * 512

    answer = client.post("/worker_get_compressor_view", content=pieces())
    assert answer.status_code == 413 and "larger than" in answer.json()["error"]


def test_body_under_the_limit_is_served(braco_engine) -> None:
    client = _worker_client(braco_engine, max_request_bytes=1024 * 1024)
    answer = client.post("/worker_generate_stream", json={"prompt": "USER: hi ASSISTANT:", "max_new_tokens": 2, "temperature": 0})
    chunks = [piece for piece in answer.content.split(CHUNK_DELIMITER) if piece]
    assert answer.status_code == 200 and chunks


def test_too_many_images_are_refused_in_one_sentence(braco_engine) -> None:
    client = _worker_client(braco_engine, max_request_bytes=32 * 1024 * 1024)
    image = base64.b64encode(png_bytes((16, 16))).decode()
    limit = braco_engine.image_limits.max_images
    count = limit + 1
    prompt = "USER: " + "<image>\n" * count + "what? ASSISTANT:"
    answer = client.post("/worker_generate_stream", json={"prompt": prompt, "images": [image] * count})
    [chunk] = [piece for piece in answer.content.split(CHUNK_DELIMITER) if piece]
    import json

    message = json.loads(chunk)
    assert message["error_code"] == 1
    assert message["text"] == f"The request carries {count} images, more than the {limit} this server accepts per request; send fewer images."


def test_limit_flags_have_documented_defaults() -> None:
    args = build_parser().parse_args(["--model-path", "x"])
    assert (args.max_request_mb, args.max_images) == (32.0, 8)
    assert build_parser().parse_args(["--max_images", "2", "--max-request-mb", "1.5"]).max_images == 2
    assert controller_module.build_parser().parse_args([]).max_request_mb == 32.0


def test_controller_caps_bodies_too() -> None:
    ctrl = controller_module.Controller("shortest_queue", 30.0)
    client = TestClient(controller_module.create_app(ctrl, max_request_bytes=100))
    answer = client.post("/register_worker", content=b'{"worker_name": "' + b"w" * 200 + b'"}')
    assert answer.status_code == 413


def test_old_k05_a_body_nested_too_deeply_is_a_400_on_every_server(braco_engine) -> None:
    # Before: json's RecursionError passed the ValueError handler: HTTP 500 and a traceback in the worker's log.
    deep = b"[" * 200_000 + b"]" * 200_000
    worker = _worker_client(braco_engine, max_request_bytes=1024 * 1024)
    controller = TestClient(controller_module.create_app(controller_module.Controller(), max_request_bytes=1024 * 1024))
    for client, path in ((worker, "/worker_generate_stream"), (worker, "/worker_get_compressor_view"),
                         (controller, "/register_worker"), (controller, "/worker_generate_stream")):
        answer = client.post(path, content=deep, headers={"Content-Type": "application/json"})
        assert answer.status_code == 400, path
        assert answer.json() == {"error": "the request body is not valid JSON (nested too deeply)"}, path
