#!/bin/bash
# VQAv2 test-dev: answers in chunks, one per GPU, merged and converted for the EvalAI server.
# Environment: see common.sh; one process per GPU listed in CUDA_VISIBLE_DEVICES (default 0).
set -e

source "$(dirname "$0")/common.sh"
SPLIT="llava_vqav2_mscoco_test-dev2015"
ANSWERS="./playground/data/eval/vqav2/answers/$SPLIT/$CKPT"

answer_in_chunks ./playground/data/eval/vqav2/$SPLIT.jsonl ./playground/data/eval/vqav2/test2015 "$ANSWERS"
output_file=$ANSWERS/merge.jsonl

python scripts/convert_vqav2_for_submission.py --split $SPLIT --ckpt $CKPT
