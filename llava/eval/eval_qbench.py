"""Q-Bench LLVisionQA (dev split): accuracy overall, per question type and per concern.

Usage::

    python -m llava.eval.eval_qbench --answers-file ./playground/data/eval/qbench/llvisionqa_dev_answers.jsonl \
        [--output-json ./playground/data/eval/results/$CKPT/qbench.json]

Reads the answers of ``llava.eval.model_vqa_qbench`` (each line holds the question's ``candidates``,
``correct_ans``, ``type``, ``concern`` and the reply in ``response``, or ``text``). A reply picks an option when
it starts with the option's letter (``B``, ``B.``, ``B)``, ``B:``, ``(B)``, ``B. text``; not ``A blurry ...``) or, failing that, names exactly
one candidate's text (case-insensitive; a candidate contained in a longer named one, such as "Yes" in
"Yes, slightly", does not count on its own). A reply that picks no option, or two, is wrong. Groups follow
Q-Bench's codes: type 0 yes/no, 1 how, 2 what; concern 0 global distortion, 1 global other, 2 in-context
(local) distortion, 3 in-context other. The test split has no ``correct_ans``: the Q-Bench authors grade it.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from llava.eval.files import check_outputs, read_jsonl, write_score
from llava.utils import UserError, cli_main, setup_logging

QUESTION_TYPES = {0: "yes/no", 1: "how", 2: "what"}
CONCERNS = {0: "global distortion", 1: "global other", 2: "in-context distortion", 3: "in-context other"}
# "(B)", or "B" alone or followed by ".", ")" or ":" ("A blurry photo" is prose, not option A).
_LETTER = re.compile(r"^(?:\(([A-Z])\)|([A-Z])(?:[.):]|$))")


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


def score_answers(answers: Sequence[Mapping[str, Any]], where: str) -> dict[str, Any]:
    """Accuracy (%) overall, per type and per concern, and how many replies picked no single option."""
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

    return {"accuracy": percent(overall), "questions": len(overall), "no_single_option": unparsed,
            "by_type": {name: percent(hits) for name, hits in sorted(groups["type"].items())},
            "by_concern": {name: percent(hits) for name, hits in sorted(groups["concern"].items())}}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.eval.eval_qbench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers-file", required=True, help="written by llava.eval.model_vqa_qbench (dev split)")
    parser.add_argument("--output-json", default=None, help="also write the scores here (e.g. results/$CKPT/qbench.json)")
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    setup_logging()
    check_outputs({"--answers-file": args.answers_file}, {"--output-json": args.output_json})
    answers = read_jsonl(args.answers_file, what="answers file")
    if not answers:
        raise UserError(f"answers file {args.answers_file!r} holds no answers")
    scores = score_answers(answers, repr(args.answers_file))
    print(f"Q-Bench LLVisionQA dev: {scores['accuracy']:.2f}% of {scores['questions']} "
          f"({scores['no_single_option']} replies picked no single option)")
    for kind in ("by_type", "by_concern"):
        for name, value in scores[kind].items():
            print(f"  {name:<22} {value:6.2f}%")
    write_score(args.output_json, "qbench", scores["accuracy"], "Q-Bench LLVisionQA dev accuracy (%)",
                **{key: value for key, value in scores.items() if key != "accuracy"})
    return scores


__all__ = ["CONCERNS", "QUESTION_TYPES", "build_parser", "chosen_option", "main", "score_answers"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
