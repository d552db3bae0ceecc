"""Q-Bench LLVisionQA (dev split): accuracy overall, per question type and per concern.

Usage::

    python -m llava.eval.eval_qbench --answers-file ./playground/data/eval/qbench/llvisionqa_dev_answers.jsonl \
        [--questions-file ./playground/data/eval/qbench/llvisionqa_dev.json] \
        [--output-json ./playground/data/eval/results/$CKPT/qbench.json]

Reads the answers of ``llava.eval.model_vqa_qbench`` (each line holds the question's ``candidates``,
``correct_ans``, ``type``, ``concern`` and the reply in ``response``, or ``text``). A reply picks an option when
it starts with the option's letter (``B``, ``B.``, ``B)``, ``B:``, ``(B)``, ``B. text``; not ``A blurry ...``) or, failing that, names exactly
one candidate's text (case-insensitive; a candidate contained in a longer named one, such as "Yes" in
"Yes, slightly", does not count on its own). A reply that picks no option, or two, is wrong. Groups follow
Q-Bench's codes: type 0 yes/no, 1 how, 2 what; concern 0 global distortion, 1 global other, 2 in-context
(local) distortion, 3 in-context other. The test split has no ``correct_ans``: the Q-Bench authors grade it.

Answers are told apart by ``question_id`` (the record's ``id``, else its position in the question file; see
:func:`number_records`): two answers to one question are refused, naming both lines. ``--questions-file`` (ours:
upstream ships no Q-Bench scorer) gives the question list: questions without an answer are then reported and
count as wrong, so a run stopped early cannot look better than it is.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from llava.eval.files import check_records, guard_outputs, read_answers, read_json, report_missing, write_score
from llava.eval.protocol import answers_protocol
from llava.utils import UserError, cli_main, setup_logging

QUESTION_TYPES = {0: "yes/no", 1: "how", 2: "what"}
CONCERNS = {0: "global distortion", 1: "global other", 2: "in-context distortion", 3: "in-context other"}
# "(B)", or "B" alone or followed by ".", ")" or ":" ("A blurry photo" is prose, not option A).
_LETTER = re.compile(r"^(?:\(([A-Z])\)|([A-Z])(?:[.):]|$))")


def number_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give each Q-Bench question a ``question_id``: its ``id`` if it has one, else its position in the file."""
    return [{**record, "question_id": record.get("id", position)} for position, record in enumerate(records)]


def chosen_option(reply: str, candidates: Sequence[str]) -> int | None:
    """The index of the option ``reply`` picks, or None (see the module docstring)."""
    text = reply.strip()
    match = _LETTER.match(text)
    if match is not None:
        index = ord(match.group(1) or match.group(2)) - ord("A")
        if index < len(candidates):
            return index
    lowered = text.lower()
    options = [str(candidate).lower() for candidate in candidates]
    named = [index for index, option in enumerate(options) if option.strip() and option in lowered]
    # A candidate inside a longer named candidate ("Yes" in "Yes, slightly") was named only as part of it.
    named = [index for index in named
             if not any(options[index] in options[other] and len(options[other]) > len(options[index]) for other in named)]
    return named[0] if len(named) == 1 else None


def _group_name(names: Mapping[int, str], code: Any, kind: str) -> str:
    return names.get(code, f"{kind} {code}") if isinstance(code, int) else f"{kind} {code}"


