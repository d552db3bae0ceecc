#!/usr/bin/env bash
# Qwen2.5-3B + SigLIP2 so400m-patch16-512 (fixed resolution, native 32 x 32 = 1024 tokens, no CLS): vanilla 1024,
# Braco 16 (braco_k16; paper 1024 → 16).
#   bash scripts/next/qwen2.5_3b_siglip2.sh vanilla
#   DRY_RUN=1 bash scripts/next/qwen2.5_3b_siglip2.sh braco
RECIPE=qwen2.5-3b-siglip2-1024
PRESET=qwen2.5-3b-siglip2
INPUT=1024
MODEL=${MODEL:-Qwen/Qwen2.5-3B-Instruct}
CONV=qwen_1_5
VISION_TOWER=${VISION_TOWER:-google/siglip2-so400m-patch16-512}
PINPOINTS=""
VIEWS=1
BUDGET=16
MAX_LENGTH=2048
source "$(dirname "$0")/common.sh"
