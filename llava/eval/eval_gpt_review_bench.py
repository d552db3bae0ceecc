"""LLaVA-Bench (in the wild / COCO): a GPT judge scores the model's answers next to reference answers.

Usage (upstream's flags)::

    export OPENAI_API_KEY=...                              # the judge's key (sent as a Bearer token)
    export OPENAI_BASE_URL=https://api.openai.com/v1       # optional: any OpenAI-compatible endpoint
    python -m llava.eval.eval_gpt_review_bench \
        --question playground/data/eval/llava-bench-in-the-wild/questions.jsonl \
        --context playground/data/eval/llava-bench-in-the-wild/context.jsonl \
        --rule llava/eval/table/rule.json \
        --answer-list playground/data/eval/llava-bench-in-the-wild/answers_gpt4.jsonl \
                      playground/data/eval/llava-bench-in-the-wild/answers/M.jsonl \
        --output playground/data/eval/llava-bench-in-the-wild/reviews/M.jsonl

Environment: ``OPENAI_API_KEY`` (required unless the endpoint needs no key), ``OPENAI_BASE_URL`` (default
``https://api.openai.com/v1``; ``/chat/completions`` is appended), ``LLAVA_JUDGE_MODEL`` (default
``gpt-4-0314``, upstream's judge; ``--judge-model`` overrides it); see :mod:`llava.eval.judge`.

Per question (matched by ``question_id`` in both answer files; the first is the reference, usually GPT-4's
answers) the judge gets the image's context (its ``caption`` lines), the question, both answers and the
category's instruction from the rule table (``llava_bench_<category>`` -> ``{"role", "prompt"}``), at
temperature 0.2. The first line of its reply holds the two scores; a reply without them is recorded as
``[-1, -1]``, as upstream (``summarize_gpt_review`` leaves such reviews out and counts them). Output lines:
``{"id", "question_id", "answer1_id", "answer2_id", "category", "content", "tuple"}``, one per question, appended
and flushed as they come, so a rerun resumes with the questions that have no review yet; a damaged line moves
to ``OUTPUT.rejected`` (named in the log) and its question is asked again, every intact review stays.
``OUTPUT.meta.json`` records the judge (endpoint, model, token limit) and a hash of the
rule table and of both answer files: resuming after any of them changed is refused until ``--overwrite``, which
keeps the old reviews until every new one is written.
Rate limits (HTTP 429), server errors, dropped connections and missed deadlines are retried with growing
pauses (``--max-retries``), each call within ``--judge-timeout`` seconds in all; other refusals (a bad key, an
unknown model, a redirect to another origin, a reply over 1 MiB) stop at once with one sentence.
Summarise with ``python -m llava.eval.summarize_gpt_review -f OUTPUT``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from llava.eval.files import read_json, read_jsonl
from llava.eval.judge import DEFAULT_TIMEOUT, JudgeClient, judge_from_env
from llava.eval.provenance import Provenance, file_digest
from llava.numeric import MAX_COUNT, number_type
from llava.outputs import atomic_output, guard_outputs, read_jsonl_resumable
from llava.utils import UserError, cli_main, setup_logging

logger = logging.getLogger(__name__)

DEFAULT_JUDGE = "gpt-4-0314"
SYSTEM_MESSAGE = "You are a helpful and precise assistant for checking the quality of the answer."
TEMPERATURE = 0.2
RULE_FILE = Path(__file__).with_name("table") / "rule.json"


def parse_score(review: str) -> list[float]:
    """The two scores on the first line of a review (``"8 6"`` or ``"8, 6"``), or ``[-1, -1]``."""
    first = review.split("\n")[0].replace(",", " ").split()
    try:
        if len(first) == 2:
            return [float(first[0]), float(first[1])]
    except ValueError:
        pass
    logger.warning("no score pair on the first line of the review: %r", review[:200])
    return [-1, -1]


def review_prompt(question: Mapping[str, Any], context: Mapping[str, Any], answers: Sequence[Mapping[str, Any]], rule: Mapping[str, str]) -> str:
    """The judge's user message: context, question, the two answers, then the category's instruction."""
    captions = context.get("caption", [])
    caption = "\n".join(captions) if isinstance(captions, list) else str(captions)
    role = rule["role"]
    parts = [f"[Context]\n{caption}", f"[Question]\n{question['text']}"]
    for number, answer in enumerate(answers, start=1):
        parts.append(f"[{role} {number}]\n{answer['text']}\n\n[End of {role} {number}]")
    parts.append(f"[System]\n{rule['prompt']}")
    return "\n\n".join(parts) + "\n\n"


def _by_question(path: str, what: str) -> dict[Any, dict[str, Any]]:
    return {record["question_id"]: record for record in read_jsonl(path, what=what)}


def reviews_done(output: Path) -> set[Any]:
    """Question ids already reviewed in ``output``.

    A damaged line (a write cut short by a kill, a hand edit) moves to ``OUTPUT.rejected`` and its question is
    asked again; every intact review, before and after it, stays (``llava.outputs.read_jsonl_resumable``).
    """
    records, rejected, damaged = read_jsonl_resumable(output, what="review file")
    if damaged:
        logger.warning("%d damaged line(s) of %s moved to %s; those questions are reviewed again", damaged, output, rejected)
    return {record["question_id"] for record in records if "question_id" in record}


def write_reviews(output: Path, provenance: Provenance, *, overwrite: bool, review: Callable[[set[Any], IO[str]], None]) -> None:
    """Run ``review(done, handle)``, which writes one review line per question not in ``done``, into ``output``.

    Resuming, the reviews are appended (``done`` holds the questions already reviewed; damaged lines are set aside
    first). With ``overwrite``, ``done`` is empty and the old reviews and their record stay until every new review
    is written: a failed judge call or a kill leaves the file as it was.
    """
    if overwrite:
        with atomic_output(output) as handle:
            review(set(), handle)
        provenance.start()
        return
    done = reviews_done(output)
    provenance.resume(has_answers=bool(done))
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("a", encoding="utf-8") as handle:
        review(done, handle)


def review_producer(args: argparse.Namespace, client: JudgeClient) -> dict[str, Any]:
    """What the reviews depend on: the judge and the exact inputs (a re-generated answers file changes them)."""
    return {
        "endpoint": client.url, "judge_model": client.model, "max_tokens": args.max_tokens, "rule": file_digest(args.rule),
        "question": file_digest(args.question), "reference": file_digest(args.answer_list[0]), "answers": file_digest(args.answer_list[1]),
    }


def run_reviews(args: argparse.Namespace, client: JudgeClient) -> list[dict[str, Any]]:
    """Review every question without a review in ``args.output``; returns the new review records."""
    if len(args.answer_list) != 2:
        raise UserError(f"--answer-list takes two answer files (reference, then model), got {len(args.answer_list)}")
    inputs = {"--question": args.question, "--context": args.context, "--rule": args.rule,
              "--answer-list reference": args.answer_list[0], "--answer-list model": args.answer_list[1]}
    guard_outputs(inputs=inputs, files={"--output": args.output})  # before anything is read or the judge is asked
    questions = read_jsonl(args.question, what="question file")
    if not questions:
        raise UserError(f"the question file {args.question!r} holds no questions; point --question at LLaVA-Bench's questions.jsonl")
    contexts = {record["image"]: record for record in read_jsonl(args.context, what="context file")}
    rules = read_json(args.rule, what="rule table")
    reference, model = (_by_question(path, "answers file") for path in args.answer_list)
    output = Path(os.path.expanduser(args.output))
    provenance = Provenance(output, review_producer(args, client), output_flag="--output", what="review")
    written: list[dict[str, Any]] = []
    done: set[Any] = set()

    def review(already: set[Any], handle: IO[str]) -> None:
        done.update(already)
        todo = [(index, question) for index, question in enumerate(questions) if question["question_id"] not in already]
        _review_all(todo, args, client, (contexts, rules, reference, model), handle, written)

    write_reviews(output, provenance, overwrite=args.overwrite, review=review)
    logger.info("%d new reviews, %d already in %s", len(written), len(done), output)
    return written


def _review_all(
    todo: Sequence[tuple[int, dict[str, Any]]], args: argparse.Namespace, client: JudgeClient,
    tables: tuple[dict[str, Any], dict[str, Any], dict[Any, Any], dict[Any, Any]], handle: Any, written: list[dict[str, Any]],
) -> None:
    """Ask the judge about each ``(index, question)`` and write its review line to ``handle`` (flushed at once)."""
    contexts, rules, reference, model = tables
    for index, question in todo:
        qid = question["question_id"]
        category = "llava_bench_" + question["category"]
        if category not in rules:
            raise UserError(f"question {qid!r}: category {category!r} is not in the rule table {args.rule!r} (it has {sorted(rules)})")
        if question["image"] not in contexts:
            raise UserError(f"question {qid!r}: image {question['image']!r} has no entry in the context file {args.context!r}")
        pair = []
        for answers, path in ((reference, args.answer_list[0]), (model, args.answer_list[1])):
            if qid not in answers:
                raise UserError(f"question {qid!r} has no answer in {path!r}")
            pair.append(answers[qid])
        messages = [{"role": "system", "content": SYSTEM_MESSAGE},
                    {"role": "user", "content": review_prompt(question, contexts[question["image"]], pair, rules[category])}]
        content = client.chat(messages, max_tokens=args.max_tokens, temperature=TEMPERATURE).text
        record = {
            "id": index + 1, "question_id": qid,
            "answer1_id": pair[0].get("answer_id", qid), "answer2_id": pair[1].get("answer_id", qid),
            "category": category, "content": content, "tuple": parse_score(content),
        }
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        written.append(record)


def review_parser(prog: str, description: str, rule_file: Path) -> argparse.ArgumentParser:
    """Upstream's flags of a GPT-assisted review (``-q -c -a -r -o``) and the judge's; both review commands use it."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("-q", "--question", required=True)
    parser.add_argument("-c", "--context", required=True)
    parser.add_argument("-a", "--answer-list", nargs="+", default=[])
    parser.add_argument("-r", "--rule", default=str(rule_file), help="rule table (default: the one shipped with llava)")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--max-tokens", type=number_type(1, MAX_COUNT, integer=True), default=1024,
                        help="longest review the judge may write")
    parser.add_argument("--judge-model", default=None, help=f"default: $LLAVA_JUDGE_MODEL or {DEFAULT_JUDGE}")
    parser.add_argument("--max-retries", type=int, default=6, help="retries of a rate-limited or failed call")
    parser.add_argument("--judge-timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds one judge call may take in all, however slowly the endpoint answers")
    parser.add_argument("--overwrite", action="store_true", help="review everything again instead of resuming")
    return parser


def build_parser() -> argparse.ArgumentParser:
    return review_parser("python -m llava.eval.eval_gpt_review_bench", __doc__.split("\n\n")[0], RULE_FILE)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = build_parser().parse_args(argv)
    setup_logging()
    client = judge_from_env(args.judge_model, DEFAULT_JUDGE, max_retries=args.max_retries, timeout=args.judge_timeout)
    return run_reviews(args, client)


__all__ = ["JudgeClient", "build_parser", "main", "parse_score", "review_parser", "review_prompt", "run_reviews"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
