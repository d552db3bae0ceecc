#!/bin/bash
# MM-Vet: answers converted for the MM-Vet GPT-4 grader (results/$CKPT.json). The grader runs outside this
# repository; put its total score in $RESULTS/mmvet.json as {"score": <total>} for llava.eval.summarize.
# Environment: see common.sh. Re-running resumes where a run stopped.
set -e

source "$(dirname "$0")/common.sh"

python -m llava.eval.model_vqa "${MODEL_ARGS[@]}" \
    --question-file ./playground/data/eval/mm-vet/llava-mm-vet.jsonl \
    --image-folder ./playground/data/eval/mm-vet/images \
    --answers-file ./playground/data/eval/mm-vet/answers/$CKPT.jsonl

mkdir -p ./playground/data/eval/mm-vet/results

python scripts/convert_mmvet_for_eval.py \
    --src ./playground/data/eval/mm-vet/answers/$CKPT.jsonl \
    --dst ./playground/data/eval/mm-vet/results/$CKPT.json
