#!/bin/bash
# Run THERE, on a GPU machine, from the repository root (issues 15, 29, 33): `make gpu-check` runs every step. With the
# device tool (at most 10 minutes a command, 15 minutes of device time in all): first `bash scripts/gpu/fetch_wheels.sh`
# here, then two calls back to back (the second while the machine is still warm), each with carry [".whl"]. The
# calls that measured docs/BENCHMARKS.md's figures of 2026-11-27 (docs/gpu/h200-2026-11-27/README.md):
#   GPU_CHECK_STEPS="fast answer bench coder" GPU_CHECK_BUDGET_S=460 GPU_BENCH_ARGS="--batch-sizes 32 --fast none" \
#       bash scripts/gpu/check.sh
#   GPU_CHECK_STEPS="answer-batch cost tests" GPU_CHECK_BUDGET_S=255 bash scripts/gpu/check.sh
# What they left for the next lent machine (the seeded-sampling fix and --fast compile with Braco, both untested on
# CUDA; --fast compile's speed; reading ahead; DeepSpeed ZeRO-2/3 and the fused-coder tests):
#   GPU_CHECK_STEPS="fast answer-compile prefetch" GPU_CHECK_BUDGET_S=460 bash scripts/gpu/check.sh
#   GPU_CHECK_STEPS="tests" GPU_CHECK_BUDGET_S=300 GPU_TEST_TIMEOUT_S=150 bash scripts/gpu/check.sh
# Each installs the carried wheels and the project (offline), then runs its steps in that order, time-boxed; a failed
# step does not stop the next. Results go to $OUT (or outputs/gpu):
#   gpu_fast.log, gpu_fast.xml     the fast generation path's GPU tests (tests/gpu/test_fast_generation.py)
#   answer_speed.json, .log        answering through the eval core (the model_vqa* loaders' loop), 7B shape, batch 1:
#                                  TTFT, decode, questions/s, eager vs --fast cudagraph, vanilla / Braco-16 /
#                                  PruMerge-16, with a torch.profiler summary of the first token and of an answer
#   answer_speed_batch.json, .log  the same at batch 8 and 32 (Braco-16 first), profiled at batch 32
#   answer_speed_compile.json, .log  batch 1, eager vs --fast compile (Braco-16, vanilla)
#   loader_prefetch.json, .log     the loaders' loop reading the next batch ahead vs in turn (questions/s)
#   coder_speed.json, coder_speed.log  the Braco coder: fused vs step-by-step, eager / CUDA graph / torch.compile
#   gpu_bench.json, gpu_bench.log  matmul peak, braco cost --measure rows (compressor, prefill) with % of the peak
#   gpu_cost.json, gpu_cost.log    braco cost --measure: every projector type at K = 16 (the module as built)
#   gpu_cost_reducers.json, .log   braco cost --reducer ... --measure: the in-LLM reducers' prefill against vanilla's
#   gpu_tests.log, gpu_tests.xml   the other GPU tests (pytest -m gpu tests/gpu; JUnit XML)
#   gpu_train.json, gpu_train.log  stage-2 training step, vanilla vs Braco-16 (LoRA, 7B shape)
#   summary.txt                    one screen: versions, device, what passed, failed or could not run
# Environment: GPU_CHECK_STEPS (all of "fast answer bench coder answer-batch answer-compile prefetch cost
# cost-reducers tests train" by default, for a machine without a time limit), GPU_CHECK_BUDGET_S (total seconds,
# default 540), GPU_ANSWER_ARGS (the answer steps' shape and device flags, default "--device cuda --dtype float16";
# "--device cpu --layers 1 --shrink 64" checks their wiring on a CPU), GPU_BENCH_ARGS (extra flags of
# benchmarks/gpu_prefill.py), GPU_TEST_TIMEOUT_S (each GPU test's time box where pytest-timeout is installed,
# default 120).
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

# step NAME SECONDS LOG COMMAND...: run with a time box no longer than what is left, its output into LOG; record
# the outcome in the summary and append LOG's last lines (as many as TAIL says, default 25).
step() {
    local name=$1 limit=$2 log=$3; shift 3
    local remaining; remaining=$(left)
    if [ "$remaining" -lt 20 ]; then note "SKIPPED  $name (time budget spent)"; FAILURES=$((FAILURES + 1)); return; fi
    [ "$limit" -gt "$remaining" ] && limit=$remaining
    local t0; t0=$(date +%s)
    timeout "$limit" "$@" > "$log" 2>&1
    local rc=$?
    local took=$(( $(date +%s) - t0 ))
    case $rc in
        0) note "PASSED   $name (${took} s)" ;;
        124) note "TIMEOUT  $name (after ${limit} s)"; FAILURES=$((FAILURES + 1)) ;;
        *) note "FAILED   $name (exit $rc, ${took} s)"; FAILURES=$((FAILURES + 1)) ;;
    esac
    tail -n "${TAIL:-25}" "$log" >> "$SUMMARY"
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

