#!/usr/bin/env bash
# Fine-tune a trained LLaVA-1.5 checkpoint on your own task data with LoRA (r 128, alpha 256).
# Load the result with model_base = the checkpoint you started from.
source "$(dirname "$0")/_common.sh"

launch "$LAUNCHER" llava/train/train_mem.py \
    --lora_enable True --lora_r 128 --lora_alpha 256 --mm_projector_lr 2e-5 \
    --deepspeed ./scripts/zero3.json \
    --model_name_or_path liuhaotian/llava-v1.5-13b \
    --version v1 \
    --data_path ./playground/data/llava_v1_5_mix665k.json \
    --image_folder ./playground/data \
    --mm_projector_type mlp2x_gelu \
    --image_aspect_ratio pad \
    --group_by_modality_length True \
    "${COMMON_FLAGS[@]}" \
    --output_dir ./checkpoints/llava-v1.5-13b-task-lora \
    --per_device_train_batch_size 16 \
    --gradient_accumulation_steps 1 \
    --save_steps 50000 \
    --save_total_limit 1 \
    --learning_rate 2e-4 \
    --report_to wandb \
    "$@"
