#!/bin/bash
# Q-Bench LLVisionQA (A1) in Chinese: bash scripts/v1_5/eval/qbench_zh.sh dev|test. Upstream's Chinese files
# (质衡-问答-验证集.json for dev, 质衡-问答-测试集.json for test) and the Chinese instruction; everything else as
# qbench.sh (answers llvisionqa_zh_<split>_answers.jsonl, dev scores $RESULTS/qbench_zh.json).
set -e

source "$(dirname "$0")/common.sh"

QBENCH_LANG=zh bash "$(dirname "$0")/qbench.sh" "$@"
