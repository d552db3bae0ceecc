#!/usr/bin/env bash
# The official Braco evaluation launcher's interface (zrrraa/Braco scripts/evaluate.sh), run by this repository:
#   bash scripts/evaluate.sh BUDGET SEED
# evaluates $REPRO_ROOT/outputs/braco/k<BUDGET>/seed<SEED>/stage2 (through the llava-braco link next to it, the official
# layout) on each benchmark of configs/benchmarks.txt (GQA, MMBench-EN/CN, MME, POPE, ScienceQA, TextVQA, MM-Vet) with
# scripts/eval_one.sh: answers and scores in .../evaluation/<benchmark>/, then .../evaluation/COMPLETE. Greedy decoding,
# vicuna_v1 template, one GPU. Benchmark data comes from $DATA_ROOT/eval/<benchmark>/ (paths in scripts/eval_one.sh).
# Environment: see scripts/braco_common.sh; BENCHMARKS="pope textvqa" evaluates a subset.
source "$(dirname "$0")/braco_common.sh"
braco_arguments "$@"

require_dir "$STAGE2" "the stage-2 checkpoint of this run (train it with scripts/train_braco.sh $BUDGET $SEED)"
RESULT_ROOT="$RUN_ROOT/evaluation"
writable_folder "$RESULT_ROOT"
MODEL_PATH="$RUN_ROOT/llava-braco"
if ! dry_run; then
    # The official layout: a llava-braco link to stage2 (upstream LLaVA picks its loader from the folder name).
    if [[ ! -e "$MODEL_PATH" && ! -L "$MODEL_PATH" ]]; then
        ln -s stage2 "$MODEL_PATH"
    fi
    if [[ "$(readlink -f "$MODEL_PATH")" != "$(readlink -f "$STAGE2")" ]]; then
        fail "'$MODEL_PATH' exists but is not a link to '$STAGE2'; move it away so that the link can be made"
    fi
fi

if [[ -n "${BENCHMARKS:-}" ]]; then
    read -ra benchmarks <<< "$BENCHMARKS"
else
    benchmarks=()
    while IFS= read -r line; do
        [[ -z "$line" || "$line" == \#* ]] || benchmarks+=("$line")
    done < "$REPO_ROOT/configs/benchmarks.txt"
fi

export MODEL_PATH RESULT_ROOT DATA_ROOT BUDGET SEED NAME PYTHON
export METHOD=braco
for benchmark in "${benchmarks[@]}"; do
    bash scripts/eval_one.sh "$benchmark"
done
mark "$RESULT_ROOT/COMPLETE"