STEPS=${GPU_CHECK_STEPS:-fast answer bench coder answer-batch answer-compile prefetch cost cost-reducers tests train}
has() { [[ " $STEPS " == *" $1 "* ]]; }
ANSWER_ARGS=${GPU_ANSWER_ARGS:---device cuda --dtype float16}
if has fast; then
    TAIL=15 step "GPU fast-path tests" 100 "$OUT/gpu_fast.log" \
        python3 -m pytest -q -m gpu tests/gpu/test_fast_generation.py -rs --junitxml "$OUT/gpu_fast.xml"
fi
# answer NAME SECONDS FLAGS...: benchmarks/answer_speed.py into $OUT/NAME.json and .log, stopping 30 s before its box.
answer() {
    local name=$1 limit=$2; shift 2
    local remaining; remaining=$(left)
    [ "$limit" -gt "$remaining" ] && limit=$remaining
    # shellcheck disable=SC2086  # ANSWER_ARGS is a list of flags
    step "answering speed ($name)" "$limit" "$OUT/$name.log" python3 benchmarks/answer_speed.py \
        --cache "${GPU_ANSWER_CACHE:-/tmp/llava-answer-speed}" $ANSWER_ARGS --budget-s $((limit > 60 ? limit - 30 : limit / 2)) \
        "$@" --out "$OUT/$name.json"
}
if has answer; then
    answer answer_speed 170 --batch-sizes 1 --profile-batches 1
fi
if has bench; then
    # shellcheck disable=SC2086  # GPU_BENCH_ARGS is a list of flags
    TAIL=40 step "GPU prefill benchmarks" 300 "$OUT/gpu_bench.log" \
        python3 benchmarks/gpu_prefill.py ${GPU_BENCH_ARGS:-} --out "$OUT/gpu_bench.json"
fi
if has coder; then
    TAIL=12 step "Braco coder timing" 90 "$OUT/coder_speed.log" bash scripts/gpu/coder_timing.sh "$OUT"
fi
if has answer-batch; then
    answer answer_speed_batch 150 --batch-sizes 8 32 --profile-batches 32 --projectors braco_c3s7 mlp2x_gelu prumerge_k16
fi
if has answer-compile; then  # --fast compile on CUDA: inductor's kernels captured (compiling a 7B step takes minutes)
    answer answer_speed_compile 300 --batch-sizes 1 --fast none compile --projectors braco_c3s7 mlp2x_gelu
fi
if has prefetch; then  # the loaders' loop reading the next batch ahead, against reading in turn (7B shape, batch 1)
    step "loader prefetch" 150 "$OUT/loader_prefetch.log" python3 benchmarks/loader_prefetch.py \
        --cache "${GPU_ANSWER_CACHE:-/tmp/llava-answer-speed}" --device cuda --out "$OUT/loader_prefetch.json"
fi
if has cost; then
    TAIL=16 step "braco cost, every projector type at K = 16" 90 "$OUT/gpu_cost.log" python3 -m braco_patch.cli cost \
        --measure --device cuda --projector all --budgets 16 --parts boundary --warmup 10 --iters 50 --json "$OUT/gpu_cost.json"
fi
if has cost-reducers; then
    TAIL=12 step "braco cost, the in-LLM reducers" 120 "$OUT/gpu_cost_reducers.log" python3 -m braco_patch.cli cost \
        --measure --device cuda --reducer fastv_k2_r50 pyramiddrop_s8_r50 sparsevlm_k192 dart_k128 --json "$OUT/gpu_cost_reducers.json"
fi
if has tests; then
    # one slow case (DeepSpeed ZeRO-3 took over 130 s on 2026-11-26) must not cost the others: a time box per test
    PER_TEST=$(python3 -c "import pytest_timeout" >/dev/null 2>&1 && echo "--timeout ${GPU_TEST_TIMEOUT_S:-120}")
    # shellcheck disable=SC2086  # PER_TEST is empty or one flag
    step "GPU tests" 300 "$OUT/gpu_tests.log" python3 -m pytest -q -m gpu tests/gpu --ignore tests/gpu/test_fast_generation.py \
        -rs $PER_TEST --junitxml "$OUT/gpu_tests.xml"
fi
if has train; then
    TAIL=8 step "GPU training step" 480 "$OUT/gpu_train.log" python3 benchmarks/gpu_train_step.py --out "$OUT/gpu_train.json"
fi
note "total $(( $(date +%s) - START )) s; $FAILURES step(s) did not pass"
[ "$FAILURES" -eq 0 ]
