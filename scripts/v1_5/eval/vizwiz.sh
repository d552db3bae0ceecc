#!/bin/bash
# VizWiz test: answers converted for the EvalAI server.
# Environment: see common.sh. Re-running resumes where a run stopped.
set -e

source "$(dirname "$0")/common.sh"

python -m llava.eval.model_vqa_loader "${MODEL_ARGS[@]}" \
    --question-file ./playground/data/eval/vizwiz/llava_test.jsonl \
    --image-folder ./playground/data/eval/vizwiz/test \
    --answers-file ./playground/data/eval/vizwiz/answers/$CKPT.jsonl

python scripts/convert_vizwiz_for_submission.py \
    --annotation-file ./playground/data/eval/vizwiz/llava_test.jsonl \
    --result-file ./playground/data/eval/vizwiz/answers/$CKPT.jsonl \
    --result-upload-file ./playground/data/eval/vizwiz/answers_upload/$CKPT.json
