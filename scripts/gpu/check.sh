#!/bin/bash
# Run THERE, on a GPU machine, from the repository root (issue 15). With the device tool (at most 10 minutes a
# command): first `bash scripts/gpu/fetch_wheels.sh` here, then one call per line below, with carry [".whl"]:
#   GPU_CHECK_STEPS=tests bash scripts/gpu/check.sh
#   GPU_CHECK_STEPS=bench bash scripts/gpu/check.sh
#   GPU_CHECK_STEPS=train bash scripts/gpu/check.sh
#   GPU_CHECK_STEPS=coder bash scripts/gpu/check.sh   (the Braco coder alone, a few minutes: scripts/gpu/coder_timing.sh)
#   GPU_CHECK_STEPS="fast answer" bash scripts/gpu/check.sh    (issue 29; time boxes 150 + 300 s)
# Each installs the carried wheels and the project (offline), then runs its steps, time-boxed; a failed step does
# not stop the next. Results go to $OUT (or outputs/gpu):
#   gpu_tests.log, gpu_tests.xml   the GPU tests (pytest -m gpu tests/gpu; JUnit XML)
#   gpu_bench.json, gpu_bench.log  matmul peak, braco cost --measure rows (compressor, prefill; batch 1/8/32)
#   gpu_train.json, gpu_train.log  stage-2 training step, vanilla vs Braco-16 (LoRA, 7B shape)
#   gpu_fast.log, gpu_fast.xml     the fast generation path's GPU tests (tests/gpu/test_fast_generation.py)
#   answer_speed.json, .log        answering through the eval core, 7B shape: TTFT, decode, questions/s at batch
#                                  1/8/32, eager vs --fast cudagraph, vanilla / Braco-16 / PruMerge-16
#   coder_speed.json, coder_speed.log  the Braco coder: fused vs step-by-step, eager / CUDA graph / torch.compile
#   summary.txt                    one screen: versions, device, what passed, failed or could not run
# Environment: GPU_CHECK_STEPS ("tests bench train coder answer" by default, for a machine without a time limit),
# GPU_CHECK_BUDGET_S (total seconds, default 540), GPU_ANSWER_ARGS (the answer step's shape and device flags,
# default "--device cuda --dtype float16"; "--device cpu --layers 1 --shrink 64" checks its wiring on a CPU).
# Exit status: 0 when every step passed; 1 when a step failed, timed out or was skipped for lack of time (the
# summary says which); 2 when $OUT is a folder of someone else's files (it is left untouched), a file, or cannot be
# written.
set -uo pipefail

cd "$(dirname "$0")/../.."
OUT=${OUT:-outputs/gpu}
MARKER=.llava-output
if [ -e "$OUT" ] && [ ! -d "$OUT" ]; then
    echo "check.sh: error: OUT '$OUT' is a file, not a folder; choose an empty or new folder" >&2
    exit 2
fi
if [ -d "$OUT" ] && [ ! -f "$OUT/$MARKER" ] && [ -n "$(ls -A "$OUT")" ]; then
    echo "check.sh: error: OUT '$OUT' already holds files this script did not write; choose an empty or new folder" >&2
    exit 2
fi
if ! { mkdir -p "$OUT" && echo "written by scripts/gpu/check.sh; a re-run of it may replace this folder" > "$OUT/$MARKER"; } 2>/dev/null; then
    echo "check.sh: error: OUT '$OUT' cannot be written here; choose a writable folder" >&2
    exit 2
fi
START=$(date +%s)
FAILURES=0
BUDGET=${GPU_CHECK_BUDGET_S:-540}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }

# step NAME SECONDS COMMAND...: run with a time box no longer than what is left, record the outcome.
step() {
    local name=$1 limit=$2; shift 2
    local remaining; remaining=$(left)
    if [ "$remaining" -lt 20 ]; then note "SKIPPED  $name (time budget spent)"; FAILURES=$((FAILURES + 1)); return; fi
    [ "$limit" -gt "$remaining" ] && limit=$remaining
    local t0; t0=$(date +%s)
    timeout "$limit" "$@"
    local rc=$?
    local took=$(( $(date +%s) - t0 ))
    case $rc in
        0) note "PASSED   $name (${took} s)" ;;
        124) note "TIMEOUT  $name (after ${limit} s)"; FAILURES=$((FAILURES + 1)) ;;
        *) note "FAILED   $name (exit $rc, ${took} s)"; FAILURES=$((FAILURES + 1)) ;;
    esac
}

