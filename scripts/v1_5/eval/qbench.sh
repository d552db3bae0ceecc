#!/bin/bash
# Q-Bench LLVisionQA (A1, English): bash scripts/v1_5/eval/qbench.sh dev|test. Answers for the split; on dev,
# the accuracy per question type and concern, overall to $RESULTS/qbench.json (the test split is graded by the
# Q-Bench authors). Set QBENCH_LANG=zh for the Chinese instruction (qbench_zh.sh does).
# Environment: see common.sh. Re-running resumes where a run stopped.
set -e

SPLIT=${1:-}
if [ "$SPLIT" != "dev" ] && [ "$SPLIT" != "test" ]; then
    echo "usage: bash $0 dev|test (the LLVisionQA split to answer)" >&2
    exit 2
fi
LANG_CODE=${QBENCH_LANG:-en}
SUFFIX=$([ "$LANG_CODE" = "en" ] && echo "" || echo "${LANG_CODE}_")

source "$(dirname "$0")/common.sh"

ANSWERS=./playground/data/eval/qbench/answers/$CKPT/llvisionqa_${SUFFIX}${SPLIT}_answers.jsonl

python -m llava.eval.model_vqa_qbench "${MODEL_ARGS[@]}" \
    --image-folder ./playground/data/eval/qbench/images_llvisionqa \
    --questions-file ./playground/data/eval/qbench/llvisionqa_$SPLIT.json \
    --answers-file "$ANSWERS" \
    --lang "$LANG_CODE"

if [ "$SPLIT" = "dev" ]; then
    python -m llava.eval.eval_qbench --answers-file "$ANSWERS" --output-json "$RESULTS/qbench${SUFFIX:+_${LANG_CODE}}.json"
fi
