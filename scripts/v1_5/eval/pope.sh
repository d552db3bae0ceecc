#!/bin/bash
# POPE (adversarial, popular, random): F1 per split; the mean F1 goes to $RESULTS/pope.json.
# Environment: see common.sh. Re-running resumes where a run stopped.
set -e

source "$(dirname "$0")/common.sh"

python -m llava.eval.model_vqa_loader "${MODEL_ARGS[@]}" \
    --question-file ./playground/data/eval/pope/llava_pope_test.jsonl \
    --image-folder ./playground/data/eval/pope/val2014 \
    --answers-file ./playground/data/eval/pope/answers/$CKPT.jsonl

python -m llava.eval.eval_pope \
    --annotation-dir ./playground/data/eval/pope/coco \
    --question-file ./playground/data/eval/pope/llava_pope_test.jsonl \
    --result-file ./playground/data/eval/pope/answers/$CKPT.jsonl \
    --output-json $RESULTS/pope.json
