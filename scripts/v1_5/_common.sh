# Shared by the v1_5 training scripts (sourced, not run): repository root, the flags every LLaVA-1.5 training
# command passes, and `launch`, which runs a command or, with DRY_RUN=1, prints it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

VISION_TOWER=${VISION_TOWER:-openai/clip-vit-large-patch14-336}

# Flags of upstream's v1.5 scripts that do not change between stages.
COMMON_FLAGS=(
    --vision_tower "$VISION_TOWER"
    --mm_vision_select_layer -2
    --mm_use_im_start_end False
    --mm_use_im_patch_token False
    --bf16 True
    --num_train_epochs 1
    --per_device_eval_batch_size 4
    --evaluation_strategy "no"
    --save_strategy "steps"
    --weight_decay 0.
    --warmup_ratio 0.03
    --lr_scheduler_type "cosine"
    --logging_steps 1
    --tf32 True
    --model_max_length 2048
    --gradient_checkpointing True
    --dataloader_num_workers 4
    --lazy_preprocess True
)

launch() {
    if [[ -n "${DRY_RUN:-}" ]]; then
        printf '%q ' "$@"
        printf '\n'
    else
        "$@"
    fi
}
