#!/bin/bash
# MME: answers converted to eval_tool/answers/$CKPT/<category>.txt and scored (perception + cognition,
# written to $RESULTS/mme.json).
# Environment: MODEL_PATH (default liuhaotian/llava-v1.5-13b), MODEL_BASE, CKPT (answers name, default: the
# last component of MODEL_PATH), CONV_MODE (vicuna_v1), BATCH_SIZE (1). Re-running resumes where a run stopped.
set -e

MODEL_PATH="${MODEL_PATH:-liuhaotian/llava-v1.5-13b}"
CKPT="${CKPT:-$(basename "$MODEL_PATH")}"
RESULTS="./playground/data/eval/results/$CKPT"
MODEL_ARGS=(--model-path "$MODEL_PATH" ${MODEL_BASE:+--model-base "$MODEL_BASE"} --temperature 0 --conv-mode "${CONV_MODE:-vicuna_v1}" --batch-size "${BATCH_SIZE:-1}")

python -m llava.eval.model_vqa_loader "${MODEL_ARGS[@]}" \
    --question-file ./playground/data/eval/MME/llava_mme.jsonl \
    --image-folder ./playground/data/eval/MME/MME_Benchmark_release_version \
    --answers-file ./playground/data/eval/MME/answers/$CKPT.jsonl

python -m llava.eval.eval_mme \
    --experiment $CKPT \
    --data-dir ./playground/data/eval/MME \
    --output-json $RESULTS/mme.json