def score_answers(answers: Sequence[Mapping[str, Any]], where: str, missing: int = 0) -> dict[str, Any]:
    """Accuracy (%) overall, per type and per concern, and how many replies picked no single option.

    Args:
        answers: The answer lines.
        where: The answers file, for messages.
        missing: Questions without an answer; they count as wrong overall.
    """
    groups: dict[str, dict[str, list[bool]]] = {"type": defaultdict(list), "concern": defaultdict(list)}
    overall: list[bool] = []
    unparsed = 0
    for line, answer in enumerate(answers, start=1):
        if "correct_ans" not in answer:
            raise UserError(f"{where} line {line} has no 'correct_ans': only the dev split can be scored here; "
                            f"the Q-Bench authors grade the test split")
        reply = answer.get("response", answer.get("text"))
        if not isinstance(reply, str) or not isinstance(answer.get("candidates"), list):
            raise UserError(f"{where} line {line} needs 'candidates' and a reply ('response' or 'text'); "
                            f"was it written by llava.eval.model_vqa_qbench?")
        candidates = [str(candidate) for candidate in answer["candidates"]]
        if str(answer["correct_ans"]) not in candidates:
            raise UserError(f"{where} line {line}: 'correct_ans' {answer['correct_ans']!r} is not one of the candidates {candidates!r}")
        picked = chosen_option(reply, candidates)
        unparsed += picked is None
        right = picked == candidates.index(str(answer["correct_ans"]))
        overall.append(right)
        if "type" in answer:
            groups["type"][_group_name(QUESTION_TYPES, answer["type"], "type")].append(right)
        if "concern" in answer:
            groups["concern"][_group_name(CONCERNS, answer["concern"], "concern")].append(right)

    def percent(hits: list[bool]) -> float:
        return round(100 * sum(hits) / len(hits), 2)

    overall += [False] * missing
    return {"accuracy": percent(overall), "questions": len(overall), "missing": missing, "no_single_option": unparsed,
            "by_type": {name: percent(hits) for name, hits in sorted(groups["type"].items())},
            "by_concern": {name: percent(hits) for name, hits in sorted(groups["concern"].items())}}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.eval.eval_qbench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers-file", required=True, help="written by llava.eval.model_vqa_qbench (dev split)")
    parser.add_argument("--questions-file", "--question-file", dest="questions_file", default=None,
                        help="the questions answered (e.g. llvisionqa_dev.json): unanswered ones are reported and count as wrong")
    parser.add_argument("--output-json", default=None, help="also write the scores here (e.g. results/$CKPT/qbench.json)")
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    setup_logging()
    guard_outputs(inputs={"--answers-file": args.answers_file, "--questions-file": args.questions_file},
                  files={"--output-json": args.output_json})
    answers = read_answers(args.answers_file, by_prompt=False, fields={})
    if not answers:
        raise UserError(f"answers file {args.answers_file!r} holds no answers")
    missing: list[Any] = []
    if args.questions_file is not None:
        questions = check_records(read_json(args.questions_file, what="Q-Bench question file"), {"question": str, "candidates": list},
                                  f"Q-Bench question file {args.questions_file!r}", "LLVisionQA's llvisionqa_dev.json")
        ids = [record["question_id"] for record in number_records(questions)]
        unknown = sorted({answer["question_id"] for answer in answers} - set(ids), key=str)
        if unknown:
            raise UserError(f"answers file {args.answers_file!r} answers question {unknown[0]!r}, which is not in "
                            f"{args.questions_file!r}; was it written for another question file?")
        missing = report_missing("Q-Bench", ids, {answer["question_id"] for answer in answers}, "they count as wrong")
    scores = score_answers(answers, repr(args.answers_file), len(missing))
    print(f"Q-Bench LLVisionQA dev: {scores['accuracy']:.2f}% of {scores['questions']} "
          f"({scores['no_single_option']} replies picked no single option, {scores['missing']} questions unanswered)")
    for kind in ("by_type", "by_concern"):
        for name, value in scores[kind].items():
            print(f"  {name:<22} {value:6.2f}%")
    write_score(args.output_json, "qbench", scores["accuracy"], "Q-Bench LLVisionQA dev accuracy (%)",
                protocol=answers_protocol(args.answers_file), **{key: value for key, value in scores.items() if key != "accuracy"})
    return scores


__all__ = ["CONCERNS", "QUESTION_TYPES", "build_parser", "chosen_option", "main", "number_records", "score_answers"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
