#!/bin/bash
# ScienceQA test: accuracy and IMG-Accuracy (the paper's SQA number, written to $RESULTS/sqa.json).
# Environment: see common.sh. Re-running resumes where a run stopped.
set -e

source "$(dirname "$0")/common.sh"

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
