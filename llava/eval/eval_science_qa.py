"""ScienceQA accuracy (all questions, the image subset the paper reports, and ScienceQA's usual splits).

Usage (as upstream)::

    python -m llava.eval.eval_science_qa --base-dir ./playground/data/eval/scienceqa \\
        --result-file answers/llava-v1.5-13b.jsonl --output-file answers/llava-v1.5-13b_output.jsonl \\
        --output-result answers/llava-v1.5-13b_result.json [--output-json results/sqa.json]

``--base-dir`` holds ScienceQA's ``problems.json`` and ``pid_splits.json``. A prediction is read as
upstream does: the whole text if it is an option letter; the first letter of ``"X. ..."``; else the
letter of exactly one ``"The answer is X."`` match; otherwise it fails and counts as wrong. A question
with no answer line counts as failed. A question is an image question when its answer's prompt contains
``<image>`` (IMG-Accuracy, the paper's SQA number). The ScienceQA splits (subject NAT/SOC/LAN, context
TXT/IMG/NO, grades G1-6/G7-12) come from ``problems.json``.

Answers are told apart by ``question_id`` (upstream keys them so): two answers to one problem are refused,
naming both lines. Problems of the split without an answer are reported (count and first ids; ``missing`` in
the JSON) and, as upstream, count as failed.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any, Sequence

from llava.eval.files import guard_outputs, read_answers, read_json, report_missing, write_json, write_score
from llava.eval.protocol import answers_protocol
from llava.utils import UserError, cli_main, setup_logging

DEFAULT_OPTIONS = ["A", "B", "C", "D", "E"]
FAILED = "FAILED"

_ANSWER_IS = re.compile(r"The answer is ([A-Z]).")

_SUBJECTS = {"natural science": "NAT", "social science": "SOC", "language science": "LAN"}


def parse_answer(text: str, options: Sequence[str]) -> str:
    """Return the option letter a prediction names, or ``"FAILED"``."""
    if text in options:
        return text
    if len(text) >= 3 and text[0] in options and text[1:3] == ". ":
        return text[0]
    matches = _ANSWER_IS.findall(text)
    return matches[0] if len(matches) == 1 else FAILED


def get_pred_idx(prediction: str, choices: Sequence[Any], options: Sequence[str]) -> int:
    """Index of ``prediction`` among the options this problem offers, or -1."""
    offered = list(options[: len(choices)])
    return offered.index(prediction) if prediction in offered else -1


def _splits_of(problem: dict[str, Any]) -> list[str]:
    """ScienceQA's breakdown keys for one problem (subject, context modality, grade band)."""
    keys = []
    subject = _SUBJECTS.get(problem.get("subject", ""))
    if subject:
        keys.append(subject)
    has_text, has_image = bool(problem.get("hint")), bool(problem.get("image"))
    if has_text:
        keys.append("TXT")
    if has_image:
        keys.append("IMG")
    if not has_text and not has_image:
        keys.append("NO")
    grade = str(problem.get("grade", ""))
    if grade.startswith("grade") and grade[5:].isdigit():
        keys.append("G1-6" if int(grade[5:]) <= 6 else "G7-12")
    return keys


