"""Issue 15's GPU figures in one run: the machine's bf16 matmul peak, the Braco compressor at batch 1 (eager and
``--fast cudagraph``), and the LLaVA-1.5-7B-shaped prefill, vanilla vs Braco-16, at several batch sizes, each with
its share of the measured peak.

    python benchmarks/gpu_prefill.py --out outputs/gpu/gpu_bench.json              # on a GPU (fp16)
    python benchmarks/gpu_prefill.py --device cpu --layers 1 --batch-sizes 1 --iters 2 --out /tmp/b.json  # wiring
    python benchmarks/gpu_prefill.py --batch-sizes 32 --fast none --out b32.json   # batch-32 prefill vs the peak

Every latency comes from ``braco cost --measure`` (CUDA events, ``torch.cuda.max_memory_allocated``; random
weights of the preset's shape), run as a subprocess per setting; this script only adds the peak and the table.
Achieved throughput = the row's analytic FLOPs / its median time; "% of peak" divides that by the matmul peak.
Output: the JSON (every row, the header of each run, the peak) and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from llava.cost.measure import time_call
from llava.outputs import guard_outputs, write_json
from llava.utils import cli_main


def matmul_peak_tflops(device: str, size: int, repeats: int = 10) -> float:
    """bf16 TFLOP/s of a ``size``³ matrix product, median of ``repeats`` timed calls after warm-up (float32 on CPU,
    where bf16 is emulated); timed by ``braco cost``'s :func:`time_call` (CUDA events on a GPU)."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    timing = time_call(lambda: a @ b, torch.device(device), warmup=3, iters=repeats)
    return 2 * size**3 / (timing["median_ms"] / 1e3) / 1e12


def braco_cost(args: argparse.Namespace, parts: list[str], fast: str, batches: list[int]) -> dict[str, Any]:
    """``braco cost --measure`` for one setting; returns its ``measure`` section."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "cost.json"
        command = [sys.executable, "-m", "braco_patch.cli", "cost", "--measure", "--device", args.device, "--budgets", "16",
                   "--parts", *parts, "--fast", fast, "--batch-sizes", *map(str, batches), "--warmup", str(args.warmup),
                   "--iters", str(args.iters), "--json", str(out)]
        if args.dtype:
            command += ["--dtype", args.dtype]
        if args.layers:
            command += ["--layers", str(args.layers)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
        return json.loads(out.read_text())["measure"]


def rows_with_share(measure: dict[str, Any], part: str, fast: str, peak: float) -> list[dict[str, Any]]:
    rows = []
    for row in measure.get(part, []):
        if row.get("status") != "ok":
            rows.append({**row, "part": part, "fast": fast})
            continue
        tflops = row["analytic"] / (row["median_ms"] / 1e3) / 1e12
        rows.append({**row, "part": part, "fast": fast, "achieved_tflops": tflops, "percent_of_peak": 100 * tflops / peak})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| part | fast | batch | variant | median ms | peak MiB | TFLOP/s | % of peak |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if row.get("status") != "ok":
            lines.append(f"| {row['part']} | {row['fast']} | {row.get('batch')} | {row.get('variant')} | {row.get('status')} | | | |")
            continue
        lines.append(f"| {row['part']} | {row['fast']} | {row['batch']} | {row['variant']}"
                     f"{' ' + row['boundary'] if row.get('boundary') not in (None, '-') else ''} | {row['median_ms']:.3f} | "
                     f"{row['peak_bytes'] / 2**20:.1f} | {row['achieved_tflops']:.1f} | {row['percent_of_peak']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--dtype", default=None, help="default: braco cost's (float16 on cuda)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--layers", type=int, default=None, help="cap the LLM layers (CPU wiring check)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--matmul-size", type=int, default=8192)
    parser.add_argument("--fast", nargs="+", choices=["none", "cudagraph"], default=None,
                        help="paths to measure (default: none and cudagraph on cuda, none on cpu)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a GPU (use --device cpu to check the wiring)")
    guard_outputs(files={"--out": args.out})  # before the measurements: a folder or unwritable --out fails now

    size = args.matmul_size if args.device == "cuda" else min(args.matmul_size, 1024)
    peak = matmul_peak_tflops(args.device, size)
    print(f"matmul peak: {peak:.1f} TFLOP/s ({size}^3, {'bf16' if args.device == 'cuda' else 'fp32'})", flush=True)
    runs: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    fast_modes = args.fast or (["none", "cudagraph"] if args.device == "cuda" else ["none"])
    if args.device == "cpu" and "cudagraph" in fast_modes:
        parser.error("--fast cudagraph needs --device cuda")
    for fast in fast_modes:
        runs[f"boundary/{fast}"] = measure = braco_cost(args, ["boundary"], fast, [1])
        rows += rows_with_share(measure, "boundary", fast, peak)
        runs[f"pipeline/{fast}"] = measure = braco_cost(args, ["pipeline"], fast, args.batch_sizes)
        rows += rows_with_share(measure, "pipeline", fast, peak)
        print(markdown([row for row in rows if row["fast"] == fast]), flush=True)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "device": args.device,
              "matmul_peak_tflops": peak, "matmul_size": size, "rows": rows,
              "headers": {name: run.get("header", run) for name, run in runs.items()}}
    write_json(args.out, result)
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
