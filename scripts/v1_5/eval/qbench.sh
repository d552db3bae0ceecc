#!/bin/bash
# Q-Bench LLVisionQA (A1): bash scripts/v1_5/eval/qbench.sh dev|test. Answers for the split; on dev, the accuracy
# per question type and concern, overall to $RESULTS/qbench.json (the test split is graded by the Q-Bench
# authors). QBENCH_LANG=zh asks with the Chinese instruction on the Chinese files (qbench_zh.sh sets it).
# Upstream's files: llvisionqa_{dev,test}.json, 质衡-问答-{验证集,测试集}.json and images_llvisionqa/ under
# ./playground/data/eval/qbench; conversation mode llava_v1 unless CONV_MODE says otherwise, greedy decoding.
# Environment: see common.sh. Re-running resumes where a run stopped.
set -e

SPLIT=${1:-}
if [ "$SPLIT" != "dev" ] && [ "$SPLIT" != "test" ]; then
    echo "usage: bash $0 dev|test (the LLVisionQA split to answer)" >&2
    exit 2
fi
LANG_CODE=${QBENCH_LANG:-en}
case "$LANG_CODE" in
    en) SUFFIX=""; QUESTIONS=llvisionqa_$SPLIT.json ;;
    zh) SUFFIX="zh_"; QUESTIONS=$([ "$SPLIT" = "dev" ] && echo "质衡-问答-验证集.json" || echo "质衡-问答-测试集.json") ;;
    *) echo "QBENCH_LANG must be en or zh, got '$LANG_CODE'" >&2; exit 2 ;;
esac

CONV_MODE=${CONV_MODE:-llava_v1}
source "$(dirname "$0")/common.sh"

QBENCH=./playground/data/eval/qbench
ANSWERS=$QBENCH/answers/$CKPT/llvisionqa_${SUFFIX}${SPLIT}_answers.jsonl

python -m llava.eval.model_vqa_qbench "${MODEL_ARGS[@]}" \
    --image-folder $QBENCH/images_llvisionqa/ \
    --questions-file "$QBENCH/$QUESTIONS" \
    --answers-file "$ANSWERS" \
    --lang "$LANG_CODE"

if [ "$SPLIT" = "dev" ]; then
    python -m llava.eval.eval_qbench --answers-file "$ANSWERS" --questions-file "$QBENCH/$QUESTIONS" \
        --output-json "$RESULTS/qbench${SUFFIX:+_${LANG_CODE}}.json"
fi
