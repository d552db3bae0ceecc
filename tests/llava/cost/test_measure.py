"""Measurement helpers: the CPU memory account counted by hand, timing statistics."""

import torch

from llava.cost.measure import LiveTensorBytes, peak_memory, profiler_flops, time_call, time_calls


def test_live_tensor_bytes_by_hand():
    kept = torch.ones(1000)  # existed before: never counted

    def fn():
        a = torch.ones(1000)  # 4000 bytes
        b = a * 2  # +4000 -> 8000 live
        del a  # -> 4000
        c = b.view(10, 100)  # a view: no new storage
        d = c + kept.view(10, 100)  # +4000 -> 8000
        return d

    with LiveTensorBytes() as tracker:
        out = fn()
    assert tracker.peak == 8000
    assert tracker.current == 4000  # only the returned tensor is still alive
    del out
    assert peak_memory(fn, torch.device("cpu"))["peak_bytes"] == 8000


def test_time_call_counts_every_timed_call():
    calls = []
    stats = time_call(lambda: calls.append(1), torch.device("cpu"), warmup=3, iters=7)
    assert len(calls) == 10 and stats["median_ms"] >= 0 and stats["std_ms"] >= 0


def test_time_calls_interleaves_the_rounds():
    """Variants compared as a ratio take turns, warm-up included: a drift of the machine's load hits each alike."""
    calls = []
    stats = time_calls([lambda: calls.append("a"), lambda: calls.append("b")], torch.device("cpu"), warmup=1, iters=2)
    assert calls == ["a", "b"] * 3 and len(stats) == 2 and all(s["median_ms"] >= 0 for s in stats)


def test_profiler_flops_split():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    counts = profiler_flops(lambda: (a @ b) + 1, torch.device("cpu"))
    assert counts == {"profiler_matmul": 2 * 4 * 8 * 3, "profiler_total": 2 * 4 * 8 * 3 + 12}
