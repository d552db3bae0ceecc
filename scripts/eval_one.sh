#!/usr/bin/env bash
# One benchmark of scripts/evaluate.sh (the official eval_one.sh's interface, run with this repository's loaders and
# scorers): bash scripts/eval_one.sh BENCHMARK, with MODEL_PATH, RESULT_ROOT, DATA_ROOT (and METHOD, NAME, SEED for MME's
# experiment name) in the environment. Answers go to $RESULT_ROOT/<benchmark>/answers.jsonl (a rerun resumes them);
# scores to score.json (plus the official tools' score.txt where the benchmark ships them). Data under $DATA_ROOT/eval:
#   gqa/        llava_gqa_testdev_balanced.jsonl, data/images/, data/testdev_balanced_questions.json [, data/eval/eval.py]
#   mmbench/    mmbench_dev_20230712.tsv, mmbench_dev_cn_20231003.tsv
#   mme/        llava_mme.jsonl, MME_Benchmark_release_version/
#   pope/       llava_pope_test.jsonl, coco-val2014/, coco/coco_pope_{adversarial,popular,random}.json
#   scienceqa/  llava_test_CQM-A.json, images/test/, problems.json, pid_splits.json
#   textvqa/    llava_textvqa_val_v051_ocr.jsonl, train_images/, TextVQA_0.5.1_val.json
#   mmvet/      llava-mm-vet.jsonl, images/   (answers.json for MM-Vet's GPT judge: python -m llava.eval.eval_mmvet)
# Environment: DEVICE (the loaders' --device; default: cuda when there is a GPU), DRY_RUN=1 prints the commands.
set -euo pipefail
cd "$(dirname "$0")/.."

BENCHMARK="${1:?usage: bash scripts/eval_one.sh BENCHMARK (gqa, mmbench_en, mmbench_cn, mme, pope, scienceqa, textvqa, mmvet)}"
: "${MODEL_PATH:?set MODEL_PATH (scripts/evaluate.sh does)}" "${RESULT_ROOT:?set RESULT_ROOT}" "${DATA_ROOT:?set DATA_ROOT}"
PYTHON=${PYTHON:-python}
EVAL="$DATA_ROOT/eval"
OUT_DIR="$RESULT_ROOT/$BENCHMARK"
OUT="$OUT_DIR/answers.jsonl"
DECODING=(--temperature 0 --conv-mode vicuna_v1 ${DEVICE:+--device "$DEVICE"})

run() {
    if [[ -n "${DRY_RUN:-}" ]]; then
        printf '%q ' "$@"
        printf '\n'
    else
        "$@"
    fi
}

BENCHMARKS="gqa mmbench_en mmbench_cn mme pope scienceqa textvqa mmvet"
if [[ " $BENCHMARKS " != *" $BENCHMARK "* ]]; then
    echo "$0: unknown benchmark '$BENCHMARK'; expected one of: $BENCHMARKS" >&2
    exit 2
