# Shared by the Braco scripts (sourced): BUDGET (first argument) and an optional SEED (second) -> PROJECTOR, NAME, SEED.
#   4, 9, 16, 25  -> braco_k4 ... braco_k25, the paper's allocations (c1s3, c2s5, c3s7, c4s9 with idct);
#   any other K   -> braco_k<K> (C = max(floor(sqrt(K)) - 1, 1), S = K - C^2);
#   c<C>s<S>[_coef|_idct|_randrot] or braco_c<C>s<S>... -> that allocation.
# The name is parsed by braco_patch.budget (resolve_budget in ../_common.sh), never here.
source "$(dirname "${BASH_SOURCE[0]}")/../_common.sh"

USAGE="usage: bash $0 BUDGET [SEED] [extra train flags]   (BUDGET: 4, 9, 16, 25, any K, or c<C>s<S> such as c3s7)"
BUDGET=${1:-}
if [[ -z "$BUDGET" ]]; then
    echo "$USAGE" >&2
    exit 2
fi
shift
# The official launcher's second argument is the seed (train_braco.sh BUDGET SEED); SEED in the environment also works.
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
    SEED=$1
    shift
fi
resolve_budget "$BUDGET"

# The paper's recipe (braco-official §5): Vicuna-7B v1.5, CLIP-L/336, 8 GPUs (use GRAD_ACCUM_STEPS=2 on 4).
MODEL=${MODEL:-lmsys/vicuna-7b-v1.5}
SEED=${SEED:-0}
GRAD_ACCUM_STEPS=${GRAD_ACCUM_STEPS:-1}
CHECKPOINTS=${CHECKPOINTS:-./checkpoints}
PRETRAIN_DIR=${PRETRAIN_DIR:-"$CHECKPOINTS/llava-v1.5-7b-braco-$NAME-pretrain"}
FINETUNE_DIR=${FINETUNE_DIR:-"$CHECKPOINTS/llava-v1.5-7b-braco-$NAME"}
PRETRAIN_DATA=${PRETRAIN_DATA:-./playground/data/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json}
PRETRAIN_IMAGES=${PRETRAIN_IMAGES:-./playground/data/LLaVA-Pretrain/images}
FINETUNE_DATA=${FINETUNE_DATA:-./playground/data/llava_v1_5_mix665k.json}
FINETUNE_IMAGES=${FINETUNE_IMAGES:-./playground/data}

# Both stages: checkpoints every 500 steps (2 kept; a rerun resumes from the last), no wandb, seeded.
BRACO_FLAGS=(
    --mm_projector_type "$PROJECTOR"
    --save_steps 500
    --save_total_limit 2
    --gradient_accumulation_steps "$GRAD_ACCUM_STEPS"
    --report_to none
    --seed "$SEED"
    --data_seed "$SEED"
)
