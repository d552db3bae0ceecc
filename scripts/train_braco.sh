#!/usr/bin/env bash
# The official Braco training launcher's interface (zrrraa/Braco scripts/train_braco.sh), run by this repository:
#   bash scripts/train_braco.sh BUDGET SEED [extra train flags, appended to both stages]
# Both stages of the paper's recipe (scripts/v1_5/braco/{pretrain,finetune}.sh: Vicuna-7B v1.5, CLIP-L/336, ZeRO-2 then
# ZeRO-3, global batch 256 then 128, lr 1e-3 then 2e-5, checkpoints every 500 steps, 2 kept), with the official
# temperature schedules (cosine 2.0 -> 1.2 over 2180 steps, then 1.2 -> 0.8 over 4677), into
#   $REPRO_ROOT/outputs/braco/k<BUDGET>/seed<SEED>/{stage1,stage2,metadata/,COMPLETE}.
# Reads $MODEL_ROOT/{vicuna-7b-v1.5,clip-vit-large-patch14-336} and $DATA_ROOT/LLaVA-Pretrain/{blip_laion_cc_sbu_558k.json,
# images}, $DATA_ROOT/LLaVA-Instruct/{llava_v1_5_mix665k.json,images}. A rerun skips a stage that finished (its
# mm_projector.bin, or model weights, exist) and resumes an interrupted one from its newest complete checkpoint (the
# official launcher resumes too). Environment: see scripts/braco_common.sh; GRAD_ACCUM_STEPS (1; 2 on 4 GPUs keeps the
# global batch sizes), LAUNCHER (deepspeed).
source "$(dirname "$0")/braco_common.sh"
braco_arguments "$@"
shift 2

# The official runs' annealing lengths (slightly shorter than the stages' 2181 and ~5198 steps).
STAGE1_TEMP_STEPS=2180
STAGE2_TEMP_STEPS=4677

export MODEL="$MODEL_ROOT/vicuna-7b-v1.5"
export VISION_TOWER="$MODEL_ROOT/clip-vit-large-patch14-336"
export PRETRAIN_DATA="$DATA_ROOT/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json"
export PRETRAIN_IMAGES="$DATA_ROOT/LLaVA-Pretrain/images"
export FINETUNE_DATA="$DATA_ROOT/LLaVA-Instruct/llava_v1_5_mix665k.json"
export FINETUNE_IMAGES="$DATA_ROOT/LLaVA-Instruct/images"
export PRETRAIN_DIR="$STAGE1" FINETUNE_DIR="$STAGE2" SEED GRAD_ACCUM_STEPS="${GRAD_ACCUM_STEPS:-1}" LAUNCHER PYTHON

require_dir "$MODEL" "the LLM folder"
require_dir "$VISION_TOWER" "the vision tower folder"
require_file "$PRETRAIN_DATA" "the stage-1 data file"
require_dir "$PRETRAIN_IMAGES" "the stage-1 image folder"
require_file "$FINETUNE_DATA" "the stage-2 data file"
require_dir "$FINETUNE_IMAGES" "the stage-2 image folder"
writable_folder "$RUN_ROOT"

# What the official launcher records before training: interpreter, packages, GPUs, code version, the protocol.
record_environment() {
    dry_run && return 0
    local metadata="$RUN_ROOT/metadata"
    mkdir -p "$metadata"
    "$PYTHON" -VV > "$metadata/python.txt"
    "$PYTHON" -m pip freeze > "$metadata/pip-freeze.txt" 2>/dev/null || echo "pip is not available" > "$metadata/pip-freeze.txt"
    nvidia-smi -q > "$metadata/nvidia-smi.txt" 2>/dev/null || echo "nvidia-smi is not available on this machine" > "$metadata/nvidia-smi.txt"
    git -C "$REPO_ROOT" rev-parse HEAD > "$metadata/llava-commit.txt" 2>/dev/null || echo "not a git checkout" > "$metadata/llava-commit.txt"
    cp "$REPO_ROOT/configs/braco.yaml" "$metadata/resolved_protocol.yaml"
}
record_environment

# Under DeepSpeed this project resumes only when asked (its checkpoint files are unpickled; docs/TRAINING.md); these
# folders are this launcher's own, so a rerun asks, as the official launcher resumes automatically.
resume_flags() {
    if compgen -G "$1/checkpoint-*" > /dev/null; then
        echo "$0: resuming $1 from its newest complete checkpoint" >&2
        echo "--resume_from_checkpoint True"
    fi
}

# finished STAGE_DIR FILE...: the stage wrote its final weights (only the end of a run writes them at the top level).
# Retraining a finished stage 1 would rewrite mm_projector.bin, which stage 2's resume record names.
finished() {
    local folder=$1 file
    shift
    dry_run && return 1
    for file in "$@"; do
        if [[ -f "$folder/$file" ]]; then
            echo "$0: $folder finished earlier ($file); skipping it (move it away to train it again)" >&2
            return 0
        fi
    done
    return 1
}

if ! finished "$STAGE1" mm_projector.bin; then
    bash scripts/v1_5/braco/pretrain.sh "$BUDGET" "$SEED" --mm_fourier_temp_steps "$STAGE1_TEMP_STEPS" $(resume_flags "$STAGE1") "$@"
fi
require_file "$STAGE1/mm_projector.bin" "stage 1 did not write"
if ! finished "$STAGE2" model.safetensors model.safetensors.index.json; then
    bash scripts/v1_5/braco/finetune.sh "$BUDGET" "$SEED" --mm_fourier_temp_steps "$STAGE2_TEMP_STEPS" $(resume_flags "$STAGE2") "$@"
fi
mark "$RUN_ROOT/COMPLETE"
