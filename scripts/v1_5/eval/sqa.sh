#!/bin/bash
# ScienceQA test: accuracy and IMG-Accuracy (the paper's SQA number, written to $RESULTS/sqa.json).
# Environment: MODEL_PATH (default liuhaotian/llava-v1.5-13b), MODEL_BASE, CKPT (answers name, default: the
# last component of MODEL_PATH), CONV_MODE (vicuna_v1), BATCH_SIZE (1). Re-running resumes where a run stopped.
set -e

MODEL_PATH="${MODEL_PATH:-liuhaotian/llava-v1.5-13b}"
CKPT="${CKPT:-$(basename "$MODEL_PATH")}"
RESULTS="./playground/data/eval/results/$CKPT"
MODEL_ARGS=(--model-path "$MODEL_PATH" ${MODEL_BASE:+--model-base "$MODEL_BASE"} --temperature 0 --conv-mode "${CONV_MODE:-vicuna_v1}" --batch-size "${BATCH_SIZE:-1}")

python -m llava.eval.model_vqa_science "${MODEL_ARGS[@]}" \
    --question-file ./playground/data/eval/scienceqa/llava_test_CQM-A.json \
    --image-folder ./playground/data/eval/scienceqa/images/test \
    --answers-file ./playground/data/eval/scienceqa/answers/$CKPT.jsonl \
    --single-pred-prompt

python -m llava.eval.eval_science_qa \
    --base-dir ./playground/data/eval/scienceqa \
    --result-file ./playground/data/eval/scienceqa/answers/$CKPT.jsonl \
    --output-file ./playground/data/eval/scienceqa/answers/${CKPT}_output.jsonl \
    --output-result ./playground/data/eval/scienceqa/answers/${CKPT}_result.json \
    --output-json $RESULTS/sqa.json
