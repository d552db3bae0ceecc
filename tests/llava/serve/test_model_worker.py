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
