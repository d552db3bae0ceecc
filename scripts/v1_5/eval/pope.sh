#!/bin/bash
# POPE (adversarial, popular, random): F1 per split; the mean F1 goes to $RESULTS/pope.json.
# Environment: MODEL_PATH (default liuhaotian/llava-v1.5-13b), MODEL_BASE, CKPT (answers name, default: the
# last component of MODEL_PATH), CONV_MODE (vicuna_v1), BATCH_SIZE (1). Re-running resumes where a run stopped.
set -e

MODEL_PATH="${MODEL_PATH:-liuhaotian/llava-v1.5-13b}"
CKPT="${CKPT:-$(basename "$MODEL_PATH")}"
RESULTS="./playground/data/eval/results/$CKPT"
MODEL_ARGS=(--model-path "$MODEL_PATH" ${MODEL_BASE:+--model-base "$MODEL_BASE"} --temperature 0 --conv-mode "${CONV_MODE:-vicuna_v1}" --batch-size "${BATCH_SIZE:-1}")

python -m llava.eval.model_vqa_loader "${MODEL_ARGS[@]}" \
    --question-file ./playground/data/eval/pope/llava_pope_test.jsonl \
    --image-folder ./playground/data/eval/pope/val2014 \
    --answers-file ./playground/data/eval/pope/answers/$CKPT.jsonl

python -m llava.eval.eval_pope \
    --annotation-dir ./playground/data/eval/pope/coco \
    --question-file ./playground/data/eval/pope/llava_pope_test.jsonl \
    --result-file ./playground/data/eval/pope/answers/$CKPT.jsonl \
    --output-json $RESULTS/pope.json
