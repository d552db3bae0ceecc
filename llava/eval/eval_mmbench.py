"""Local MMBench accuracy on a split that ships its answers (the dev sets), EN or CN.

Usage::

    python -m llava.eval.eval_mmbench --annotation-file mmbench/mmbench_dev_20230712.tsv \\
        --result-file mmbench/answers/mmbench_dev_20230712/M.jsonl [--output-json results/mmbench.json]

The official MMBench score comes from the OpenCompass server (upload the spreadsheet written by
``scripts/convert_mmbench_for_submission.py``); this is a local stand-in for dev sets. A prediction names
an option by its letter (``"B"``, ``"B."``, ``"(B)"``, ``"B. text"``; a bare ``"A"`` followed by a
space is read as the article, not a letter) or by repeating an option's text;
the letter refers to the options as shown in that round (answers record them in ``options``). A
question is correct when every round answered for it is correct (MMBench's circular evaluation when the
loader ran with ``--all-rounds``; plain accuracy otherwise). Answers are told apart by ``question_id`` and
``round_id``: two answers to one round are refused, naming both lines. Rows of the table without an answer are
reported (count and first indices; ``missing`` in the JSON) and count as wrong, as on the server.
"""

from __future__ import annotations

import argparse
import os
import re
import string
from typing import Any, Sequence

from llava.eval.files import guard_outputs, is_missing, read_answers, read_tsv, report_missing, write_score
from llava.eval.protocol import answers_protocol
from llava.utils import UserError, cli_main, setup_logging

LETTERS = tuple(string.ascii_uppercase)
_LEADING_LETTER = re.compile(r"^\(?([A-Z])(?:$|[\.\):：])")


def extract_choice(text: str, options: Sequence[str]) -> int | None:
    """Index into ``options`` that a prediction names, or None if it names none of them."""
    text = text.strip()
    match = _LEADING_LETTER.match(text)
    if match and LETTERS.index(match.group(1)) < len(options):
        return LETTERS.index(match.group(1))
    lowered = text.lower().rstrip(".")
    for index, option in enumerate(options):
        if lowered == str(option).strip().lower().rstrip("."):
            return index
    return None


def load_table(annotation_file: str) -> dict[Any, dict[str, Any]]:
    """The MMBench table's rows by ``index``, checked to be an MMBench table with answers.

    Raises:
        UserError: If the table lacks the ``index`` or ``answer`` column (a test split is scored on the server).
    """
    rows = read_tsv(annotation_file, what="MMBench table")
    columns = set(rows[0]) if rows else set()
    if "index" not in columns or "question" not in columns:
        raise UserError(f"MMBench table {annotation_file!r} needs the columns 'index', 'question', 'A', 'B', ... "
                        f"(MMBench's TSV), got {sorted(columns)}")
    if "answer" not in columns:
        raise UserError(f"MMBench table {annotation_file!r} has no 'answer' column; score it on the server")
    return {_native(row["index"]): row for row in rows}


def _native(value: Any) -> Any:
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def evaluate(annotation_file: str, result_file: str) -> dict[str, Any]:
    """Circular accuracy (percent) of an answers file against an MMBench table with an ``answer`` column.

    Raises:
        UserError: If an answer's index is not in the table, two answers are to one round, or a row has no answer.
    """
    rows = load_table(annotation_file)
    per_question: dict[Any, list[bool]] = {}
    for answer in read_answers(result_file, by_prompt=False, fields={"text": str, "options": list}):
        row = rows.get(answer["question_id"])
        if row is None:
            raise UserError(f"answer {answer['question_id']!r} is not a row of {annotation_file!r}")
        if is_missing(row["answer"]) or str(row["answer"]) not in row:
            raise UserError(f"MMBench row {answer['question_id']!r} has no answer letter naming one of its options")
        truth = row[row["answer"]]
        choice = extract_choice(answer["text"], answer["options"])
        per_question.setdefault(answer["question_id"], []).append(
            choice is not None and answer["options"][choice] == truth
        )
    if not per_question:
        raise UserError(f"answers file {result_file!r} has no answers")
    missing = report_missing("MMBench", list(rows), per_question, "they count as wrong")
    correct = sum(all(rounds) for rounds in per_question.values())
    return {
        "accuracy": 100.0 * correct / len(rows),
        "questions": len(rows),
        "rounds": sum(len(rounds) for rounds in per_question.values()),
        "missing": missing,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotation-file", type=str, required=True)
    parser.add_argument("--result-file", type=str, required=True)
    parser.add_argument("--lang", type=str, default="en", choices=["en", "cn"], help="names the score: mmbench / mmbench_cn")
    parser.add_argument("--output-json", "--output_json", dest="output_json", default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    setup_logging()
    guard_outputs(inputs={"--annotation-file": args.annotation_file, "--result-file": args.result_file},
                  files={"--output-json": args.output_json})
    result = evaluate(args.annotation_file, args.result_file)
    print(f"Questions: {result['questions']} ({result['rounds']} rounds), Accuracy: {result['accuracy']:.2f}%")
    return write_score(
        args.output_json, "mmbench" if args.lang == "en" else "mmbench_cn", result["accuracy"],
        "local circular accuracy (%) on a dev split", questions=result["questions"], rounds=result["rounds"],
        missing=result["missing"],
        result_file=os.fspath(args.result_file), protocol=answers_protocol(args.result_file),
    )


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
