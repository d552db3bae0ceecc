#!/bin/bash
# MMBench-EN: answers, the submission spreadsheet for the OpenCompass server, and (dev split) a local
# accuracy written to $RESULTS/mmbench.json.
# Environment: see common.sh. Re-running resumes where a run stopped.
set -e

source "$(dirname "$0")/common.sh"
SPLIT="${SPLIT:-mmbench_dev_20230712}"

python -m llava.eval.model_vqa_mmbench "${MODEL_ARGS[@]}" \
    --question-file ./playground/data/eval/mmbench/$SPLIT.tsv \
    --answers-file ./playground/data/eval/mmbench/answers/$SPLIT/$CKPT.jsonl \
    --single-pred-prompt

mkdir -p ./playground/data/eval/mmbench/answers_upload/$SPLIT

python scripts/convert_mmbench_for_submission.py \
    --annotation-file ./playground/data/eval/mmbench/$SPLIT.tsv \
    --result-dir ./playground/data/eval/mmbench/answers/$SPLIT \
    --upload-dir ./playground/data/eval/mmbench/answers_upload/$SPLIT \
    --experiment $CKPT

if head -1 ./playground/data/eval/mmbench/$SPLIT.tsv | tr '\t' '\n' | grep -qx answer; then
    python -m llava.eval.eval_mmbench --lang en \
        --annotation-file ./playground/data/eval/mmbench/$SPLIT.tsv \
        --result-file ./playground/data/eval/mmbench/answers/$SPLIT/$CKPT.jsonl \
        --output-json $RESULTS/mmbench.json
fi
