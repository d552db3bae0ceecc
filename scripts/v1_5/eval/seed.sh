#!/bin/bash
# SEED-Bench: answers in chunks, one per GPU; accuracy per question type, image and video, and the upload file.
# Environment: as in pope.sh; one process per GPU listed in CUDA_VISIBLE_DEVICES (default 0).
set -e

gpu_list="${CUDA_VISIBLE_DEVICES:-0}"
IFS=',' read -ra GPULIST <<< "$gpu_list"
CHUNKS=${#GPULIST[@]}

MODEL_PATH="${MODEL_PATH:-liuhaotian/llava-v1.5-13b}"
CKPT="${CKPT:-$(basename "$MODEL_PATH")}"
RESULTS="./playground/data/eval/results/$CKPT"
MODEL_ARGS=(--model-path "$MODEL_PATH" ${MODEL_BASE:+--model-base "$MODEL_BASE"} --temperature 0 --conv-mode "${CONV_MODE:-vicuna_v1}" --batch-size "${BATCH_SIZE:-1}")
ANSWERS="./playground/data/eval/seed_bench/answers/$CKPT"

pids=()
for IDX in $(seq 0 $((CHUNKS-1))); do
    CUDA_VISIBLE_DEVICES=${GPULIST[$IDX]} python -m llava.eval.model_vqa_loader "${MODEL_ARGS[@]}" \
        --question-file ./playground/data/eval/seed_bench/llava-seed-bench.jsonl \
        --image-folder ./playground/data/eval/seed_bench \
        --answers-file $ANSWERS/${CHUNKS}_${IDX}.jsonl \
        --num-chunks $CHUNKS \
        --chunk-idx $IDX &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

output_file=$ANSWERS/merge.jsonl
> "$output_file"
for IDX in $(seq 0 $((CHUNKS-1))); do
    cat $ANSWERS/${CHUNKS}_${IDX}.jsonl >> "$output_file"
done

python scripts/convert_seed_for_submission.py \
    --annotation-file ./playground/data/eval/seed_bench/SEED-Bench.json \
    --result-file $output_file \
    --result-upload-file ./playground/data/eval/seed_bench/answers_upload/$CKPT.jsonl \
    --output-json $RESULTS/seed.json
