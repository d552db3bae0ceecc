"""CPU latency of our BracoCoder next to the official full-lattice computation, in one run.

    python benchmarks/coder.py [--batch-sizes 1 8] [--budgets 4 9 16 25] [--dim 1024] [--tokens 576]
                               [--warmup 10] [--iters 50] [--json FILE]

Both sides run the same weights in fp32 under ``torch.inference_mode`` on the same thread count. The
reference is :func:`braco_patch.reference.official_forward` (full N x N DCT, embedding over the whole
lattice, host-side temperature), i.e. the official computation written out. Prints the median and the
interquartile range of the per-call wall time and the ratio ours / official.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from braco_patch import BracoCoder, BracoConfig
from braco_patch.reference import official_forward


def _time_ms(fn, warmup: int, iters: int) -> tuple[float, float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    q = statistics.quantiles(samples, n=4)
    return statistics.median(samples), q[2] - q[0]


def run(args: argparse.Namespace) -> list[dict]:
    torch.manual_seed(0)
    rows = []
    for budget in args.budgets:
        coder = BracoCoder.from_config(args.dim, BracoConfig.from_budget(budget)).eval()
        params = dict(coder.named_parameters())
        for bs in args.batch_sizes:
            x = torch.randn(bs, args.tokens, args.dim)
            with torch.inference_mode():
                if not torch.allclose(coder(x), official_forward(params, x, coder.config), atol=1e-4, rtol=1e-4):
                    raise RuntimeError(f"ours and the official computation disagree at K={budget}, batch {bs}")
                ours, ours_iqr = _time_ms(lambda: coder(x), args.warmup, args.iters)
                ref, ref_iqr = _time_ms(lambda: official_forward(params, x, coder.config), args.warmup, args.iters)
            rows.append({"budget": budget, "name": coder.config.name, "batch": bs, "ours_ms": ours, "ours_iqr_ms": ours_iqr,
                         "official_ms": ref, "official_iqr_ms": ref_iqr, "ratio": ours / ref})
            print(f"K={budget:>3} ({coder.config.name:<9}) bs={bs:<3} ours {ours:8.2f} ms (IQR {ours_iqr:.2f})  "
                  f"official {ref:8.2f} ms (IQR {ref_iqr:.2f})  ratio {ours / ref:.2f}", flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", "--batch_sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--budgets", type=int, nargs="+", default=[4, 9, 16, 25])
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=576)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--json", default=None, help="also write the rows and the machine description here")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, fp32, "
          f"{args.tokens} tokens x {args.dim}")
    rows = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
