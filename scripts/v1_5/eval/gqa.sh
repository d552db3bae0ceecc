#!/bin/bash
# GQA testdev-balanced: answers in chunks, one per GPU; converted for GQA's eval.py, scored locally
# (accuracy, written to $RESULTS/gqa.json) and by the official eval/eval.py when it is present.
# Environment: see common.sh; one process per GPU listed in CUDA_VISIBLE_DEVICES (default 0).
set -e

source "$(dirname "$0")/common.sh"
SPLIT="llava_gqa_testdev_balanced"
GQADIR="./playground/data/eval/gqa/data"
ANSWERS="./playground/data/eval/gqa/answers/$SPLIT/$CKPT"

answer_in_chunks ./playground/data/eval/gqa/$SPLIT.jsonl ./playground/data/eval/gqa/data/images "$ANSWERS"
output_file=$ANSWERS/merge.jsonl

python scripts/convert_gqa_for_eval.py --src $output_file --dst $GQADIR/testdev_balanced_predictions.json

python -m llava.eval.eval_gqa \
    --questions $GQADIR/testdev_balanced_questions.json \
    --predictions $GQADIR/testdev_balanced_predictions.json \
    --answers-file $output_file \
    --output-json $RESULTS/gqa.json

if [ -f $GQADIR/eval/eval.py ]; then
    (cd $GQADIR && python eval/eval.py --tier testdev_balanced)
fi
