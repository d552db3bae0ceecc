#!/bin/bash
# LLaVA-Bench (in the wild): answers; with OPENAI_API_KEY (and optionally OPENAI_BASE_URL, LLAVA_JUDGE_MODEL)
# set, the GPT review (llava.eval.eval_gpt_review_bench, resumable) and the relative scores per category.
# Environment: see common.sh. Re-running resumes where a run stopped.
set -e

source "$(dirname "$0")/common.sh"

python -m llava.eval.model_vqa "${MODEL_ARGS[@]}" \
    --question-file ./playground/data/eval/llava-bench-in-the-wild/questions.jsonl \
    --image-folder ./playground/data/eval/llava-bench-in-the-wild/images \
    --answers-file ./playground/data/eval/llava-bench-in-the-wild/answers/$CKPT.jsonl

mkdir -p ./playground/data/eval/llava-bench-in-the-wild/reviews

REVIEW=./playground/data/eval/llava-bench-in-the-wild/reviews/$CKPT.jsonl
if [ -n "${OPENAI_API_KEY:-}${OPENAI_BASE_URL:-}" ]; then
    python -m llava.eval.eval_gpt_review_bench \
        --question ./playground/data/eval/llava-bench-in-the-wild/questions.jsonl \
        --context ./playground/data/eval/llava-bench-in-the-wild/context.jsonl \
        --answer-list ./playground/data/eval/llava-bench-in-the-wild/answers_gpt4.jsonl \
            ./playground/data/eval/llava-bench-in-the-wild/answers/$CKPT.jsonl \
        --output "$REVIEW"
fi
if [ -f "$REVIEW" ]; then
    python -m llava.eval.summarize_gpt_review -f "$REVIEW"
else
    echo "Set OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible judge) to review the answers into $REVIEW"
fi
