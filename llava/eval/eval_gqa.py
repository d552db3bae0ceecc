"""GQA accuracy of converted predictions, computed as GQA's official ``eval.py`` computes "Accuracy".

Usage::

    python scripts/convert_gqa_for_eval.py --src merge.jsonl --dst data/testdev_balanced_predictions.json
    python -m llava.eval.eval_gqa --questions data/testdev_balanced_questions.json \\
        --predictions data/testdev_balanced_predictions.json [--output-json results/gqa.json]

A question counts when it is balanced (``isBalanced``, true for every testdev-balanced question) and is
correct when the prediction string equals its ``answer``; a question without a prediction is wrong (the
official script stops instead). Accuracy is also broken down by the ``types.structural`` field. The official
script's other metrics (consistency, validity, plausibility, grounding, distribution) need scene graphs and
choices and are not computed here; run ``eval/eval.py --tier testdev_balanced`` for those.

Predictions are told apart by ``questionId``: two predictions for one question are refused. Unanswered questions
are reported (count and first ids) and count as wrong.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any, Sequence

from llava.eval.files import QUESTION_ID, check_records, guard_outputs, ordinal, read_json, report_missing, write_score
from llava.eval.protocol import answers_protocol
from llava.utils import UserError, cli_main, setup_logging

logger = logging.getLogger(__name__)


def score(questions: dict[str, dict[str, Any]], predictions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy (percent) of ``[{"questionId", "prediction"}]`` against GQA's question dictionary.

    Returns:
        ``{"accuracy", "questions", "unanswered", "structural": {type: accuracy}}``.

    Raises:
        UserError: If no balanced question is found, or two predictions are for one question.
    """
    predicted: dict[str, Any] = {}
    for number, entry in enumerate(predictions, start=1):
        key = str(entry["questionId"])
        if key in predicted:
            raise UserError(f"GQA predictions: the {ordinal(number)} prediction repeats question {key!r}; "
                            "each question must be answered once (were two answers files merged twice?)")
        predicted[key] = entry["prediction"]
    correct = total = 0
    balanced: list[str] = []
    per_type: dict[str, list[int]] = {}
    for question_id, question in questions.items():
        if not question.get("isBalanced", True):
            continue
        balanced.append(str(question_id))
        prediction = predicted.get(str(question_id))
        hit = int(prediction is not None and prediction == question["answer"])
        correct += hit
        total += 1
        structural = question.get("types", {}).get("structural")
        if structural is not None:
            tally = per_type.setdefault(structural, [0, 0])
            tally[0] += hit
            tally[1] += 1
    if total == 0:
        raise UserError("the GQA question file has no balanced questions")
    unanswered = report_missing("GQA", balanced, predicted, "they count as wrong")
    return {
        "accuracy": 100.0 * correct / total,
        "questions": total,
        "unanswered": len(unanswered),
        "structural": {name: 100.0 * c / n for name, (c, n) in sorted(per_type.items())},
    }


def load_questions(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """GQA's question file (``{question id: {"answer", "isBalanced", "types", ...}}``), checked.

    Raises:
        UserError: If it is not a mapping of question ids to objects with an ``answer``.
    """
    questions = read_json(path, what="GQA question file")
    if not isinstance(questions, dict) or any(not isinstance(entry, dict) or "answer" not in entry for entry in questions.values()):
        raise UserError(f"GQA question file {os.fspath(path)!r} must map question ids to objects with an 'answer' "
                        "(GQA's testdev_balanced_questions.json); is it the file of another benchmark?")
    return questions


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=str, required=True, help="e.g. testdev_balanced_questions.json")
    parser.add_argument("--predictions", type=str, required=True, help="output of convert_gqa_for_eval.py")
    parser.add_argument("--answers-file", "--answers_file", dest="answers_file", default=None,
                        help="the answers the predictions were converted from: their record names the protocol in --output-json")
    parser.add_argument("--output-json", "--output_json", dest="output_json", default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    setup_logging()
    guard_outputs(inputs={"--questions": args.questions, "--predictions": args.predictions, "--answers-file": args.answers_file},
                  files={"--output-json": args.output_json})
    predictions = check_records(read_json(args.predictions, what="GQA predictions"), {"questionId": QUESTION_ID, "prediction": str},
                                f"GQA predictions {args.predictions!r}", "written by scripts/convert_gqa_for_eval.py")
    result = score(load_questions(args.questions), predictions)
    print(f"Accuracy: {result['accuracy']:.2f}% ({result['questions']} questions)")
    for name, accuracy in result["structural"].items():
        print(f"  {name}: {accuracy:.2f}%")
    return write_score(
        args.output_json, "gqa", result["accuracy"], "accuracy (%) on testdev-balanced",
        questions=result["questions"], unanswered=result["unanswered"], structural=result["structural"],
        predictions=os.fspath(args.predictions), protocol=answers_protocol(args.answers_file),
    )


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
