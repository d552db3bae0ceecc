"""The Braco coder alone: its fused form against the step-by-step form and its GEMM floor, and how many ops it issues.

A benchmark, not a test (issue 29 item 2). One coder (c3s7 on CLIP-L tokens ``[batch, 577, 1024]`` by default) with
random weights, in two forms: ``fused`` (the default ``BracoCoder``) and ``step-by-step`` (``coder.fused = False``,
the form before issue 29). Measured in one run:

- ops: the aten ops one eval call dispatches from Python (``torch.profiler`` events named ``aten::*`` whose parent
  is not an aten op; their children run inside them), and of those the ones that run a kernel (every op but the
  view and metadata ops: slice, view, reshape, expand, transpose, ...). With ``--compile``: the compiled call's
  kernels (the aten ops it still dispatches plus the C++/Triton kernels inductor generated). On CUDA also the GPU
  kernels the profiler records.
- time: the median time per call, the variants interleaved round by round so that a loaded machine slows them
  alike; ratios are medians of the per-round ratios. The GEMM floor is the coder's own matrix products alone,
  same shapes and dtype, back to back: the backbone ``[C², L] x [L, d]``, both scorer layers (``[L, d] x [d, d]``
  and ``[L, d] x [d, S]``, with bias) and the pooling ``[S, L] x [L, d]`` per image.
- equality: every timed variant's output against the step-by-step form's (relative Frobenius error).

    python benchmarks/coder_speed.py                          # CPU, float32, batch 1
    python benchmarks/coder_speed.py --threads 1 --compile    # also torch.compile(fullgraph=True)
    python benchmarks/coder_speed.py --device cuda --compile  # float16; eager, CUDA graph, torch.compile (with its
                                                              # own graphs, and inside one plain CUDA graph)
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from braco_patch import BracoCoder, BracoConfig  # noqa: E402
from llava.cost.measure import time_call  # noqa: E402
from llava.outputs import guard_outputs, write_json  # noqa: E402
from llava.utils import cli_main  # noqa: E402

#: Ops that only make a new view or read metadata: they run no kernel.
VIEW_OPS = frozenset({
    "slice", "view", "reshape", "expand", "transpose", "unsqueeze", "squeeze", "flatten", "permute", "t", "alias",
    "as_strided", "broadcast_tensors", "detach", "select", "narrow", "_unsafe_view", "unflatten", "numpy_T", "mT",
})


def build(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> tuple[BracoCoder, BracoCoder, torch.Tensor]:
    """The fused coder, its step-by-step twin (same weights) and an input, in eval mode."""
    torch.manual_seed(0)
    config = BracoConfig.from_name(args.allocation)
    fused = BracoCoder.from_config(args.dim, config).to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        fused.spatial_prior_weight.fill_(0.3)  # a non-zero prior, as after training
    step_by_step = copy.deepcopy(fused)
    step_by_step.fused = False
    x = torch.randn(args.batch, args.tokens, args.dim, device=device, dtype=dtype)
    return fused, step_by_step, x


def gemm_floor(coder: BracoCoder, x: torch.Tensor) -> Callable[[], Any]:
    """The coder's matrix products alone (module docstring), on operands made once."""
    tokens, grid = coder.split_tokens(x)
    op, _ = coder._operator(grid, tokens.dtype, tokens.device)
    scorer = coder.spatial_scorer
    first, last = scorer[1], scorer[-1]
    hidden = torch.randn(*tokens.shape[:2], first.out_features, device=x.device, dtype=x.dtype)
    weights = torch.rand(tokens.shape[0], coder.residual_tokens, tokens.shape[1], device=x.device, dtype=x.dtype)

    def run() -> None:
        torch.matmul(op, tokens)
        F.linear(tokens, first.weight, first.bias)
        F.linear(hidden, last.weight, last.bias)
        torch.bmm(weights, tokens)

    return run


