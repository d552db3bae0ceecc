#!/bin/bash
# MME: answers converted to eval_tool/answers/$CKPT/<category>.txt and scored (perception + cognition,
# written to $RESULTS/mme.json).
# Environment: see common.sh. Re-running resumes where a run stopped.
set -e

source "$(dirname "$0")/common.sh"

python -m llava.eval.model_vqa_loader "${MODEL_ARGS[@]}" \
    --question-file ./playground/data/eval/MME/llava_mme.jsonl \
    --image-folder ./playground/data/eval/MME/MME_Benchmark_release_version \
    --answers-file ./playground/data/eval/MME/answers/$CKPT.jsonl

python -m llava.eval.eval_mme \
    --experiment $CKPT \
    --data-dir ./playground/data/eval/MME \
    --output-json $RESULTS/mme.json
