#!/usr/bin/env bash
# Braco stage 1 (paper recipe): only the projector (Braco coder + MLP) trains, on LLaVA-Pretrain, with the sparsemax
# temperature annealed cosine 2.0 -> 1.2 over the stage. 8 GPUs x 32 = global batch 256.
#   bash scripts/v1_5/braco/pretrain.sh 16            # braco_k16 = c3s7, seed 0
#   bash scripts/v1_5/braco/pretrain.sh 9 1           # budget 9, seed 1 (the official launcher's BUDGET SEED)
#   bash scripts/v1_5/braco/pretrain.sh c2s6 [flags]  # any allocation; extra flags are appended
# Env: MODEL, SEED, GRAD_ACCUM_STEPS, CHECKPOINTS, VISION_TOWER, PRETRAIN_DATA, PRETRAIN_IMAGES, FINETUNE_DATA,
# FINETUNE_IMAGES, PRETRAIN_DIR, FINETUNE_DIR, LAUNCHER (deepspeed), PYTHON, DRY_RUN=1 (print the command only).
source "$(dirname "$0")/_budget.sh"

launch "$LAUNCHER" llava/train/train_mem.py \
    --deepspeed ./scripts/zero2.json \
    --model_name_or_path "$MODEL" \
    --version plain \
    --data_path "$PRETRAIN_DATA" \
    --image_folder "$PRETRAIN_IMAGES" \
    --tune_mm_mlp_adapter True \
    "${COMMON_FLAGS[@]}" \
    "${BRACO_FLAGS[@]}" \
    --output_dir "$PRETRAIN_DIR" \
    --per_device_train_batch_size 32 \
    --learning_rate 1e-3 \
    "$@"
