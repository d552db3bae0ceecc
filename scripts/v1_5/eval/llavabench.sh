#!/bin/bash
# LLaVA-Bench (in the wild): answers; the GPT-4 review is external (upstream's eval_gpt_review_bench.py,
# openai<1.0); once reviews/$CKPT.jsonl exists, its relative scores are summarised.
# Environment: see common.sh. Re-running resumes where a run stopped.
set -e

source "$(dirname "$0")/common.sh"

python -m llava.eval.model_vqa "${MODEL_ARGS[@]}" \
    --question-file ./playground/data/eval/llava-bench-in-the-wild/questions.jsonl \
    --image-folder ./playground/data/eval/llava-bench-in-the-wild/images \
    --answers-file ./playground/data/eval/llava-bench-in-the-wild/answers/$CKPT.jsonl

mkdir -p ./playground/data/eval/llava-bench-in-the-wild/reviews

REVIEW=./playground/data/eval/llava-bench-in-the-wild/reviews/$CKPT.jsonl
if [ -f "$REVIEW" ]; then
    python -m llava.eval.summarize_gpt_review -f "$REVIEW"
else
    echo "Review the answers with GPT-4 into $REVIEW, then run: python -m llava.eval.summarize_gpt_review -f $REVIEW"
fi
