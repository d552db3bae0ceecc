#!/usr/bin/env bash
# LLaVA-1.5 stage 1: train the projector on LLaVA-Pretrain captions; the LLM and the vision tower stay frozen.
# 8 GPUs x 32 = global batch 256. Extra flags are appended (later flags win), e.g.
#   bash scripts/v1_5/pretrain.sh --mm_projector_type braco_k16
source "$(dirname "$0")/_common.sh"

launch "$LAUNCHER" llava/train/train_mem.py \
    --deepspeed ./scripts/zero2.json \
    --model_name_or_path lmsys/vicuna-13b-v1.5 \
    --version plain \
    --data_path ./playground/data/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json \
    --image_folder ./playground/data/LLaVA-Pretrain/images \
    --mm_projector_type mlp2x_gelu \
    --tune_mm_mlp_adapter True \
    "${COMMON_FLAGS[@]}" \
    --output_dir ./checkpoints/llava-v1.5-13b-pretrain \
    --per_device_train_batch_size 32 \
    --gradient_accumulation_steps 1 \
    --save_steps 24000 \
    --save_total_limit 1 \
    --learning_rate 1e-3 \
    --report_to wandb \
    "$@"
