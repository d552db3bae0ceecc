"""Answer MMBench (EN or CN) from its TSV, images embedded as base64.

Usage (upstream's flags)::

    python -m llava.eval.model_vqa_mmbench --model-path liuhaotian/llava-v1.5-13b \
        --question-file ./playground/data/eval/mmbench/mmbench_dev_20230712.tsv \
        --answers-file ./playground/data/eval/mmbench/answers/mmbench_dev_20230712/llava-v1.5-13b.jsonl \
        --single-pred-prompt --temperature 0 --conv-mode vicuna_v1 [--lang cn] [--all-rounds]

Row columns: ``index, question, hint, A, B, C, D, answer, category, image, ...``. The options are the
letter columns up to the first empty one. The user turn is ``[hint\\n]question`` followed by
``\\nA. option`` lines (and the letter instruction with ``--single-pred-prompt``); the answer's ``prompt``
omits the instruction. With ``--all-rounds`` a question is asked once per option, the options rotated by
one each round (still labelled A, B, ...). Answers add ``round_id``, ``options`` and ``option_char``.
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence

from llava.constants import LETTER_ANSWER_PROMPTS

# get_chunk and split_list are re-exported: upstream callers import them from this module.
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
from llava.eval.files import QUESTION_ID, is_missing
from llava.utils import cli_main

ALL_OPTIONS = ["A", "B", "C", "D"]
INSTRUCTIONS = LETTER_ANSWER_PROMPTS


#: The columns every row needs, checked before the model loads (a numeric question cell is used as its text).
FIELDS = {"index": QUESTION_ID, "question": (str, int, float), "image": str}


def _native(value: Any) -> Any:
    # pandas can hand out numpy scalars, which json cannot write.
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def native_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows with Python values instead of numpy scalars (before the fields are checked)."""
    return [{key: _native(value) for key, value in record.items()} for record in records]


def build_items(record: dict[str, Any], args: argparse.Namespace) -> list[EvalItem]:
    """One item per round (one round unless ``--all-rounds``)."""
    if is_missing(record["question"]):
        raise ValueError("its 'question' cell is empty")
    question_id = record["index"]
    options: list[Any] = []
    for letter in ALL_OPTIONS:
        value = record.get(letter)
        if is_missing(value):
            break
        options.append(value)
    letters = ALL_OPTIONS[: len(options)]
    image = ImageRef(base64=record["image"])
    items = []
    for round_id in range(len(options) if args.all_rounds else 1):
        question = str(record["question"])
        if not is_missing(record.get("hint")):
            question = f"{record['hint']}\n{question}"
        for letter, option in zip(ALL_OPTIONS, options):
            question += f"\n{letter}. {option}"
        user_turn = question
        if args.single_pred_prompt:
            user_turn += "\n" + INSTRUCTIONS["cn" if args.lang == "cn" else "en"]
        extra = {"round_id": round_id, "options": list(options), "option_char": list(letters)}
        items.append(EvalItem(question_id, user_turn, question, (image,), extra))
        options, letters = options[1:] + options[:1], letters[1:] + letters[:1]
    return items


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all-rounds", action="store_true")
    parser.add_argument("--single-pred-prompt", action="store_true")
    # Upstream took any value and prompted in English unless "cn": a typo ("zh") silently gave English prompts.
    parser.add_argument("--lang", choices=sorted(INSTRUCTIONS), default="en", help="language of the letter instruction")


SPEC = LoaderSpec(
    name="model_vqa_mmbench", description=__doc__.split("\n\n")[0], build_items=build_items, fields=FIELDS,
    max_new_tokens=1024, add_arguments=add_arguments, prepare_records=native_rows,
)


def main(argv: Sequence[str] | None = None) -> RunResult:
    return run_loader(SPEC, argv)


def eval_model(args: Any) -> RunResult:
    """Upstream's entry point: run on an args object (a Namespace, or any object with the flags' attribute
    names); attributes it lacks take the command line's defaults."""
    return run_parsed(SPEC, args_with_defaults(SPEC, args))


__all__ = ["SPEC", "eval_model", "get_chunk", "main", "split_list"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
