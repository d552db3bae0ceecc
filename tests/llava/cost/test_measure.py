"""Measurement helpers: the CPU memory account counted by hand, timing statistics."""

import torch

from llava.cost.measure import LiveTensorBytes, peak_memory, profiler_flops, time_call


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


def test_profiler_flops_split():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    counts = profiler_flops(lambda: (a @ b) + 1, torch.device("cpu"))
    assert counts == {"profiler_matmul": 2 * 4 * 8 * 3, "profiler_total": 2 * 4 * 8 * 3 + 12}
