"""POPE: yes/no hallucination scores per split (adversarial, popular, random).

Usage (as upstream)::

    python -m llava.eval.eval_pope --annotation-dir ./playground/data/eval/pope/coco \\
        --question-file ./playground/data/eval/pope/llava_pope_test.jsonl \\
        --result-file ./playground/data/eval/pope/answers/llava-v1.5-13b.jsonl \\
        [--output-json results/pope.json]

Each ``coco_pope_<split>.json`` in the annotation folder is a JSONL file whose ``label`` fields
("yes"/"no") follow the order of that split's questions in the question file. An answer is read as upstream
does: keep the text before the first ".", drop commas, split on single spaces; the words "No", "no" or
"not" make it "no", anything else is "yes". The paper's POPE number is F1 averaged over the splits
(``score`` in the JSON, x100).

Answers are told apart by ``question_id`` (as upstream pairs them with their questions): two answers to one
question are refused, naming both lines. Questions of the question file without an answer are reported (count
and first ids) and left out of their split's scores; ``missing`` in the JSON lists them.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from llava.eval.files import QUESTION_ID, check_records, guard_outputs, read_answers, read_jsonl, report_missing, write_score
from llava.eval.protocol import answers_protocol
from llava.utils import UserError, cli_main, setup_logging

logger = logging.getLogger(__name__)

_PREFIX, _SUFFIX = "coco_pope_", ".json"


def parse_yes_no(text: str) -> str:
    """Upstream's reading of a POPE answer: "no" if the first sentence has a negative word, else "yes"."""
    first_sentence = text.split(".")[0]
    words = first_sentence.replace(",", "").split(" ")
    return "no" if any(word in ("No", "not", "no") for word in words) else "yes"


@dataclass
class PopeMetrics:
    """Confusion counts ("yes" is positive) and the derived scores, all in [0, 1]."""

    samples: int
    tp: int
    fp: int
    tn: int
    fn: int
    accuracy: float
    precision: float
    recall: float
    f1: float
    yes_ratio: float


def _ratio(numerator: float, denominator: float) -> float:
    # Upstream divides by zero here (e.g. no "yes" predictions); report 0 instead.
    return numerator / denominator if denominator else 0.0


def score_predictions(predictions: Sequence[str], labels: Sequence[str]) -> PopeMetrics:
    """Compare parsed predictions ("yes"/"no") with labels; a label other than "no" counts as "yes".

    Raises:
        ValueError: If the sequences differ in length or are empty.
    """
    if len(predictions) != len(labels):
        raise ValueError(f"got {len(predictions)} predictions for {len(labels)} labels")
    if not predictions:
        raise ValueError("expected at least one POPE prediction, got none")
    tp = fp = tn = fn = 0
    for prediction, label in zip(predictions, labels):
        predicted_yes, labelled_yes = prediction != "no", label != "no"
        if predicted_yes and labelled_yes:
            tp += 1
        elif predicted_yes:
            fp += 1
        elif labelled_yes:
            fn += 1
        else:
            tn += 1
    precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    return PopeMetrics(
        samples=len(predictions), tp=tp, fp=fp, tn=tn, fn=fn,
        accuracy=(tp + tn) / len(predictions),
        precision=precision,
        recall=recall,
        f1=_ratio(2 * precision * recall, precision + recall),
        yes_ratio=sum(1 for prediction in predictions if prediction != "no") / len(predictions),
    )


