"""Answer ScienceQA in LLaVA's training format (a JSON list), with or without an image.

Usage (upstream's flags)::

    python -m llava.eval.model_vqa_science --model-path liuhaotian/llava-v1.5-13b \
        --question-file ./playground/data/eval/scienceqa/llava_test_CQM-A.json \
        --image-folder ./playground/data/eval/scienceqa/images/test \
        --answers-file ./playground/data/eval/scienceqa/answers/llava-v1.5-13b.jsonl \
        --single-pred-prompt --temperature 0 --conv-mode vicuna_v1

Entry: ``{"id", "image"? , "conversations": [{"from": "human", "value": "<image>\\nQuestion ..."}, ...]}``.
The question is the first turn without ``<image>``; ``--single-pred-prompt`` appends the letter
instruction. The answer's ``prompt`` is that question, prefixed with ``"<image>\\n"`` for image items (the
ScienceQA scorer uses it to find image questions). Entries without an image are answered text-only.
"""

from __future__ import annotations

import argparse
import os
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
from llava.eval.files import QUESTION_ID
from llava.utils import cli_main

SINGLE_PRED_PROMPT = LETTER_ANSWER_PROMPTS["en"]
#: The fields of an entry (LLaVA's training format), checked before the model loads; ``image`` is optional.
FIELDS = {"id": QUESTION_ID, "conversations": list}


def build_items(record: dict[str, Any], args: argparse.Namespace) -> list[EvalItem]:
    """One item per entry: its first human turn, the image if the entry has one."""
    turns = record["conversations"]
    if not turns or not isinstance(turns[0], dict) or not isinstance(turns[0].get("value"), str):
        raise ValueError("'conversations' must start with a turn whose 'value' is the question text")
    if "image" in record and not isinstance(record["image"], str):
        raise ValueError(f"'image' must be a string (a path under --image-folder), got {record['image']!r}")
    question = turns[0]["value"].replace("<image>", "").strip()
    prompt = question
    images: tuple[ImageRef, ...] = ()
    if "image" in record:
        images = (ImageRef(path=os.path.join(args.image_folder, record["image"])),)
        prompt = "<image>\n" + prompt
    if args.single_pred_prompt:
        question = question + "\n" + SINGLE_PRED_PROMPT
        prompt = prompt + "\n" + SINGLE_PRED_PROMPT
    return [EvalItem(record["id"], question, prompt, images)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--single-pred-prompt", action="store_true")
    parser.add_argument("--answer-prompter", action="store_true", help="accepted for compatibility; no effect (as upstream)")


SPEC = LoaderSpec(
    name="model_vqa_science", description=__doc__.split("\n\n")[0], build_items=build_items, fields=FIELDS,
    max_new_tokens=1024, question_file_default="tables/question.json", add_arguments=add_arguments,
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