fi
[[ -n "${DRY_RUN:-}" ]] || mkdir -p "$OUT_DIR"
case "$BENCHMARK" in
    gqa)
        run "$PYTHON" -m llava.eval.model_vqa_loader --model-path "$MODEL_PATH" \
            --question-file "$EVAL/gqa/llava_gqa_testdev_balanced.jsonl" --image-folder "$EVAL/gqa/data/images" \
            --answers-file "$OUT" "${DECODING[@]}"
        run "$PYTHON" scripts/convert_gqa_for_eval.py --src "$OUT" --dst "$OUT_DIR/testdev_balanced_predictions.json"
        run "$PYTHON" -m llava.eval.eval_gqa --questions "$EVAL/gqa/data/testdev_balanced_questions.json" \
            --predictions "$OUT_DIR/testdev_balanced_predictions.json" --output-json "$OUT_DIR/score.json"
        if [[ -f "$EVAL/gqa/data/eval/eval.py" ]]; then
            # GQA's own script reads the predictions from its data folder (as the official launcher arranges).
            run cp "$OUT_DIR/testdev_balanced_predictions.json" "$EVAL/gqa/data/testdev_balanced_predictions.json"
            run bash -c 'cd "$1" && "$2" eval/eval.py --tier testdev_balanced > "$3"' _ "$EVAL/gqa/data" "$PYTHON" "$OUT_DIR/score.txt"
        fi
        ;;
    mmbench_en|mmbench_cn)
        if [[ "$BENCHMARK" == mmbench_en ]]; then SPLIT=mmbench_dev_20230712; LANG_FLAGS=(--lang en); else
            SPLIT=mmbench_dev_cn_20231003; LANG_FLAGS=(--lang cn); fi
        run "$PYTHON" -m llava.eval.model_vqa_mmbench --model-path "$MODEL_PATH" --question-file "$EVAL/mmbench/$SPLIT.tsv" \
            --answers-file "$OUT" "${LANG_FLAGS[@]}" --single-pred-prompt "${DECODING[@]}"
        run mkdir -p "$OUT_DIR/upload"
        run "$PYTHON" scripts/convert_mmbench_for_submission.py --annotation-file "$EVAL/mmbench/$SPLIT.tsv" \
            --result-dir "$OUT_DIR" --upload-dir "$OUT_DIR/upload" --experiment answers
        if head -1 "$EVAL/mmbench/$SPLIT.tsv" 2>/dev/null | tr '\t' '\n' | grep -qx answer; then
            run "$PYTHON" -m llava.eval.eval_mmbench "${LANG_FLAGS[@]}" --annotation-file "$EVAL/mmbench/$SPLIT.tsv" \
                --result-file "$OUT" --output-json "$OUT_DIR/score.json"
        fi
        ;;
    mme)
        EXPERIMENT="${METHOD:-braco}_${NAME:-k}_seed${SEED:-0}"
        run "$PYTHON" -m llava.eval.model_vqa_loader --model-path "$MODEL_PATH" --question-file "$EVAL/mme/llava_mme.jsonl" \
            --image-folder "$EVAL/mme/MME_Benchmark_release_version" --answers-file "$OUT" "${DECODING[@]}"
        run mkdir -p "$EVAL/mme/answers"
        run cp "$OUT" "$EVAL/mme/answers/$EXPERIMENT.jsonl"
        run "$PYTHON" -m llava.eval.eval_mme --experiment "$EXPERIMENT" --data-dir "$EVAL/mme" --output-json "$OUT_DIR/score.json"
        run mkdir -p "$OUT_DIR/official_answers"
        run cp -a "$EVAL/mme/eval_tool/answers/$EXPERIMENT/." "$OUT_DIR/official_answers/"
        ;;
    pope)
        run "$PYTHON" -m llava.eval.model_vqa_loader --model-path "$MODEL_PATH" --question-file "$EVAL/pope/llava_pope_test.jsonl" \
            --image-folder "$EVAL/pope/coco-val2014" --answers-file "$OUT" "${DECODING[@]}"
        run "$PYTHON" -m llava.eval.eval_pope --annotation-dir "$EVAL/pope/coco" --question-file "$EVAL/pope/llava_pope_test.jsonl" \
            --result-file "$OUT" --output-json "$OUT_DIR/score.json"
        ;;
    scienceqa)
        run "$PYTHON" -m llava.eval.model_vqa_science --model-path "$MODEL_PATH" --question-file "$EVAL/scienceqa/llava_test_CQM-A.json" \
            --image-folder "$EVAL/scienceqa/images/test" --answers-file "$OUT" --single-pred-prompt "${DECODING[@]}"
        run "$PYTHON" -m llava.eval.eval_science_qa --base-dir "$EVAL/scienceqa" --result-file "$OUT" \
            --output-file "$OUT_DIR/output.jsonl" --output-result "$OUT_DIR/result.json" --output-json "$OUT_DIR/score.json"
        ;;
    textvqa)
        run "$PYTHON" -m llava.eval.model_vqa_loader --model-path "$MODEL_PATH" \
            --question-file "$EVAL/textvqa/llava_textvqa_val_v051_ocr.jsonl" --image-folder "$EVAL/textvqa/train_images" \
            --answers-file "$OUT" "${DECODING[@]}"
        run "$PYTHON" -m llava.eval.eval_textvqa --annotation-file "$EVAL/textvqa/TextVQA_0.5.1_val.json" --result-file "$OUT" \
            --output-json "$OUT_DIR/score.json"
        ;;
    mmvet)
        run "$PYTHON" -m llava.eval.model_vqa --model-path "$MODEL_PATH" --question-file "$EVAL/mmvet/llava-mm-vet.jsonl" \
            --image-folder "$EVAL/mmvet/images" --answers-file "$OUT" "${DECODING[@]}"
        run "$PYTHON" scripts/convert_mmvet_for_eval.py --src "$OUT" --dst "$OUT_DIR/answers.json"
        ;;
esac
