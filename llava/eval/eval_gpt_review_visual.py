"""GPT-assisted visual review (upstream's ``eval_gpt_review_visual.py``): a judge compares two answers to questions
about COCO images, knowing the images only from their captions and object boxes.

Usage (upstream's flags)::

    export OPENAI_API_KEY=...                              # the judge's key (sent as a Bearer token)
    python -m llava.eval.eval_gpt_review_visual \\
        -q llava/eval/table/question.jsonl \\                # {"question_id", "image", "text", "category"}
        -c llava/eval/table/caps_boxes_coco2014_val_80.jsonl \\  # {"image", "captions": [...], "instances": [{"category", "bbox"}]}
        -a answers_gpt4.jsonl answers/M.jsonl \\             # reference answers, then the model's ({"question_id", "text"})
        -r llava/eval/table/rule_visual.json \\              # optional; {category: {"role", "prompt"}}
        -o reviews/M.jsonl

The judge (``OPENAI_BASE_URL``, ``LLAVA_JUDGE_MODEL`` or ``--judge-model``, default ``gpt-4-0314`` as upstream; see
:mod:`llava.eval.judge`) gets, at temperature 0.2 and with upstream's system message, the image's captions (one per
line), a blank line, its boxes (``category: [x1, y1, x2, y2]``, one per line), the question, both answers and the
category's instruction from the rule table (the categories of the COCO set are ``conv``, ``detail`` and ``complex``;
the default table holds instructions for them, in this project's words). The first line of the reply holds the two
scores; a reply without them is recorded as ``[-1, -1]`` with a warning.

Output lines (upstream's): ``{"id", "question_id", "answer1_id", "answer2_id", "category", "content", "tuple"}``, one
per question, appended and flushed as they come back; summarise them with ``python -m llava.eval.summarize_gpt_review``.
Differences from upstream, deliberate: answers are matched to questions by ``question_id`` (upstream paired lines by
position); everything (record fields, categories, contexts, answers) is checked before the first paid call; a rerun
resumes with the questions that have no review, and refuses to mix reviews made by another judge or from other
input files (``OUTPUT.meta.json``) until ``--overwrite``, which keeps the old reviews until the first new one
replaces them (then every review is kept as it is paid for, as :mod:`llava.eval.eval_gpt_review_bench` does); a
damaged line of the output is set aside in ``OUTPUT.rejected``, never dropped.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llava.eval.eval_gpt_review_bench import DEFAULT_JUDGE, Planned, plan_reviews, review_parser, run_reviews
from llava.eval.judge import judge_from_env
from llava.utils import UserError, cli_main, setup_logging

logger = logging.getLogger(__name__)

RULE_FILE = Path(__file__).with_name("table") / "rule_visual.json"


def visual_context(context: Mapping[str, Any], where: str) -> dict[str, list[str]]:
    """The context lines the judge sees: the captions, a blank line, then ``category: bbox`` per instance.

    Raises:
        UserError: If the record has no list of caption strings or a malformed instance.
    """
    captions = context.get("captions")
    if not isinstance(captions, list) or not all(isinstance(caption, str) for caption in captions):
        raise UserError(f"{where} has no 'captions' list of strings")
    boxes = []
    for instance in context.get("instances", []):
        if not isinstance(instance, dict) or "category" not in instance or "bbox" not in instance:
            raise UserError(f"{where}: every entry of 'instances' needs 'category' and 'bbox', got {instance!r}")
        boxes.append(f"{instance['category']}: {instance['bbox']}")
    return {"caption": [*captions, "", *boxes]}



def plan_visual(args: argparse.Namespace) -> list[Planned]:
    """The visual review's plan: captions and boxes as the context, the question's category as the rule key."""
    return plan_reviews(args, context_of=visual_context)


def build_parser() -> argparse.ArgumentParser:
    return review_parser("python -m llava.eval.eval_gpt_review_visual", __doc__.split("\n\n")[0], RULE_FILE)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = build_parser().parse_args(argv)
    setup_logging()
    if args.max_tokens < 1:
        raise UserError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    client = judge_from_env(args.judge_model, DEFAULT_JUDGE, max_retries=args.max_retries, timeout=args.judge_timeout)
    return run_reviews(args, client, plan_visual)


__all__ = ["RULE_FILE", "build_parser", "main", "plan_visual", "visual_context"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
