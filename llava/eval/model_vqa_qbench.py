"""Answer Q-Bench's LLVisionQA (low-level perception, multiple choice), in English or Chinese.

Usage (the flags of upstream's ``scripts/v1_5/eval/qbench.sh``, whose module upstream no longer ships)::

    python -m llava.eval.model_vqa_qbench --model-path liuhaotian/llava-v1.5-13b \
        --image-folder ./playground/data/eval/qbench/images_llvisionqa/ \
        --questions-file ./playground/data/eval/qbench/llvisionqa_dev.json \
        --answers-file ./playground/data/eval/qbench/llvisionqa_dev_answers.jsonl \
        --conv-mode llava_v1 --lang en

Questions: Q-Bench's JSON list, ``{"img_path", "question", "candidates": [...], "correct_ans"?, "type"?,
"concern"?}`` (the dev split has the last three). The user turn is the question, a line asking to choose
(``--lang en`` or ``zh``), then one line per option, ``"A. <candidate>"``. Answers are JSONL, one line per
question, in the order of the file: the question's own fields, then the reply as ``text`` and, as upstream wrote
it, ``response``, with the loaders' usual ``question_id`` (the record's ``id`` if it has one, else its position
in the file), ``prompt``, ``answer_id``, ``model_id``. Upstream wrote the records back to back on one line
and, for ``zh``, put a stray backslash where the line break before the instruction belongs; we do neither.
Upstream's module always decoded greedily, so ``--temperature`` defaults to 0 here (the other loaders keep
upstream's 0.2).
Score the dev split with ``python -m llava.eval.eval_qbench``.
"""

from __future__ import annotations

import argparse
import os
import string
from typing import Any, Sequence

from llava.eval.core import (
    EvalItem,
    ImageRef,
    LoaderSpec,
    RunResult,
    args_with_defaults,
    get_chunk,
    run_loader,
    run_parsed,
    split_list,
)
from llava.eval.eval_qbench import number_records
from llava.eval.files import QUESTION_ID
from llava.utils import cli_main

INSTRUCTIONS = {"en": "Choose between one of the options as follows:", "zh": "在下列选项中选择一个:"}
LETTERS = string.ascii_uppercase
#: The fields of a question (after :func:`number_records` gave it a ``question_id``), checked before the model loads.
FIELDS = {"question_id": QUESTION_ID, "img_path": str, "question": str, "candidates": list}
# Answer fields the loader core writes itself; a question field of the same name is not copied over them.
_CORE_FIELDS = frozenset({"question_id", "prompt", "text", "answer_id", "model_id", "metadata"})


def option_lines(candidates: Sequence[Any]) -> str:
    """``"A. first\\nB. second\\n..."``, one line per candidate, each ending in a newline."""
    return "".join(f"{letter}. {candidate}\n" for letter, candidate in zip(LETTERS, candidates))


def question_text(record: dict[str, Any], lang: str) -> str:
    """The user turn: the question, the instruction of ``lang``, then the options."""
    return f"{record['question']}\n{INSTRUCTIONS[lang]}\n{option_lines(record['candidates'])}"


def build_items(record: dict[str, Any], args: argparse.Namespace) -> list[EvalItem]:
    """One multiple-choice item per question, with its image."""
    qid = record["question_id"]
    candidates = record["candidates"]
    if not 2 <= len(candidates) <= len(LETTERS):
        raise ValueError(f"'candidates' must be a list of 2 to {len(LETTERS)} options, got {candidates!r}")
    text = question_text(record, args.lang)
    extra = {key: value for key, value in record.items() if key not in _CORE_FIELDS}
    image = ImageRef(path=os.path.join(args.image_folder, record["img_path"]))
    return [EvalItem(qid, text, text, (image,), extra=extra, text_aliases=("response",))]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--questions-file", dest="question_file", default=argparse.SUPPRESS,
                        help="upstream's spelling of --question-file")
    parser.add_argument("--lang", choices=sorted(INSTRUCTIONS), default="en", help="language of the instruction")


SPEC = LoaderSpec(
    name="model_vqa_qbench", description=__doc__.split("\n\n")[0], build_items=build_items, fields=FIELDS,
    max_new_tokens=1024, temperature=0.0, question_file_default="./playground/data/eval/qbench/llvisionqa_dev.json",
    add_arguments=add_arguments, prepare_records=number_records,
)


def main(argv: Sequence[str] | None = None) -> RunResult:
    return run_loader(SPEC, argv)


def eval_model(args: Any) -> RunResult:
    """Upstream's entry point: run on an args object (a Namespace, or any object with the flags' attribute
    names, e.g. upstream's ``questions_file``); attributes it lacks take the command line's defaults."""
    completed = args_with_defaults(SPEC, args)
    upstream_file = getattr(args, "questions_file", None)
    if getattr(args, "question_file", None) is None and upstream_file is not None:
        completed.question_file = upstream_file
    return run_parsed(SPEC, completed)


__all__ = ["SPEC", "eval_model", "get_chunk", "main", "number_records", "option_lines", "question_text", "split_list"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
