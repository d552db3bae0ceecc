# Shared by the v1_5 training scripts (sourced, not run): repository root, the flags every LLaVA-1.5 training
# command passes, `launch`, which runs a command or, with DRY_RUN=1, prints it, and `resolve_budget`.
# Environment: LAUNCHER (deepspeed; python: one process without DeepSpeed), PYTHON (python: the interpreter that has
# this project installed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

VISION_TOWER=${VISION_TOWER:-openai/clip-vit-large-patch14-336}
LAUNCHER=${LAUNCHER:-deepspeed}
PYTHON=${PYTHON:-python}

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

# resolve_budget BUDGET: NAME PROJECTOR BUDGET_TOKENS CUTOFF RESIDUAL COORDINATES from braco_patch.budget, the one
# parser of Braco budgets and names (4, 9, 16, 25, any K, k<K>, c<C>s<S>[_coef|_idct|_randrot]); exits 2 on a bad one.
resolve_budget() {
    if ! command -v "$PYTHON" >/dev/null; then
        echo "$0: no Python interpreter '$PYTHON'; set PYTHON to the python of the environment where this project is installed" >&2
        exit 2
    fi
    local info
    info=$("$PYTHON" -m braco_patch.budget "$1") || exit 2
    read -r NAME PROJECTOR BUDGET_TOKENS CUTOFF RESIDUAL COORDINATES <<< "$info"
}

# launch LAUNCHER SCRIPT FLAGS...: run (or, with DRY_RUN=1, print) a training command. With a Python interpreter as the
# launcher (LAUNCHER=python: one process, no DeepSpeed launcher) the script's own --deepspeed config becomes '' (off):
# DeepSpeed started outside its launcher looks for MPI and stops on a missing mpi4py. A --deepspeed the user appends
# comes later and still wins.
launch() {
    local command=("$@") i
    if [[ "$(basename -- "$1")" == python* ]]; then
        for ((i = 2; i < ${#command[@]} - 1; i++)); do
            if [[ "${command[i]}" == --deepspeed ]]; then
                command[i + 1]=''
                break
            fi
        done
    fi
    if [[ -n "${DRY_RUN:-}" ]]; then
        printf '%q ' "${command[@]}"
        printf '\n'
    else
        "${command[@]}"
    fi
}