def evaluate(
    base_dir: str, result_file: str, split: str = "test", options: Sequence[str] = DEFAULT_OPTIONS
) -> dict[str, Any]:
    """Score an answers file against one ScienceQA split.

    Returns:
        ``{"total", "correct", "accuracy", "img_total", "img_correct", "img_accuracy", "splits",
        "analysis" {"correct": [...], "incorrect": [...]}, "sqa_results" (upstream's result file)}``;
        accuracies in percent.

    Raises:
        ValueError: If the split is unknown or empty.
    """
    split_ids = read_json(os.path.join(base_dir, "pid_splits.json"), what="ScienceQA pid_splits.json")
    if not isinstance(split_ids, dict) or split not in split_ids or not isinstance(split_ids[split], list):
        known = sorted(split_ids) if isinstance(split_ids, dict) else "no splits"
        raise UserError(f"unknown ScienceQA split {split!r}; pid_splits.json has {known}")
    problems = read_json(os.path.join(base_dir, "problems.json"), what="ScienceQA problems.json")
    if not isinstance(problems, dict):
        raise UserError(f"ScienceQA problems.json in {base_dir!r} must map problem ids to problems (ScienceQA's own file)")
    for problem_id in split_ids[split]:
        problem = problems.get(problem_id)
        if not isinstance(problem, dict) or not isinstance(problem.get("choices"), list) or not isinstance(problem.get("answer"), int):
            raise UserError(f"ScienceQA problem {problem_id!r} of split {split!r} is not in problems.json with 'choices' and "
                            "an integer 'answer'; do pid_splits.json and problems.json come from the same ScienceQA release?")
    predictions = {answer["question_id"]: answer for answer in read_answers(result_file, by_prompt=False, fields={"text": str, "prompt": str})}
    missing = report_missing("ScienceQA", split_ids[split], predictions, "they count as failed, as upstream")

    analysis: dict[str, list[dict[str, Any]]] = {"correct": [], "incorrect": []}
    sqa_results: dict[str, Any] = {"acc": None, "correct": None, "count": None, "results": {}, "outputs": {}}
    split_counts: dict[str, list[int]] = {}
    for problem_id in split_ids[split]:
        problem = problems[problem_id]
        prediction = predictions.get(problem_id, {"text": FAILED, "prompt": "Unknown"})
        text = prediction["text"]
        letter = parse_answer(text, options)
        pred_idx = get_pred_idx(letter, problem["choices"], options)
        entry = {
            "question_id": problem_id,
            "parsed_ans": letter,
            "ground_truth": options[problem["answer"]],
            "question": prediction["prompt"],
            "pred": text,
            "is_multimodal": "<image>" in prediction["prompt"],
        }
        sqa_results["results"][problem_id] = pred_idx
        sqa_results["outputs"][problem_id] = text
        is_correct = pred_idx == problem["answer"]
        analysis["correct" if is_correct else "incorrect"].append(entry)
        for key in _splits_of(problem):
            counts = split_counts.setdefault(key, [0, 0])
            counts[0] += int(is_correct)
            counts[1] += 1

    correct, total = len(analysis["correct"]), len(analysis["correct"]) + len(analysis["incorrect"])
    if total == 0:
        raise ValueError(f"ScienceQA split {split!r} has no problems")
    img_correct = sum(1 for entry in analysis["correct"] if entry["is_multimodal"])
    img_total = img_correct + sum(1 for entry in analysis["incorrect"] if entry["is_multimodal"])
    sqa_results.update(acc=correct / total * 100, correct=correct, count=total)
    order = ["NAT", "SOC", "LAN", "TXT", "IMG", "NO", "G1-6", "G7-12"]
    return {
        "total": total,
        "correct": correct,
        "accuracy": correct / total * 100,
        "img_total": img_total,
        "img_correct": img_correct,
        "img_accuracy": img_correct / img_total * 100 if img_total else float("nan"),
        "splits": {
            key: 100.0 * split_counts[key][0] / split_counts[key][1] for key in order if key in split_counts
        },
        "analysis": analysis,
        "sqa_results": sqa_results,
        "missing": missing,
    }


def _options(value: str) -> list[str]:
    # Upstream declares the flag with type=list, so "--options ABCD" means ["A", "B", "C", "D"].
    return list(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-dir", type=str, required=True)
    parser.add_argument("--result-file", type=str, required=True)
    parser.add_argument("--output-file", type=str, default=None)
    parser.add_argument("--output-result", type=str, default=None)
    parser.add_argument("--split", type=str, default="test")
    parser.add_argument("--options", type=_options, default=DEFAULT_OPTIONS)
    parser.add_argument("--output-json", "--output_json", dest="output_json", default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    setup_logging()
    guard_outputs(
        inputs={"--result-file": args.result_file, "--base-dir problems.json": os.path.join(args.base_dir, "problems.json"),
                "--base-dir pid_splits.json": os.path.join(args.base_dir, "pid_splits.json")},
        files={"--output-file": args.output_file, "--output-result": args.output_result, "--output-json": args.output_json},
    )
    result = evaluate(args.base_dir, args.result_file, args.split, args.options)
    print(
        f"Total: {result['total']}, Correct: {result['correct']}, Accuracy: {result['accuracy']:.2f}%, "
        f"IMG-Accuracy: {result['img_accuracy']:.2f}%"
    )
    print("  ".join(f"{key}: {value:.2f}" for key, value in result["splits"].items()))
    if args.output_file:
        write_json(args.output_file, result["analysis"])
    if args.output_result:
        write_json(args.output_result, result["sqa_results"])
    if args.output_json and not result["img_total"]:
        raise UserError(f"no answer in {args.result_file!r} is to an image question (a prompt with '<image>'), so there is no "
                        "IMG-Accuracy, the paper's SQA number, for --output-json; were they written by model_vqa_science?")
    return write_score(
        args.output_json, "sqa", result["img_accuracy"], "IMG-Accuracy (%) on ScienceQA-IMG",
        accuracy=result["accuracy"], total=result["total"], img_total=result["img_total"], missing=len(result["missing"]),
        splits=result["splits"], result_file=os.fspath(args.result_file),
        protocol=answers_protocol(args.result_file),
    )


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
