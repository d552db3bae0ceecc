#!/usr/bin/env bash
# LLaVA-NeXT's OneVision recipe with NeXT's own flags (its scripts/train/pretrain_siglip.sh, then direct_finetune_*.sh /
# finetune_ov.sh): Qwen2 + SigLIP so400m-patch14-384, stage 1 trains the projector (--mm_tunable_parts mm_mlp_adapter),
# stage 2 trains tower, projector and LLM (the tower at --mm_vision_tower_lr 2e-6) on a YAML data mixture with
# anyres_max_9 over the (1x1)...(6x6) canvases and spatial_unpad. Vanilla (mlp2x_gelu) or Braco (BUDGET tokens per view).
#   bash scripts/next/onevision.sh METHOD [extra train flags, appended to both stages]   (METHOD: vanilla or braco)
#   DRY_RUN=1 bash scripts/next/onevision.sh braco          # print the two commands
# Env: LLM_VERSION (Qwen/Qwen2-7B-Instruct), VISION_MODEL_VERSION (google/siglip-so400m-patch14-384), PROMPT_VERSION
# (qwen_1_5), BUDGET (16), PRETRAIN_DATA / PRETRAIN_IMAGES (BLIP-558K), DATA_YAML (the stage-2 mixture, NeXT's format;
# see docs/TRAINING.md), IMAGE_FOLDER, VIDEO_FOLDER (optional), IMAGE_ASPECT_RATIO (anyres_max_9), GRID_PINPOINTS
# ("(1x1),...,(6x6)"), MODEL_MAX_LENGTH (32768), CHECKPOINTS (./checkpoints), STAGES ("1 2"), GRAD_ACCUM_STEPS (2),
# LAUNCHER (deepspeed), PYTHON, DRY_RUN=1. NeXT's per-GPU batches: 16 in stage 1, 1 (x 2 accumulation) in stage 2.
source "$(dirname "$0")/../v1_5/_common.sh"

METHOD=${1:-}
shift || true
LLM_VERSION=${LLM_VERSION:-Qwen/Qwen2-7B-Instruct}
VISION_MODEL_VERSION=${VISION_MODEL_VERSION:-google/siglip-so400m-patch14-384}
PROMPT_VERSION=${PROMPT_VERSION:-qwen_1_5}
case "$METHOD" in
    vanilla) PROJECTOR=mlp2x_gelu ;;
    braco) resolve_budget "${BUDGET:-16}" ;;
    *) echo "usage: bash $0 METHOD [extra train flags], METHOD being vanilla or braco   (got '${METHOD}')" >&2; exit 2 ;;
esac

LLM_CLEAN=$(basename "$LLM_VERSION")
VISION_CLEAN=$(basename "$VISION_MODEL_VERSION")
CHECKPOINTS=${CHECKPOINTS:-./checkpoints}
BASE_RUN_NAME="llavanext-$VISION_CLEAN-$LLM_CLEAN-$PROJECTOR-pretrain_blip558k_plain"
RUN_NAME="llava-onevision-$VISION_CLEAN-$LLM_CLEAN-$PROJECTOR-ov_stage_am9"
PRETRAIN_DIR="$CHECKPOINTS/projectors/$BASE_RUN_NAME"
PRETRAIN_DATA=${PRETRAIN_DATA:-./playground/data/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json}
PRETRAIN_IMAGES=${PRETRAIN_IMAGES:-./playground/data/LLaVA-Pretrain/images}
DATA_YAML=${DATA_YAML:-./playground/data/onevision.yaml}
IMAGE_FOLDER=${IMAGE_FOLDER:-./playground/data}
VIDEO_FLAGS=(${VIDEO_FOLDER:+--video_folder "$VIDEO_FOLDER"})
STAGES=${STAGES:-"1 2"}

# Flags both of NeXT's stages pass.
NEXT_FLAGS=(
    --vision_tower "$VISION_MODEL_VERSION"
    --mm_projector_type "$PROJECTOR"
    --mm_vision_select_layer -2
    --mm_use_im_start_end False
    --mm_use_im_patch_token False
    --bf16 True
    --num_train_epochs 1
    --per_device_eval_batch_size 4
    --evaluation_strategy "no"
    --weight_decay 0.
    --warmup_ratio 0.03
    --lr_scheduler_type "cosine"
    --logging_steps 1
    --tf32 True
    --gradient_checkpointing True
    --lazy_preprocess True
    --report_to wandb
    --attn_implementation sdpa
)

for stage in $STAGES; do
    case "$stage" in
        1)  launch "$LAUNCHER" llava/train/train_mem.py \
                --deepspeed scripts/zero3.json \
                --model_name_or_path "$LLM_VERSION" \
                --version plain \
                --data_path "$PRETRAIN_DATA" \
                --image_folder "$PRETRAIN_IMAGES" \
                --mm_tunable_parts="mm_mlp_adapter" \
                "${NEXT_FLAGS[@]}" \
                --output_dir "$PRETRAIN_DIR" \
                --run_name "$BASE_RUN_NAME" \
                --per_device_train_batch_size 16 \
                --gradient_accumulation_steps 1 \
                --save_strategy "no" \
                --save_steps 50000 \
                --learning_rate 1e-3 \
                --model_max_length 8192 \
                --dataloader_num_workers 16 \
                "$@" ;;
        2)  launch "$LAUNCHER" llava/train/train_mem.py \
                --deepspeed scripts/zero3.json \
                --model_name_or_path "$LLM_VERSION" \
                --version "$PROMPT_VERSION" \
                --data_path "$DATA_YAML" \
                --image_folder "$IMAGE_FOLDER" \
                "${VIDEO_FLAGS[@]}" \
                --pretrain_mm_mlp_adapter="$PRETRAIN_DIR/mm_projector.bin" \
                --mm_tunable_parts="mm_vision_tower,mm_mlp_adapter,mm_language_model" \
                --mm_vision_tower_lr=2e-6 \
                --group_by_modality_length True \
                --image_aspect_ratio "${IMAGE_ASPECT_RATIO:-anyres_max_9}" \
                --image_grid_pinpoints "${GRID_PINPOINTS:-(1x1),...,(6x6)}" \
                --mm_patch_merge_type spatial_unpad \
                "${NEXT_FLAGS[@]}" \
                --output_dir "$CHECKPOINTS/$RUN_NAME" \
                --run_name "$RUN_NAME" \
                --per_device_train_batch_size 1 \
                --gradient_accumulation_steps "${GRAD_ACCUM_STEPS:-2}" \
                --save_strategy "steps" \
                --save_steps 1000 \
                --save_total_limit 1 \
                --learning_rate 1e-5 \
                --model_max_length "${MODEL_MAX_LENGTH:-32768}" \
                --dataloader_num_workers 4 \
                --torch_compile True \
                --torch_compile_backend "inductor" \
                --dataloader_drop_last True \
                --frames_upbound 32 \
                --mm_newline_position grid \
                --mm_spatial_pool_stride 2 \
                "$@" ;;
        *)  echo "STAGES must list 1 and/or 2, got '$STAGES'" >&2; exit 2 ;;
    esac
done
