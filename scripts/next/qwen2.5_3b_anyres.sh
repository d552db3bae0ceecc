#!/usr/bin/env bash
# Qwen2.5-3B + SigLIP so400m-patch14-384 with AnyRes (LLaVA-1.6's five canvases in 384 px sides, flat merge): a
# 2x2-canvas image is 5 views x 729 = 3645 tokens (vanilla), or 5 x 4 = 20 with Braco (braco_k4 = c1s3 on every
# view; paper 3645 → 20).
#   bash scripts/next/qwen2.5_3b_anyres.sh vanilla
#   DRY_RUN=1 bash scripts/next/qwen2.5_3b_anyres.sh braco
RECIPE=qwen2.5-3b-siglip-anyres
PRESET=qwen2.5-3b-siglip
INPUT=3645
MODEL=${MODEL:-Qwen/Qwen2.5-3B-Instruct}
CONV=qwen_1_5
VISION_TOWER=${VISION_TOWER:-google/siglip-so400m-patch14-384}
PINPOINTS="[[384, 768], [768, 384], [768, 768], [1152, 384], [384, 1152]]"
VIEWS=5
BUDGET=4
MAX_LENGTH=8192
source "$(dirname "$0")/common.sh"
