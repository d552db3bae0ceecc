# Shared by the scripts/next recipes (sourced, not run): the two training stages of one generalization row of the
# paper (tab:main_larger_visual_tokens), vanilla (mlp2x_gelu) or Braco (the same budget on every view).
#
# A recipe sets, before sourcing this file:
#   RECIPE       name used in the output folders
#   PRESET INPUT the `braco cost` preset and input (token count) this row is (llava/cost/presets.py)
#   MODEL CONV   the LLM and its stage-2 conversation template (v1 for Vicuna, qwen_1_5 for Qwen2.5)
#   VISION_TOWER the tower (hub name or folder)
#   PINPOINTS    AnyRes canvases as [width, height] pairs ("" for one view per image)
#   VIEWS        views per image of a 2x2-canvas image (1 without AnyRes): INPUT = VIEWS x grid tokens
#   BUDGET       Braco tokens per view (the paper's: 16, or 4 for Qwen2.5-3B AnyRes)
#   MAX_LENGTH   --model_max_length
# Usage of a recipe: bash scripts/next/<recipe>.sh METHOD [extra train flags, appended to both stages]
# Env: CHECKPOINTS (./checkpoints), SEED (0), GRAD_ACCUM_STEPS (1; 2 on 4 GPUs), STAGES ("1 2"), LAUNCHER (deepspeed), DRY_RUN=1 (print
# the resolved commands, one per line after a '#' summary line, without running them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

METHOD=${1:-}
case "$METHOD" in
    vanilla) PROJECTOR=mlp2x_gelu; RETAIN=$INPUT ;;
    braco) PROJECTOR="braco_k$BUDGET"; RETAIN=$((VIEWS * BUDGET)) ;;
    *)
        echo "usage: bash $0 METHOD [extra train flags], METHOD being vanilla or braco   (got '${METHOD}')" >&2
        exit 2
        ;;
esac
shift

SEED=${SEED:-0}
LAUNCHER=${LAUNCHER:-deepspeed}
GRAD_ACCUM_STEPS=${GRAD_ACCUM_STEPS:-1}
CHECKPOINTS=${CHECKPOINTS:-./checkpoints}
STAGES=${STAGES:-"1 2"}
PRETRAIN_DIR="$CHECKPOINTS/$RECIPE-$PROJECTOR-pretrain"
FINETUNE_DIR="$CHECKPOINTS/llava-$RECIPE-$PROJECTOR"

# AnyRes rows train both stages on the views (the token count is the point of the row); one-view rows follow the
# v1.5 recipe: square images in stage 1, padded to square in stage 2.
if [[ -n "$PINPOINTS" ]]; then
    STAGE1_IMAGE_FLAGS=(--image_aspect_ratio anyres --image_grid_pinpoints "$PINPOINTS" --mm_patch_merge_type flat)
    STAGE2_IMAGE_FLAGS=("${STAGE1_IMAGE_FLAGS[@]}")
else
    STAGE1_IMAGE_FLAGS=()
    STAGE2_IMAGE_FLAGS=(--image_aspect_ratio pad)
fi

COMMON_FLAGS=(
    --model_name_or_path "$MODEL"
    --vision_tower "$VISION_TOWER"
    --mm_projector_type "$PROJECTOR"
    --mm_vision_select_layer -2
    --mm_use_im_start_end False
    --mm_use_im_patch_token False
    --bf16 True
    --num_train_epochs 1
    --per_device_eval_batch_size 4
    --gradient_accumulation_steps "$GRAD_ACCUM_STEPS"
    --evaluation_strategy "no"
    --save_strategy "steps"
    --save_steps 500
    --save_total_limit 2
    --weight_decay 0.
    --warmup_ratio 0.03
    --lr_scheduler_type "cosine"
    --logging_steps 1
    --tf32 True
    --model_max_length "$MAX_LENGTH"
    --gradient_checkpointing True
    --dataloader_num_workers 4
    --lazy_preprocess True
    --report_to none
    --seed "$SEED"
    --data_seed "$SEED"
)

launch() {
    if [[ -n "${DRY_RUN:-}" ]]; then
        printf '%q ' "$@"
        printf '\n'
    else
        "$@"
    fi
}

summary="# $RECIPE ($METHOD): preset $PRESET, input $INPUT tokens, $VIEWS view(s), retain $RETAIN tokens, $PROJECTOR"
if [[ -n "${DRY_RUN:-}" ]]; then echo "$summary"; else echo "$summary" >&2; fi

for stage in $STAGES; do
    case "$stage" in
        1)  # projector only, on LLaVA-Pretrain; 8 GPUs x 32 = global batch 256
            launch "$LAUNCHER" llava/train/train_mem.py \
                --deepspeed ./scripts/zero2.json \
                --version plain \
                --data_path ./playground/data/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json \
                --image_folder ./playground/data/LLaVA-Pretrain/images \
                --tune_mm_mlp_adapter True \
                "${STAGE1_IMAGE_FLAGS[@]}" \
                "${COMMON_FLAGS[@]}" \
                --output_dir "$PRETRAIN_DIR" \
                --per_device_train_batch_size 32 \
                --learning_rate 1e-3 \
                "$@" ;;
        2)  # LLM + projector from the stage-1 projector, on the 665k mixture; 8 GPUs x 16 = global batch 128
            launch "$LAUNCHER" llava/train/train_mem.py \
                --deepspeed ./scripts/zero3.json \
                --version "$CONV" \
                --data_path ./playground/data/llava_v1_5_mix665k.json \
                --image_folder ./playground/data \
                --pretrain_mm_mlp_adapter "$PRETRAIN_DIR/mm_projector.bin" \
                --group_by_modality_length True \
                "${STAGE2_IMAGE_FLAGS[@]}" \
                "${COMMON_FLAGS[@]}" \
                --output_dir "$FINETUNE_DIR" \
                --per_device_train_batch_size 16 \
                --learning_rate 2e-5 \
                "$@" ;;
        *)
            echo "STAGES must list 1 and/or 2, got '$STAGES'" >&2
            exit 2 ;;
    esac
done
