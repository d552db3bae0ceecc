#!/bin/bash
# MMBench-CN: answers, the submission spreadsheet for the OpenCompass server, and (dev split) a local
# accuracy written to $RESULTS/mmbench_cn.json.
# Environment: see common.sh. Re-running resumes where a run stopped.
set -e

source "$(dirname "$0")/common.sh"
SPLIT="${SPLIT:-mmbench_dev_cn_20231003}"

python -m llava.eval.model_vqa_mmbench "${MODEL_ARGS[@]}" \
    --question-file ./playground/data/eval/mmbench_cn/$SPLIT.tsv \
    --answers-file ./playground/data/eval/mmbench_cn/answers/$SPLIT/$CKPT.jsonl \
    --lang cn \
    --single-pred-prompt

mkdir -p ./playground/data/eval/mmbench_cn/answers_upload/$SPLIT

python scripts/convert_mmbench_for_submission.py \
    --annotation-file ./playground/data/eval/mmbench_cn/$SPLIT.tsv \
    --result-dir ./playground/data/eval/mmbench_cn/answers/$SPLIT \
    --upload-dir ./playground/data/eval/mmbench_cn/answers_upload/$SPLIT \
    --experiment $CKPT

if head -1 ./playground/data/eval/mmbench_cn/$SPLIT.tsv | tr '\t' '\n' | grep -qx answer; then
    python -m llava.eval.eval_mmbench --lang cn \
        --annotation-file ./playground/data/eval/mmbench_cn/$SPLIT.tsv \
        --result-file ./playground/data/eval/mmbench_cn/answers/$SPLIT/$CKPT.jsonl \
        --output-json $RESULTS/mmbench_cn.json
fi
