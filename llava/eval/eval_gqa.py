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
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any, Sequence

from llava.eval.files import check_outputs, read_json, write_score
from llava.utils import cli_main, setup_logging

logger = logging.getLogger(__name__)


def score(questions: dict[str, dict[str, Any]], predictions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy (percent) of ``[{"questionId", "prediction"}]`` against GQA's question dictionary.

    Returns:
        ``{"accuracy", "questions", "unanswered", "structural": {type: accuracy}}``.

    Raises:
        ValueError: If no balanced question is found.
    """
    predicted = {str(entry["questionId"]): entry["prediction"] for entry in predictions}
    correct = total = unanswered = 0
    per_type: dict[str, list[int]] = {}
    for question_id, question in questions.items():
        if not question.get("isBalanced", True):
            continue
        prediction = predicted.get(str(question_id))
        unanswered += prediction is None
        hit = int(prediction is not None and prediction == question["answer"])
        correct += hit
        total += 1
        structural = question.get("types", {}).get("structural")
        if structural is not None:
            tally = per_type.setdefault(structural, [0, 0])
            tally[0] += hit
            tally[1] += 1
    if total == 0:
        raise ValueError("the GQA question file has no balanced questions")
    if unanswered:
        logger.warning("GQA: %d of %d questions have no prediction (counted wrong)", unanswered, total)
    return {
        "accuracy": 100.0 * correct / total,
        "questions": total,
        "unanswered": unanswered,
        "structural": {name: 100.0 * c / n for name, (c, n) in sorted(per_type.items())},
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=str, required=True, help="e.g. testdev_balanced_questions.json")
    parser.add_argument("--predictions", type=str, required=True, help="output of convert_gqa_for_eval.py")
    parser.add_argument("--output-json", "--output_json", dest="output_json", default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    check_outputs({"--questions": args.questions, "--predictions": args.predictions}, {"--output-json": args.output_json})
    setup_logging()
    result = score(
        read_json(args.questions, what="GQA question file"), read_json(args.predictions, what="GQA predictions")
    )
    print(f"Accuracy: {result['accuracy']:.2f}% ({result['questions']} questions)")
    for name, accuracy in result["structural"].items():
        print(f"  {name}: {accuracy:.2f}%")
    return write_score(
        args.output_json, "gqa", result["accuracy"], "accuracy (%) on testdev-balanced",
        questions=result["questions"], unanswered=result["unanswered"], structural=result["structural"],
        predictions=os.fspath(args.predictions),
    )


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