def evaluate(annotation_dir: str, question_file: str, result_file: str) -> tuple[dict[str, PopeMetrics], list[Any]]:
    """Score every split found in ``annotation_dir``.

    The k-th question of a split in the question file is labelled by the k-th line of
    ``coco_pope_<split>.json``. Upstream pairs answers and labels by position in the answers file, which
    gives the same result when every question is answered in order; pairing through the question file
    also holds for merged chunks and resumed runs. Unanswered questions are left out (and reported).

    Returns:
        ``({split: metrics} in sorted split order, [ids of unanswered questions of the scored splits])``.

    Raises:
        UserError: If an answer's question id is not in the question file, two answers share a question id, a
            split has no answers, or a file is not in POPE's format.
    """
    if not os.path.isdir(annotation_dir):
        raise UserError(f"--annotation-dir {annotation_dir!r} is not a folder; it holds POPE's coco_pope_<split>.json files")
    questions = check_records(read_jsonl(question_file, what="question file"), {"question_id": QUESTION_ID, "category": str},
                              f"POPE question file {question_file!r}", "upstream's llava_pope_test.jsonl")
    position: dict[Any, tuple[str, int]] = {}
    seen_per_split: dict[str, int] = {}
    for question in questions:
        split = question["category"]
        position[question["question_id"]] = (split, seen_per_split.get(split, 0))
        seen_per_split[split] = seen_per_split.get(split, 0) + 1

    per_split: dict[str, dict[int, str]] = {}
    for answer in read_answers(result_file, by_prompt=False):
        if answer["question_id"] not in position:
            raise UserError(f"answer {answer['question_id']!r} is not a question of {question_file!r}")
        split, index = position[answer["question_id"]]
        per_split.setdefault(split, {})[index] = parse_yes_no(answer["text"])

    results: dict[str, PopeMetrics] = {}
    for name in sorted(os.listdir(annotation_dir)):
        if not (name.startswith(_PREFIX) and name.endswith(_SUFFIX)):
            logger.info("skipping %s (not coco_pope_<split>.json)", name)
            continue
        split = name[len(_PREFIX) : -len(_SUFFIX)]
        label_file = os.path.join(annotation_dir, name)
        labels = [entry["label"] for entry in check_records(read_jsonl(label_file, what="POPE label file"), {"label": str},
                                                            f"POPE label file {label_file!r}", "POPE's coco_pope_<split>.json")]
        answered = per_split.get(split, {})
        if not answered:
            raise UserError(f"no answers for POPE split {split!r} in {result_file!r}")
        indices = sorted(index for index in answered if index < len(labels))
        results[split] = score_predictions([answered[i] for i in indices], [labels[i] for i in indices])
    if not results:
        raise UserError(f"no coco_pope_<split>.json files in {annotation_dir!r}")
    expected = [qid for qid, (split, index) in position.items() if split in results]
    answered_ids = {qid for qid, (split, index) in position.items() if index in per_split.get(split, {})}
    missing = report_missing("POPE", expected, answered_ids, "they are left out of their split's scores")
    return results, missing


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotation-dir", type=str, required=True)
    parser.add_argument("--question-file", type=str, required=True)
    parser.add_argument("--result-file", type=str, required=True)
    parser.add_argument("--output-json", "--output_json", dest="output_json", default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    setup_logging()
    guard_outputs(inputs={"--annotation-dir": args.annotation_dir, "--question-file": args.question_file,
                          "--result-file": args.result_file}, files={"--output-json": args.output_json})
    results, missing = evaluate(args.annotation_dir, args.question_file, args.result_file)
    for split, metrics in results.items():
        print(f"Category: {split}, # samples: {metrics.samples}")
        print("TP\tFP\tTN\tFN")
        print(f"{metrics.tp}\t{metrics.fp}\t{metrics.tn}\t{metrics.fn}")
        print(f"Accuracy: {metrics.accuracy}")
        print(f"Precision: {metrics.precision}")
        print(f"Recall: {metrics.recall}")
        print(f"F1 score: {metrics.f1}")
        print(f"Yes ratio: {metrics.yes_ratio}")
        print("=" * 36)
    mean_f1 = 100.0 * sum(metrics.f1 for metrics in results.values()) / len(results)
    print(f"Mean F1 over {len(results)} splits: {mean_f1:.2f}")
    return write_score(
        args.output_json, "pope", mean_f1, "F1 x100, mean over splits",
        splits={split: asdict(metrics) for split, metrics in results.items()}, missing=missing,
        result_file=os.fspath(args.result_file), protocol=answers_protocol(args.result_file),
    )


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
