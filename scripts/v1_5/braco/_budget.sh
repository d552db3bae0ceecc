# Shared by the Braco scripts (sourced): BUDGET (first argument) -> PROJECTOR (mm_projector_type) and NAME.
#   4, 9, 16, 25  -> braco_k4 ... braco_k25, the paper's allocations (c1s3, c2s5, c3s7, c4s9 with idct);
#   any other K   -> braco_k<K> (C = max(floor(sqrt(K)) - 1, 1), S = K - C^2);
#   c<C>s<S>[_coef|_idct|_randrot] or braco_c<C>s<S>... -> that allocation.
source "$(dirname "${BASH_SOURCE[0]}")/../_common.sh"

USAGE="usage: bash $0 BUDGET [extra train flags]   (BUDGET: 4, 9, 16, 25, any K, or c<C>s<S> such as c3s7)"
BUDGET=${1:-}
if [[ -z "$BUDGET" ]]; then
    echo "$USAGE" >&2
    exit 2
fi
shift
BUDGET_ARG=$BUDGET
BUDGET=${BUDGET#braco_}
if [[ "$BUDGET" =~ ^[0-9]+$ && "$BUDGET" -ge 1 ]]; then
    NAME="k$BUDGET"
elif [[ "$BUDGET" =~ ^k[0-9]+$|^c[0-9]+s[0-9]+(_coef|_idct|_randrot|_vanilla)?$ ]]; then
    NAME="$BUDGET"
else
    echo "unknown budget '$BUDGET_ARG': expected 4, 9, 16, 25, another positive integer K, or c<C>s<S> such as c3s7" >&2
    exit 2
fi
PROJECTOR="braco_$NAME"

# The paper's recipe (braco-official §5): Vicuna-7B v1.5, CLIP-L/336, 8 GPUs (use GRAD_ACCUM_STEPS=2 on 4).
MODEL=${MODEL:-lmsys/vicuna-7b-v1.5}
SEED=${SEED:-0}
GRAD_ACCUM_STEPS=${GRAD_ACCUM_STEPS:-1}
CHECKPOINTS=${CHECKPOINTS:-./checkpoints}
PRETRAIN_DIR="$CHECKPOINTS/llava-v1.5-7b-braco-$NAME-pretrain"
FINETUNE_DIR="$CHECKPOINTS/llava-v1.5-7b-braco-$NAME"

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
