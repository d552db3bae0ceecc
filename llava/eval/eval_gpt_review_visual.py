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
position); everything (categories, contexts, answers) is checked before the first paid call; a rerun resumes with
the questions that have no review, and refuses to mix reviews made by another judge or from other input files
(``OUTPUT.meta.json``) until ``--overwrite``, which keeps the old reviews until every new one is written; a damaged
line of the output is set aside in ``OUTPUT.rejected``, never dropped.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from llava.eval.eval_gpt_review_bench import (
    DEFAULT_JUDGE,
    SYSTEM_MESSAGE,
    TEMPERATURE,
    parse_score,
    review_parser,
    review_prompt,
    write_reviews,
)
from llava.eval.files import read_json, read_jsonl
from llava.eval.judge import JudgeClient, judge_from_env
from llava.eval.provenance import Provenance, file_digest
from llava.outputs import guard_outputs
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



def review_producer(args: argparse.Namespace, client: JudgeClient) -> dict[str, Any]:
    """What the reviews depend on: the judge and the exact inputs."""
    return {
        "endpoint": client.url, "judge_model": client.model, "max_tokens": args.max_tokens, "rule": file_digest(args.rule),
        "question": file_digest(args.question), "context": file_digest(args.context), "reference": file_digest(args.answer_list[0]),
        "answers": file_digest(args.answer_list[1]),
    }


def plan_reviews(args: argparse.Namespace) -> list[tuple[dict[str, Any], list[dict[str, str]]]]:
    """``(review record without the judge's reply, judge messages)`` for every question, all inputs checked first.

    Raises:
        UserError: For a question whose category is not in the rule table, whose image has no context, or that one
            of the answer files does not answer.
    """
    questions = read_jsonl(args.question, what="question file")
    contexts = {}
    for record in read_jsonl(args.context, what="context file"):
        if "image" not in record:
            raise UserError(f"a record of the context file {args.context!r} has no 'image' field")
        contexts[record["image"]] = record
    rules = read_json(args.rule, what="rule table")
    answers = []
    for path in args.answer_list:
        by_id = {}
        for record in read_jsonl(path, what="answers file"):
            if "question_id" not in record or "text" not in record:
                raise UserError(f"a record of {path!r} lacks 'question_id' or 'text'")
            by_id[record["question_id"]] = record
        answers.append((path, by_id))
    plan = []
    for index, question in enumerate(questions):
        qid = question.get("question_id")
        for key in ("image", "text", "category"):
            if key not in question:
                raise UserError(f"question {qid!r} in {args.question!r} has no {key!r} field")
        category = question["category"]
        if category not in rules:
            raise UserError(f"question {qid!r}: category {category!r} is not in the rule table {args.rule!r} (it has {sorted(rules)})")
        if question["image"] not in contexts:
            raise UserError(f"question {qid!r}: image {question['image']!r} has no entry in the context file {args.context!r}")
        pair = []
        for path, by_id in answers:
            if qid not in by_id:
                raise UserError(f"question {qid!r} has no answer in {path!r}")
            pair.append(by_id[qid])
        context = visual_context(contexts[question["image"]], f"context of image {question['image']!r}")
        messages = [{"role": "system", "content": SYSTEM_MESSAGE},
                    {"role": "user", "content": review_prompt(question, context, pair, rules[category])}]
        record = {"id": index + 1, "question_id": qid, "answer1_id": pair[0].get("answer_id", qid),
                  "answer2_id": pair[1].get("answer_id", qid), "category": category}
        plan.append((record, messages))
    return plan


def run_reviews(args: argparse.Namespace, client: JudgeClient) -> list[dict[str, Any]]:
    """Review every question without a review in ``args.output``; returns the new review records."""
    if len(args.answer_list) != 2:
        raise UserError(f"--answer-list takes two answer files (reference, then model), got {len(args.answer_list)}")
    guard_outputs(
        inputs={"--question": args.question, "--context": args.context, "--rule": args.rule,
                "--answer-list reference": args.answer_list[0], "--answer-list model": args.answer_list[1]},
        files={"--output": args.output},
    )
    plan = plan_reviews(args)
    output = Path(os.path.expanduser(args.output))
    provenance = Provenance(output, review_producer(args, client), output_flag="--output", what="review")
    written: list[dict[str, Any]] = []
    done: set[Any] = set()

    def review(already: set[Any], handle: IO[str]) -> None:
        done.update(already)
        todo = [(record, messages) for record, messages in plan if record["question_id"] not in already]
        _review(todo, client, args.max_tokens, handle, written)

    write_reviews(output, provenance, overwrite=args.overwrite, review=review)
    logger.info("%d new reviews, %d already in %s", len(written), len(done), output)
    return written


def _review(todo: Sequence[tuple[dict[str, Any], list[dict[str, str]]]], client: JudgeClient, max_tokens: int, handle: Any,
            written: list[dict[str, Any]]) -> None:
    for record, messages in todo:
        content = client.chat(messages, max_tokens=max_tokens, temperature=TEMPERATURE).text
        review = {**record, "content": content, "tuple": parse_score(content)}
        handle.write(json.dumps(review) + "\n")
        handle.flush()
        written.append(review)


def build_parser() -> argparse.ArgumentParser:
    return review_parser("python -m llava.eval.eval_gpt_review_visual", __doc__.split("\n\n")[0], RULE_FILE)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = build_parser().parse_args(argv)
    setup_logging()
    if args.max_tokens < 1:
        raise UserError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    client = judge_from_env(args.judge_model, DEFAULT_JUDGE, max_retries=args.max_retries, timeout=args.judge_timeout)
    return run_reviews(args, client)


__all__ = ["RULE_FILE", "build_parser", "main", "plan_reviews", "review_producer", "run_reviews", "visual_context"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
