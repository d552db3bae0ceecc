#!/bin/bash
# MM-Vet: answers converted for the MM-Vet grader (results/$CKPT.json); with OPENAI_API_KEY (and optionally
# OPENAI_BASE_URL, LLAVA_JUDGE_MODEL, MMVET_RUNS) set, the GPT grading (llava.eval.eval_mmvet, resumable), whose
# total goes to $RESULTS/mmvet.json. Needs MM-Vet's mm-vet.json in ./playground/data/eval/mm-vet.
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

if [ -n "${OPENAI_API_KEY:-}${OPENAI_BASE_URL:-}" ]; then
    python -m llava.eval.eval_mmvet \
        --mmvet_path ./playground/data/eval/mm-vet \
        --result_path ./playground/data/eval/mm-vet/results \
        --model "$CKPT" \
        --num_run "${MMVET_RUNS:-1}" \
        --answers-file ./playground/data/eval/mm-vet/answers/$CKPT.jsonl \
        --output-json "$RESULTS/mmvet.json"
else
    echo "Set OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible judge) to grade ./playground/data/eval/mm-vet/results/$CKPT.json"
fi
