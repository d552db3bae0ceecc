#!/bin/bash
# SEED-Bench: answers in chunks, one per GPU; accuracy per question type, image and video, and the upload file.
# Environment: see common.sh; one process per GPU listed in CUDA_VISIBLE_DEVICES (default 0).
set -e

source "$(dirname "$0")/common.sh"
ANSWERS="./playground/data/eval/seed_bench/answers/$CKPT"

answer_in_chunks ./playground/data/eval/seed_bench/llava-seed-bench.jsonl ./playground/data/eval/seed_bench "$ANSWERS"
output_file=$ANSWERS/merge.jsonl

python scripts/convert_seed_for_submission.py \
    --annotation-file ./playground/data/eval/seed_bench/SEED-Bench.json \
    --result-file $output_file \
    --result-upload-file ./playground/data/eval/seed_bench/answers_upload/$CKPT.jsonl \
    --output-json $RESULTS/seed.json
