# Shared by scripts/train_braco.sh and scripts/evaluate.sh (sourced, not run): the official Braco launchers' interface
# (zrrraa/Braco: BUDGET SEED arguments, REPRO_ROOT / MODEL_ROOT / DATA_ROOT, the run folder layout) on top of this
# repository's scripts. Sets BUDGET, SEED, NAME (k<K> or the allocation), PROJECTOR, RUN_ROOT, STAGE1, STAGE2.
#
# Environment: REPRO_ROOT (a writable experiment folder; runs go to $REPRO_ROOT/outputs/braco/k<B>/seed<S>),
# MODEL_ROOT (vicuna-7b-v1.5/, clip-vit-large-patch14-336/), DATA_ROOT (LLaVA-Pretrain/, LLaVA-Instruct/, eval/),
# PYTHON (python), DRY_RUN=1 (print the commands; check, create and write nothing).
source "$(dirname "${BASH_SOURCE[0]}")/v1_5/_common.sh"

REPO_ROOT=$(pwd)

fail() {
    echo "$0: $*" >&2
    exit 2
}

# braco_arguments "$@": the official two positional arguments, BUDGET then SEED.
braco_arguments() {
    if [[ $# -lt 2 ]]; then
        fail "usage: bash $0 BUDGET SEED [extra flags]   (BUDGET: 4, 9, 16 or 25 as in the paper, any K, or c<C>s<S>; SEED: an integer >= 0)"
    fi
    BUDGET=$1
    SEED=$2
    [[ "$SEED" =~ ^[0-9]+$ ]] || fail "SEED must be an integer >= 0, got '$SEED'"
    # An interpreter without this project (e.g. the system python, environment not activated) would end in a traceback.
    if command -v "$PYTHON" > /dev/null && ! "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in ("torch", "llava", "braco_patch")))' 2> /dev/null; then
        fail "'$PYTHON' cannot import torch, llava and braco_patch; activate the environment where this project is installed (pip install -e .) or set PYTHON to its python"
    fi
    resolve_budget "$BUDGET"
    for variable in REPRO_ROOT MODEL_ROOT DATA_ROOT; do
        [[ -n "${!variable:-}" ]] || fail "set $variable (REPRO_ROOT: a writable experiment folder; MODEL_ROOT: the folder holding vicuna-7b-v1.5 and clip-vit-large-patch14-336; DATA_ROOT: the folder holding LLaVA-Pretrain, LLaVA-Instruct and eval)"
    done
    RUN_ROOT="$REPRO_ROOT/outputs/braco/$NAME/seed$SEED"
    STAGE1="$RUN_ROOT/stage1"
    STAGE2="$RUN_ROOT/stage2"
    # The official helper seeds Python's hashing and cuBLAS's workspace (not deterministic kernels); so do we.
    export PYTHONHASHSEED="$SEED" CUBLAS_WORKSPACE_CONFIG=:4096:8
}

dry_run() { [[ -n "${DRY_RUN:-}" ]]; }

require_dir() { dry_run || [[ -d "$1" ]] || fail "$2 '$1' is not a folder; see README.md, 'Coming from the official Braco code'"; }
require_file() { dry_run || [[ -f "$1" ]] || fail "$2 '$1' does not exist; see README.md, 'Coming from the official Braco code'"; }

# writable_folder DIR: create DIR (and its parents) or stop with one sentence (read-only or full disk, a file in the way).
writable_folder() {
    dry_run && return 0
    local probe
    if ! mkdir -p "$1" 2>/dev/null || ! probe=$(mktemp "$1/.write-probe.XXXXXX" 2>/dev/null); then
        fail "cannot write to '$1' (read-only, full, or a file is in the way); set REPRO_ROOT to a writable folder"
    fi
    rm -f "$probe"
}

# mark DONE_FILE: the official completion marker (an empty file), written once everything before it succeeded.
mark() {
    if dry_run; then echo "# done: $1"; else : > "$1"; fi
}
