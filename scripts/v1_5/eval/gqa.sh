#!/bin/bash
# GQA testdev-balanced: answers in chunks, one per GPU; converted for GQA's eval.py, scored locally
# (accuracy, written to $RESULTS/gqa.json) and by the official eval/eval.py when it is present.
# Environment: as in pope.sh; one process per GPU listed in CUDA_VISIBLE_DEVICES (default 0).
set -e

gpu_list="${CUDA_VISIBLE_DEVICES:-0}"
IFS=',' read -ra GPULIST <<< "$gpu_list"
CHUNKS=${#GPULIST[@]}

MODEL_PATH="${MODEL_PATH:-liuhaotian/llava-v1.5-13b}"
CKPT="${CKPT:-$(basename "$MODEL_PATH")}"
RESULTS="./playground/data/eval/results/$CKPT"
MODEL_ARGS=(--model-path "$MODEL_PATH" ${MODEL_BASE:+--model-base "$MODEL_BASE"} --temperature 0 --conv-mode "${CONV_MODE:-vicuna_v1}" --batch-size "${BATCH_SIZE:-1}")
SPLIT="llava_gqa_testdev_balanced"
GQADIR="./playground/data/eval/gqa/data"
ANSWERS="./playground/data/eval/gqa/answers/$SPLIT/$CKPT"

pids=()
for IDX in $(seq 0 $((CHUNKS-1))); do
    CUDA_VISIBLE_DEVICES=${GPULIST[$IDX]} python -m llava.eval.model_vqa_loader "${MODEL_ARGS[@]}" \
        --question-file ./playground/data/eval/gqa/$SPLIT.jsonl \
        --image-folder ./playground/data/eval/gqa/data/images \
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

python scripts/convert_gqa_for_eval.py --src $output_file --dst $GQADIR/testdev_balanced_predictions.json

python -m llava.eval.eval_gqa \
    --questions $GQADIR/testdev_balanced_questions.json \
    --predictions $GQADIR/testdev_balanced_predictions.json \
    --output-json $RESULTS/gqa.json

if [ -f $GQADIR/eval/eval.py ]; then
    (cd $GQADIR && python eval/eval.py --tier testdev_balanced)
fi