def count_ops(fn: Callable[[], Any], device: torch.device) -> dict[str, int]:
    """Dispatched aten ops, the kernel-running ones, generated kernels (compiled code) and GPU kernels of one call."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.no_grad(), torch.profiler.profile(activities=activities) as prof:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    events = prof.events()
    cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    aten = [e for e in cpu if e.name.startswith("aten::") and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
    generated = [e for e in cpu if "cpp_fused" in e.name or e.name.startswith(("triton_", "graph_"))]
    counts = {
        "aten_ops": len(aten),
        "aten_kernel_ops": sum(e.name.removeprefix("aten::") not in VIEW_OPS for e in aten),
        "generated_kernels": len(generated),
    }
    if device.type == "cuda":
        counts["gpu_kernels"] = sum(e.device_type == torch.autograd.DeviceType.CUDA for e in events)
    return counts


def time_rounds(variants: dict[str, Callable[[], Any]], device: torch.device, rounds: int, iters: int) -> dict[str, list[float]]:
    """Per-round median ms of each variant (braco cost's timer), the variants interleaved within each round."""
    per_round: dict[str, list[float]] = {name: [] for name in variants}
    with torch.no_grad():
        for _ in range(rounds):
            for name, fn in variants.items():
                per_round[name].append(time_call(fn, device, warmup=0 if per_round[name] else 3, iters=iters)["median_ms"])
    return per_round


def fast_variants(args, fused, step_by_step, x, device) -> tuple[dict[str, Callable[[], Any]], dict[str, float]]:
    """CUDA graphs (CUDA) and torch.compile (``--compile``) of the coder; seconds each took to build."""
    variants: dict[str, Callable[[], Any]] = {}
    seconds: dict[str, float] = {}
    if device.type == "cuda":
        from llava.capture import CudaGraphCall

        with torch.no_grad():
            for name, coder in (("fused, CUDA graph", fused), ("step-by-step, CUDA graph", step_by_step)):
                graph = CudaGraphCall(coder, (x,))
                variants[name] = lambda graph=graph: graph(x)
    if args.compile:
        if device.type == "cpu":
            import torch._inductor.config as inductor_config

            inductor_config.cpp.enable_kernel_profile = True  # name each generated kernel in the profiler
        mode = "reduce-overhead" if device.type == "cuda" else None
        compiled = torch.compile(fused, fullgraph=True, mode=mode)
        start = time.perf_counter()
        with torch.no_grad():
            compiled(x)
        seconds["fused, torch.compile"] = time.perf_counter() - start
        variants["fused, torch.compile"] = lambda: compiled(x)
        if device.type == "cuda":  # inductor's kernels without its CUDA-graph trees, replayed from one plain graph
            from llava.capture import CudaGraphCall

            inductor = torch.compile(copy.deepcopy(fused), fullgraph=True, mode="default")  # a cache of its own
            start = time.perf_counter()
            with torch.no_grad():
                graph = CudaGraphCall(inductor, (x,))
            seconds["fused, torch.compile in a CUDA graph"] = time.perf_counter() - start
            variants["fused, torch.compile in a CUDA graph"] = lambda graph=graph: graph(x)
    return variants, seconds


def measure(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or ("float16" if device.type == "cuda" else "float32"))
    if args.threads:
        torch.set_num_threads(args.threads)
    fused, step_by_step, x = build(args, device, dtype)
    variants: dict[str, Callable[[], Any]] = {"step-by-step": lambda: step_by_step(x), "fused": lambda: fused(x)}
    with torch.no_grad():
        reference = step_by_step(x).double()
    extra, build_seconds = fast_variants(args, fused, step_by_step, x, device)
    variants.update(extra)
    rows: dict[str, dict[str, Any]] = {}
    with torch.no_grad():
        for name, fn in variants.items():
            out = fn().double()
            rows[name] = {"relative_error": float((out - reference).norm() / reference.norm()), **count_ops(fn, device)}
    variants["GEMM floor"] = gemm_floor(fused, x)
    rows["GEMM floor"] = count_ops(variants["GEMM floor"], device)
    load_before = os.getloadavg()
    per_round = time_rounds(variants, device, args.rounds, args.iters)
    load_after = os.getloadavg()
    floor = per_round["GEMM floor"]
    for name, samples in per_round.items():
        rows[name]["median_ms"] = statistics.median(samples)
        rows[name]["over_gemm_floor"] = statistics.median(a / b for a, b in zip(samples, floor))
    return {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "torch": torch.__version__, "dtype": str(dtype).removeprefix("torch."), "batch": args.batch,
        "input": [args.batch, args.tokens, args.dim], "allocation": args.allocation,
        "threads": torch.get_num_threads(), "rounds": args.rounds, "iters": args.iters,
        "load_average_before_after": [round(v, 2) for v in (*load_before, *load_after)],
        "build_seconds": build_seconds, "rows": rows,
    }


def cpu_name() -> str:
    """The CPU's model name and logical core count (``/proc/cpuinfo`` where there is one)."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
        model = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"{model}, {os.cpu_count()} logical cores"


def markdown(result: dict[str, Any]) -> str:
    lines = ["| variant | median ms | × GEMM floor | aten ops (kernel ops) | generated kernels | GPU kernels | rel. error |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, row in result["rows"].items():
        error = f"{row['relative_error']:.1e}" if "relative_error" in row else "–"
        lines.append(f"| {name} | {row['median_ms']:.3f} | {row['over_gemm_floor']:.3f} | {row['aten_ops']} ({row['aten_kernel_ops']}) "
                     f"| {row['generated_kernels']} | {row.get('gpu_kernels', '–')} | {error} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default=None, help="default: float32 on cpu, float16 on cuda")
    parser.add_argument("--allocation", default="c3s7", help="a Braco name (c3s7, k25, ...)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=577)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--iters", type=int, default=10, help="timed calls per variant and round")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile(coder, fullgraph=True)")
    parser.add_argument("--out", default=None, help="write the result as JSON here")
    args = parser.parse_args(argv)
    for name in ("batch", "tokens", "dim", "rounds", "iters"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA build of torch and a GPU; use --device cpu")
    guard_outputs(files={"--out": args.out})  # before the measurements: a folder or unwritable --out fails now
    threads = torch.get_num_threads()
    try:
        result = measure(args)
    finally:
        torch.set_num_threads(threads)  # main() may run inside another program (the tests)
    print(f"{result['command']}  ({result['date']}; {result['device']}, torch {result['torch']}, {result['dtype']}, "
          f"batch {result['batch']}, {result['threads']} threads, load {result['load_average_before_after']})")
    print(markdown(result))
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
