#!/bin/bash
# Q-Bench LLVisionQA (A1) with the Chinese instruction: bash scripts/v1_5/eval/qbench_zh.sh dev|test.
# Everything else as qbench.sh (answers llvisionqa_zh_<split>_answers.jsonl, dev scores $RESULTS/qbench_zh.json).
set -e

source "$(dirname "$0")/common.sh"

QBENCH_LANG=zh bash "$(dirname "$0")/qbench.sh" "$@"
