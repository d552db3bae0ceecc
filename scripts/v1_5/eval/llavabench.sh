#!/bin/bash
# LLaVA-Bench (in the wild): answers; the GPT-4 review is external (upstream's eval_gpt_review_bench.py,
# openai<1.0); once reviews/$CKPT.jsonl exists, its relative scores are summarised.
# Environment: MODEL_PATH (default liuhaotian/llava-v1.5-13b), MODEL_BASE, CKPT (answers name, default: the
# last component of MODEL_PATH), CONV_MODE (vicuna_v1), BATCH_SIZE (1). Re-running resumes where a run stopped.
set -e

MODEL_PATH="${MODEL_PATH:-liuhaotian/llava-v1.5-13b}"
CKPT="${CKPT:-$(basename "$MODEL_PATH")}"
RESULTS="./playground/data/eval/results/$CKPT"
MODEL_ARGS=(--model-path "$MODEL_PATH" ${MODEL_BASE:+--model-base "$MODEL_BASE"} --temperature 0 --conv-mode "${CONV_MODE:-vicuna_v1}" --batch-size "${BATCH_SIZE:-1}")

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
