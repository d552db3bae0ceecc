#!/usr/bin/env bash
# Vicuna-7B + CLIP-L/336 with LLaVA-1.6 AnyRes (five canvases, flat merge): a 2x2-canvas image is 5 views x 576 =
# 2880 tokens (vanilla), or 5 x 16 = 80 with Braco (braco_k16 = c3s7 on every view; paper 2880 → 80).
#   bash scripts/next/vicuna_7b_anyres.sh vanilla
#   DRY_RUN=1 bash scripts/next/vicuna_7b_anyres.sh braco
RECIPE=next-vicuna-7b-anyres
PRESET=llava-next-7b-2880
INPUT=2880
MODEL=${MODEL:-lmsys/vicuna-7b-v1.5}
CONV=v1
VISION_TOWER=${VISION_TOWER:-openai/clip-vit-large-patch14-336}
PINPOINTS="[[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]"
VIEWS=5
BUDGET=16
MAX_LENGTH=4096
source "$(dirname "$0")/common.sh"