export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} && export PATH=/tmp/site/bin:$PATH
fi
# PEP 660 through pyproject.toml's setuptools backend: no build isolation, so no download (issue 29).
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . \
    || { note "FAILED   pip install -e . (offline)"; FAILURES=$((FAILURES + 1)); }
# Braco and the baselines register through the install's entry points; without them their tests cannot pass.
python3 -c "from importlib.metadata import entry_points as e; names = sorted(p.name for p in e(group='llava.projectors'))
print('llava.projectors entry points:', names); raise SystemExit(0 if {'braco', 'baselines'} <= set(names) else 1)" \
    2>&1 | tee -a "$SUMMARY" || { note "FAILED   the compressor plugins are not installed"; FAILURES=$((FAILURES + 1)); }

{
    echo "date $(date -u +%F\ %T) UTC"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
    python3 - <<'PY'
import importlib
for name in ("torch", "transformers", "deepspeed", "bitsandbytes", "flash_attn", "peft", "accelerate"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '?')}")
    except Exception as error:  # report, never stop: the summary says what could not run
        print(f"{name} missing ({type(error).__name__})")
import torch
print("cuda available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PY
} 2>&1 | tee -a "$SUMMARY"

STEPS=${GPU_CHECK_STEPS:-tests bench train coder answer}
if [[ " $STEPS " == *" tests "* ]]; then
    step "GPU tests" 300 python3 -m pytest -q -m gpu tests/gpu -rs \
        --junitxml "$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1
    tail -n 25 "$OUT/gpu_tests.log" >> "$SUMMARY"
fi
if [[ " $STEPS " == *" bench "* ]]; then
    step "GPU prefill benchmarks" 480 python3 benchmarks/gpu_prefill.py --out "$OUT/gpu_bench.json" > "$OUT/gpu_bench.log" 2>&1
    tail -n 40 "$OUT/gpu_bench.log" >> "$SUMMARY"
fi
if [[ " $STEPS " == *" train "* ]]; then
    step "GPU training step" 480 python3 benchmarks/gpu_train_step.py --out "$OUT/gpu_train.json" > "$OUT/gpu_train.log" 2>&1
    tail -n 8 "$OUT/gpu_train.log" >> "$SUMMARY"
fi
if [[ " $STEPS " == *" coder "* ]]; then
    step "Braco coder timing" 300 bash scripts/gpu/coder_timing.sh "$OUT" > "$OUT/coder_speed.log" 2>&1
    tail -n 12 "$OUT/coder_speed.log" >> "$SUMMARY"
fi
if [[ " $STEPS " == *" fast "* ]]; then
    step "GPU fast-path tests" 150 python3 -m pytest -q -m gpu tests/gpu/test_fast_generation.py -rs \
        --junitxml "$OUT/gpu_fast.xml" > "$OUT/gpu_fast.log" 2>&1
    tail -n 15 "$OUT/gpu_fast.log" >> "$SUMMARY"
fi
if [[ " $STEPS " == *" answer "* ]]; then
    # shellcheck disable=SC2086  # GPU_ANSWER_ARGS is a list of flags
    step "answering speed (eval core)" 300 python3 benchmarks/answer_speed.py --cache "${GPU_ANSWER_CACHE:-/tmp/llava-answer-speed}" \
        ${GPU_ANSWER_ARGS:---device cuda --dtype float16} --budget-s 240 --out "$OUT/answer_speed.json" > "$OUT/answer_speed.log" 2>&1
    tail -n 25 "$OUT/answer_speed.log" >> "$SUMMARY"
fi
note "total $(( $(date +%s) - START )) s; $FAILURES step(s) did not pass"
[ "$FAILURES" -eq 0 ]
