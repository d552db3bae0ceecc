# Sourced by scripts/v1_5/eval/*.sh (not run on its own): model settings from the environment and the
# one-process-per-GPU answering loop.
#
# Environment: MODEL_PATH (default liuhaotian/llava-v1.5-13b), MODEL_BASE, CKPT (answers name, default: the last
# component of MODEL_PATH), CONV_MODE (vicuna_v1; qbench.sh: llava_v1, as upstream), BATCH_SIZE (1),
# CUDA_VISIBLE_DEVICES (chunked scripts: one chunk per listed GPU, default 0), OVERWRITE (set to 1 to answer again
# from scratch; the old answers stay until the first new one is written), LOADER_ARGS (more loader flags, split at
# spaces, e.g. "--device cpu --max_new_tokens 16" or "--projector-setting mm_mqt_num_tokens=8"). Re-running a
# script resumes where a run stopped; the loaders refuse to resume answers produced by another checkpoint, another
# question file or other decoding settings (recorded in <answers>.meta.json) until OVERWRITE=1 is set.

MODEL_PATH="${MODEL_PATH:-liuhaotian/llava-v1.5-13b}"
CKPT="${CKPT:-$(basename "$MODEL_PATH")}"
RESULTS="./playground/data/eval/results/$CKPT"
MODEL_ARGS=(--model-path "$MODEL_PATH" ${MODEL_BASE:+--model-base "$MODEL_BASE"} --temperature 0
            --conv-mode "${CONV_MODE:-vicuna_v1}" --batch-size "${BATCH_SIZE:-1}")
if [ "${OVERWRITE:-0}" = "1" ]; then MODEL_ARGS+=(--overwrite); fi
if [ -n "${LOADER_ARGS:-}" ]; then read -ra _loader_args <<< "$LOADER_ARGS"; MODEL_ARGS+=("${_loader_args[@]}"); fi

# answer_in_chunks QUESTION_FILE IMAGE_FOLDER ANSWERS_DIR
# Runs llava.eval.model_vqa_loader once per GPU in CUDA_VISIBLE_DEVICES on its chunk of the questions, waits
# for all of them (a failed chunk fails the script), and concatenates the chunks into ANSWERS_DIR/merge.jsonl
# (with their common record merge.jsonl.meta.json).
answer_in_chunks() {
    local questions=$1 images=$2 answers=$3
    local -a gpus pids
    IFS=',' read -ra gpus <<< "${CUDA_VISIBLE_DEVICES:-0}"
    local chunks=${#gpus[@]} idx pid
    for idx in $(seq 0 $((chunks - 1))); do
        CUDA_VISIBLE_DEVICES=${gpus[$idx]} python -m llava.eval.model_vqa_loader "${MODEL_ARGS[@]}" \
            --question-file "$questions" \
            --image-folder "$images" \
            --answers-file "$answers/${chunks}_${idx}.jsonl" \
            --num-chunks "$chunks" \
            --chunk-idx "$idx" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    local -a parts
    : > "$answers/merge.jsonl"
    for idx in $(seq 0 $((chunks - 1))); do
        cat "$answers/${chunks}_${idx}.jsonl" >> "$answers/merge.jsonl"
        parts+=("$answers/${chunks}_${idx}.jsonl")
    done
    # merge.jsonl.meta.json: the chunks' common record, so the scorers can state the protocol of the merged answers
    python -m llava.eval.provenance "$answers/merge.jsonl" "${parts[@]}"
}
