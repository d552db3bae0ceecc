"""Answer a JSONL question file with short answers (VQAv2, GQA, VizWiz, TextVQA, POPE, MME, SEED).

Usage (upstream's flags)::

    python -m llava.eval.model_vqa_loader --model-path liuhaotian/llava-v1.5-13b \
        --question-file ./playground/data/eval/pope/llava_pope_test.jsonl \
        --image-folder ./playground/data/eval/pope/val2014 \
        --answers-file ./playground/data/eval/pope/answers/llava-v1.5-13b.jsonl \
        --temperature 0 --conv-mode vicuna_v1 [--num-chunks 8 --chunk-idx 0] [--batch-size 8]

Same records and answers as :mod:`llava.eval.model_vqa`; only ``--max_new_tokens`` defaults to 128, as
upstream. Upstream's version prefetches with a DataLoader and requires batch size 1; here every loader reads and
preprocesses the next batch's images in a background thread while the model answers (:mod:`llava.eval.core`), and
batching is ``--batch-size``.
"""

from __future__ import annotations

from typing import Any, Sequence

# get_chunk and split_list are re-exported: upstream callers import them from this module.
from llava.eval.core import (
    LoaderSpec,
    RunResult,
    args_with_defaults,
    get_chunk,
    run_loader,
    run_parsed,
    split_list,
)
from llava.eval.model_vqa import FIELDS, build_items
from llava.utils import cli_main

SPEC = LoaderSpec(name="model_vqa_loader", description=__doc__.split("\n\n")[0], build_items=build_items, fields=FIELDS,
                  max_new_tokens=128)


def main(argv: Sequence[str] | None = None) -> RunResult:
    return run_loader(SPEC, argv)


def eval_model(args: Any) -> RunResult:
    """Upstream's entry point: run on an args object (a Namespace, or any object with the flags' attribute
    names); attributes it lacks take the command line's defaults."""
    return run_parsed(SPEC, args_with_defaults(SPEC, args))


__all__ = ["SPEC", "eval_model", "get_chunk", "main", "split_list"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
