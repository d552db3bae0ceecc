"""Answer a JSONL question file, one image per question (LLaVA-Bench, MM-Vet).

Usage (upstream's flags)::

    python -m llava.eval.model_vqa --model-path liuhaotian/llava-v1.5-13b \
        --question-file ./playground/data/eval/mm-vet/llava-mm-vet.jsonl \
        --image-folder ./playground/data/eval/mm-vet/images \
        --answers-file ./playground/data/eval/mm-vet/answers/llava-v1.5-13b.jsonl \
        --temperature 0 --conv-mode vicuna_v1 [--batch-size 8] [--skip-missing] [--device cpu]

Question line: ``{"question_id", "image" (relative to --image-folder), "text", ...}``. The answer's
``prompt`` is the question text as given. Generation, chunking, resuming and the answers file are
:mod:`llava.eval.core`'s.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Sequence

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

#: The fields of a question line (upstream's JSONL), checked before the model loads.
FIELDS = {"question_id": QUESTION_ID, "image": str, "text": str}


def build_items(record: dict[str, Any], args: argparse.Namespace) -> list[EvalItem]:
    """One item: the question text with its one image (the record's :data:`FIELDS` are already checked)."""
    image = ImageRef(path=os.path.join(args.image_folder, record["image"]))
    return [EvalItem(record["question_id"], record["text"], record["text"], (image,))]


SPEC = LoaderSpec(name="model_vqa", description=__doc__.split("\n\n")[0], build_items=build_items, fields=FIELDS,
                  max_new_tokens=1024)


def main(argv: Sequence[str] | None = None) -> RunResult:
    return run_loader(SPEC, argv)


def eval_model(args: Any) -> RunResult:
    """Upstream's entry point: run on an args object (a Namespace, or any object with the flags' attribute
    names); attributes it lacks take the command line's defaults."""
    return run_parsed(SPEC, args_with_defaults(SPEC, args))


__all__ = ["SPEC", "eval_model", "get_chunk", "main", "split_list"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
