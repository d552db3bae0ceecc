#!/bin/bash
# Run THERE, on a GPU machine, from the repository root, after the offline install (scripts/gpu/check.sh runs it as
# its "coder" step). The Braco coder alone, c3s7 on CLIP-L tokens [1, 577, 1024] in float16 (issue 29's target: at
# most 50 µs per call in the fast path): the step-by-step and the fused forms, eager and under a CUDA graph, the fused
# form under torch.compile (reduce-overhead), and the GEMM floor of its matrix products; GPU kernels per call.
#   bash scripts/gpu/coder_timing.sh [OUT_DIR]        # writes OUT_DIR/coder_speed.json (default outputs/gpu)
set -euo pipefail

cd "$(dirname "$0")/../.."
OUT_DIR=${1:-outputs/gpu}
mkdir -p "$OUT_DIR"
python3 benchmarks/coder_speed.py --device cuda --dtype float16 --compile --rounds 10 --iters 20 \
    --out "$OUT_DIR/coder_speed.json"
