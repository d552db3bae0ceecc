#!/usr/bin/env bash
# Qwen2.5-3B + SigLIP so400m-patch14-384 (27 x 27 = 729 tokens, no CLS): vanilla 729, Braco 16 (braco_k16; paper
# 729 → 16).
#   bash scripts/next/qwen2.5_3b_siglip.sh vanilla
#   DRY_RUN=1 bash scripts/next/qwen2.5_3b_siglip.sh braco
RECIPE=qwen2.5-3b-siglip-729
PRESET=qwen2.5-3b-siglip
INPUT=729
MODEL=${MODEL:-Qwen/Qwen2.5-3B-Instruct}
CONV=qwen_1_5
VISION_TOWER=${VISION_TOWER:-google/siglip-so400m-patch14-384}
PINPOINTS=""
VIEWS=1
BUDGET=16
MAX_LENGTH=2048
source "$(dirname "$0")/common.sh"
