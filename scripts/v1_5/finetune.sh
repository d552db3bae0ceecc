#!/usr/bin/env bash
# LLaVA-1.5 stage 2: instruction tuning on the 665k mixture; LLM and projector train, from the stage-1 projector.
# 8 GPUs x 16 = global batch 128. Extra flags are appended (later flags win).
source "$(dirname "$0")/_common.sh"

launch "$LAUNCHER" llava/train/train_mem.py \
    --deepspeed ./scripts/zero3.json \
    --model_name_or_path lmsys/vicuna-13b-v1.5 \
    --version v1 \
    --data_path ./playground/data/llava_v1_5_mix665k.json \
    --image_folder ./playground/data \
    --pretrain_mm_mlp_adapter ./checkpoints/llava-v1.5-13b-pretrain/mm_projector.bin \
    --mm_projector_type mlp2x_gelu \
    --image_aspect_ratio pad \
    --group_by_modality_length True \
    "${COMMON_FLAGS[@]}" \
    --output_dir ./checkpoints/llava-v1.5-13b \
    --per_device_train_batch_size 16 \
    --gradient_accumulation_steps 1 \
    --save_steps 50000 \
    --save_total_limit 1 \
    --learning_rate 2e-5 \
    --report_to wandb \
    "$@"
