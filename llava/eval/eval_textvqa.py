"""TextVQA accuracy of an answers file against ``TextVQA_0.5.1_val.json``.

Usage (as upstream)::

    python -m llava.eval.eval_textvqa --annotation-file TextVQA_0.5.1_val.json \\
        --result-file answers/llava-v1.5-13b.jsonl [--output-json results/textvqa.json]

Answers are matched to annotations by ``(image_id, lower-cased question)``: LLaVA's TextVQA question file
uses the image id as ``question_id`` and writes the question as the first line of the prompt (the OCR
reference and the answer-format suffix follow it). Scores use :class:`TextVQAAccuracyEvaluator`.

An image carries several questions, so answers are told apart by ``question_id`` and ``prompt``
(:func:`llava.eval.files.answer_identity`): two answers to one question are refused, naming both lines.
Annotated questions without an answer are reported (count and first ids; ``missing`` in the JSON) and, as
upstream, left out of the accuracy.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from pathlib import Path
from typing import Any, Sequence

from llava.eval.files import check_records, guard_outputs, read_answers, read_json, report_missing, write_score
from llava.eval.m4c_evaluator import TextVQAAccuracyEvaluator
from llava.eval.protocol import answers_protocol
from llava.utils import UserError, cli_main, setup_logging

logger = logging.getLogger(__name__)

_OCR_PROMPT_QUESTION = re.compile(r"Question: (.*?) Short answer:", re.DOTALL)


def prompt_processor(prompt: str) -> str:
    """Extract the lower-cased question from one of the prompt layouts LLaVA's TextVQA files use.

    * ``"OCR tokens: ... Question: <q> Short answer:"``;
    * three lines with a ``"Reference OCR token: ..."`` line, the question being the other first line;
    * two lines: question, then the answer-format instruction.

    Raises:
        ValueError: For any other layout.
    """
    lines = prompt.split("\n")
    if prompt.startswith("OCR tokens: "):
        match = _OCR_PROMPT_QUESTION.search(prompt)
        if match is None:
            raise ValueError(f"prompt starts with 'OCR tokens: ' but has no 'Question: ... Short answer:' part: {prompt!r}")
        question = match.group(1)
    elif "Reference OCR token: " in prompt and len(lines) == 3:
        question = lines[1] if prompt.startswith("Reference OCR token:") else lines[0]
    elif len(lines) == 2:
        question = lines[0]
    else:
        raise ValueError(f"cannot find the question in TextVQA prompt {prompt!r}")
    return question.lower()


def load_annotations(annotation_file: str | os.PathLike[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(image_id, lower-cased question): annotation}`` from ``TextVQA_0.5.1_val.json``.

    Raises:
        UserError: If the file is not TextVQA's (``{"data": [{"image_id", "question", "answers"}, ...]}``).
    """
    document = read_json(annotation_file, what="TextVQA annotation file")
    fields = {"image_id": str, "question": str, "answers": list}
    where = f"TextVQA annotation file {os.fspath(annotation_file)!r}"
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise UserError(f"{where} must be TextVQA_0.5.1_val.json, an object whose 'data' lists records with 'image_id', "
                        "'question', 'answers'; is it the file of another benchmark?")
    entries = check_records(document["data"], fields, where, "TextVQA_0.5.1_val.json's 'data'")
    return {(entry["image_id"], entry["question"].lower()): entry for entry in entries}


def evaluate(annotation_file: str | os.PathLike[str], result_file: str | os.PathLike[str]) -> dict[str, Any]:
    """Score one answers file.

    Returns:
        ``{"samples", "accuracy", "missing"}`` with accuracy in percent and the unanswered ``(image_id, question)``.

    Raises:
        UserError: If an answer has no matching annotation, or two answers are to one question.
    """
    annotations = load_annotations(annotation_file)
    pairs, answered = [], set()
    for result in read_answers(result_file, by_prompt=True):
        try:
            key = (result["question_id"], prompt_processor(result["prompt"]))
        except ValueError as error:
            raise UserError(f"answer {result['question_id']!r}: {error}") from None
        if key not in annotations:
            raise UserError(f"answer {result['question_id']!r} matches no annotation (image_id, question) {key!r}")
        answered.add(key)
        pairs.append({"pred_answer": result["text"], "gt_answers": annotations[key]["answers"]})
    if not pairs:
        raise UserError(f"answers file {os.fspath(result_file)!r} holds no answers")
    missing = report_missing("TextVQA", list(annotations), answered, "they are left out of the accuracy, as upstream")
    accuracy = TextVQAAccuracyEvaluator().eval_pred_list(pairs)
    return {"samples": len(pairs), "accuracy": 100.0 * accuracy, "missing": [list(key) for key in missing]}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotation-file", type=str, required=True)
    parser.add_argument("--result-file", type=str, default=None)
    parser.add_argument("--result-dir", type=str, default=None, help="score every *.jsonl in this folder")
    parser.add_argument(
        "--output-json", "--output_json", dest="output_json", default=None,
        help="write the score of --result-file here (for llava.eval.summarize)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    args = build_parser().parse_args(argv)
    setup_logging()
    if args.result_file is None and args.result_dir is None:
        raise UserError("give --result-file, --result-dir, or both")
    guard_outputs(inputs={"--annotation-file": args.annotation_file, "--result-file": args.result_file,
                          "--result-dir": args.result_dir}, files={"--output-json": args.output_json})
    record = None
    if args.result_file is not None:
        summary = evaluate(args.annotation_file, args.result_file)
        print(Path(args.result_file).stem)
        print(f"Samples: {summary['samples']}\nAccuracy: {summary['accuracy']:.2f}%\n")
        record = write_score(
            args.output_json, "textvqa", summary["accuracy"], "VQA soft accuracy x100",
            samples=summary["samples"], missing=len(summary["missing"]), result_file=os.fspath(args.result_file),
            protocol=answers_protocol(args.result_file),
        )
    if args.result_dir is not None:
        for name in sorted(os.listdir(args.result_dir)):
            if not name.endswith(".jsonl"):
                logger.info("skipping %s (not .jsonl)", name)
                continue
            scored = evaluate(args.annotation_file, os.path.join(args.result_dir, name))
            print(Path(name).stem)
            print(f"Samples: {scored['samples']}\nAccuracy: {scored['accuracy']:.2f}%\n")
    return record


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
