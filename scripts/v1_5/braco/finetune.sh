#!/usr/bin/env bash
# Braco stage 2 (paper recipe): LLM, Braco coder and MLP train from the stage-1 projector on the 665k mixture,
# with the temperature annealed cosine 1.2 -> 0.8 over the stage. 8 GPUs x 16 = global batch 128.
#   bash scripts/v1_5/braco/finetune.sh 16 [SEED] [flags]
# The official runs annealed over 4677 of the stage's ~5198 steps; add --mm_fourier_temp_steps 4677 to match.
# Env: MODEL, SEED, GRAD_ACCUM_STEPS, CHECKPOINTS, VISION_TOWER, PRETRAIN_DATA, PRETRAIN_IMAGES, FINETUNE_DATA,
# FINETUNE_IMAGES, PRETRAIN_DIR, FINETUNE_DIR, LAUNCHER (deepspeed), PYTHON, DRY_RUN=1 (print the command only).
source "$(dirname "$0")/_budget.sh"

launch "$LAUNCHER" llava/train/train_mem.py \
    --deepspeed ./scripts/zero3.json \
    --model_name_or_path "$MODEL" \
    --version v1 \
    --data_path "$FINETUNE_DATA" \
    --image_folder "$FINETUNE_IMAGES" \
    --pretrain_mm_mlp_adapter "$PRETRAIN_DIR/mm_projector.bin" \
    --image_aspect_ratio pad \
    --group_by_modality_length True \
    "${COMMON_FLAGS[@]}" \
    "${BRACO_FLAGS[@]}" \
    --output_dir "$FINETUNE_DIR" \
    --per_device_train_batch_size 16 \
    --learning_rate 2e-5 \
    "$@"
