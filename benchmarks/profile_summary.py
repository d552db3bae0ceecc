"""Where the time of one call goes, in a few numbers: a ``torch.profiler`` pass summarised for a benchmark row.

    from profile_summary import profile_call
    summary = profile_call(lambda: model.generate(**call), torch.device("cuda"))

On CUDA: the GPU kernels the call ran (those replayed from a CUDA graph included), the time at least one kernel was
running (the union of their intervals, "GPU busy") against the call's wall time under the profiler, the aten ops
Python dispatched, and the kernels that took the most time, grouped by name. On a CPU, where there are no kernels,
the same summary of the aten ops (busy = their self CPU time). The profiler slows the host side, so "wall" here
is an upper bound of the unprofiled call: read the busy share as "how idle the GPU is at least".
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Callable

import torch

from llava.cost.kineto import without_trace_markers


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of ``(start, end)`` intervals."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def profile_call(fn: Callable[[], Any], device: torch.device, top: int = 8) -> dict[str, Any]:
    """Run ``fn`` once under ``torch.profiler`` and summarise it (module docstring)."""
    cuda = device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize(device)
    with without_trace_markers(), torch.profiler.profile(activities=activities) as prof:
        started = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        wall_us = (time.perf_counter() - started) * 1e6
    events = prof.events()
    host = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    dispatched = [e for e in host if e.name.startswith("aten::")
                  and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
    if cuda:
        timed = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        spans = [(e.time_range.start, e.time_range.end) for e in timed]
        busy_us = _union_us(spans)
    else:
        timed = dispatched
        busy_us = sum(e.self_cpu_time_total for e in host)
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for event in timed:
        entry = by_name[event.name]
        entry[0] += 1
        entry[1] += event.time_range.elapsed_us() if cuda else event.cpu_time_total
    total = sum(us for _, us in by_name.values()) or 1.0
    ranked = sorted(by_name.items(), key=lambda item: -item[1][1])[:top]
    return {
        "kind": "gpu kernels" if cuda else "aten ops",
        "count": len(timed),
        "aten_ops": len(dispatched),
        "wall_ms": round(wall_us / 1e3, 3),
        "busy_ms": round(busy_us / 1e3, 3),
        "busy_share": round(busy_us / wall_us, 3) if wall_us else None,
        "top": [{"name": name[:90], "count": int(count), "ms": round(us / 1e3, 3), "share": round(us / total, 3)}
                for name, (count, us) in ranked],
    }


def summary_line(summary: dict[str, Any]) -> str:
    """One line for a log: counts, busy vs wall, and the three largest entries."""
    tops = "; ".join(f"{entry['name'][:40]} x{entry['count']} {entry['ms']:.2f} ms" for entry in summary["top"][:3])
    ops = f", {summary['aten_ops']} aten ops" if summary["kind"] != "aten ops" else ""
    return (f"{summary['count']} {summary['kind']}{ops}, busy {summary['busy_ms']:.2f} of "
            f"{summary['wall_ms']:.2f} ms wall ({100 * (summary['busy_share'] or 0):.0f} %); top: {tops}")
