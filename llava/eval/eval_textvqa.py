"""TextVQA accuracy of an answers file against ``TextVQA_0.5.1_val.json``.

Usage (as upstream)::

    python -m llava.eval.eval_textvqa --annotation-file TextVQA_0.5.1_val.json \\
        --result-file answers/llava-v1.5-13b.jsonl [--output-json results/textvqa.json]

Answers are matched to annotations by ``(image_id, lower-cased question)``: LLaVA's TextVQA question file
uses the image id as ``question_id`` and writes the question as the first line of the prompt (the OCR
reference and the answer-format suffix follow it). Scores use :class:`TextVQAAccuracyEvaluator`.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from pathlib import Path
from typing import Any, Sequence

from llava.eval.files import check_outputs, read_json, read_jsonl, require_keys, write_score
from llava.eval.m4c_evaluator import TextVQAAccuracyEvaluator
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


def evaluate(annotation_file: str | os.PathLike[str], result_file: str | os.PathLike[str]) -> dict[str, Any]:
    """Score one answers file.

    Returns:
        ``{"samples", "accuracy"}`` with accuracy in percent.

    Raises:
        ValueError: If an answer has no matching annotation.
    """
    annotation_doc = read_json(annotation_file, what="TextVQA annotation file")
    annotations = {
        (entry["image_id"], entry["question"].lower()): entry for entry in annotation_doc["data"]
    }
    results = read_jsonl(result_file, what="answers file")
    pairs = []
    for result in results:
        require_keys(result, ("question_id", "prompt", "text"), f"answer {result.get('question_id')!r}")
        key = (result["question_id"], prompt_processor(result["prompt"]))
        if key not in annotations:
            raise ValueError(
                f"answer {result['question_id']!r} matches no annotation (image_id, question) {key!r}"
            )
        pairs.append({"pred_answer": result["text"], "gt_answers": annotations[key]["answers"]})
    accuracy = TextVQAAccuracyEvaluator().eval_pred_list(pairs)
    return {"samples": len(pairs), "accuracy": 100.0 * accuracy}


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
    check_outputs({"--annotation-file": args.annotation_file, "--result-file": args.result_file}, {"--output-json": args.output_json})
    setup_logging()
    if args.result_file is None and args.result_dir is None:
        raise UserError("give --result-file, --result-dir, or both")
    record = None
    if args.result_file is not None:
        summary = evaluate(args.annotation_file, args.result_file)
        print(Path(args.result_file).stem)
        print(f"Samples: {summary['samples']}\nAccuracy: {summary['accuracy']:.2f}%\n")
        record = write_score(
            args.output_json, "textvqa", summary["accuracy"], "VQA soft accuracy x100",
            samples=summary["samples"], result_file=os.fspath(args.result_file),
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
