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
``https://api.openai.com/v1``; ``/chat/completions`` goes on its path, a query is kept), ``LLAVA_JUDGE_MODEL`` (default
``gpt-4-0314``, upstream's judge; ``--judge-model`` overrides it); see :mod:`llava.eval.judge`.

Per question (matched by ``question_id`` in both answer files; the first is the reference, usually GPT-4's
answers) the judge gets the image's context (its ``caption`` lines), the question, both answers and the
category's instruction from the rule table (``llava_bench_<category>`` -> ``{"role", "prompt"}``), at
temperature 0.2. The first line of its reply holds the two scores; a reply without them is recorded as
``[-1, -1]``, as upstream (``summarize_gpt_review`` leaves such reviews out and counts them). Output lines:
``{"id", "question_id", "answer1_id", "answer2_id", "category", "content", "tuple"}``, one per question, appended
and handed to the operating system as each comes, so a rerun resumes with the questions that have no review yet;
a damaged line moves to ``OUTPUT.rejected`` (named in the log) and its question is asked again, every intact
review stays. Every input record is checked (its fields, its category in the rule table, its image's context,
both answers) before the first judge call. ``OUTPUT.meta.json`` records the judge (endpoint, model, token limit)
and a hash of the rule table, the questions, the context and both answer files: resuming after any of them
changed is refused until ``--overwrite``, which keeps the old reviews and their record until the first new review
replaces them; from then on each review is kept as it is paid for, so a judge that fails midway leaves its
reviews under its own record and a plain rerun asks only for the rest.
Rate limits (HTTP 429), server errors, dropped connections and missed deadlines are retried with growing
pauses (``--max-retries``), each call within ``--judge-timeout`` seconds in all; other refusals (a bad key, an
unknown model, a redirect to another origin, a reply over 1 MiB) stop at once with one sentence.
Summarise with ``python -m llava.eval.summarize_gpt_review -f OUTPUT``.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from llava.eval.answers import AnswersFile
from llava.eval.files import QUESTION_ID, has_fields, read_json, read_jsonl
from llava.eval.judge import DEFAULT_TIMEOUT, JudgeClient, judge_from_env
from llava.eval.provenance import Provenance, file_digest
from llava.numeric import MAX_COUNT, number_type
from llava.outputs import guard_outputs
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


#: Fields of the records a review reads, checked (naming file, line and field) before the first judge call.
QUESTION_FIELDS = {"question_id": QUESTION_ID, "image": str, "text": str, "category": str}
CONTEXT_FIELDS = {"image": str}
ANSWER_FIELDS = {"question_id": QUESTION_ID, "text": str}
#: What a line of a review file must hold to count as a review (others are damaged and set aside).
REVIEW_FIELDS = {"question_id": QUESTION_ID, "content": str, "tuple": list}

#: ``(review record without the judge's reply, the judge's messages)`` of one question.
Planned = tuple[dict[str, Any], list[dict[str, str]]]


def is_review(record: Mapping[str, Any]) -> bool:
    """Whether a line of a review file is a whole review (:data:`REVIEW_FIELDS`)."""
    return has_fields(record, REVIEW_FIELDS)


def _by_question(path: str, what: str) -> dict[Any, dict[str, Any]]:
    return {record["question_id"]: record for record in read_jsonl(path, what=what, fields=ANSWER_FIELDS)}


def plan_reviews(args: argparse.Namespace, *, context_fields: Mapping[str, Any] = CONTEXT_FIELDS,
                 context_of: Callable[[Mapping[str, Any], str], Mapping[str, Any]] = lambda record, where: record,
                 rule_key: Callable[[str], str] = lambda category: category) -> list[Planned]:
    """Every question's review record and judge messages, every input checked before the first paid call.

    Args:
        args: ``--question``, ``--context``, ``--rule``, ``--answer-list`` (reference, model).
        context_fields: Fields every context record must have (its ``image`` names it).
        context_of: ``(context record, where) -> {"caption": ...}``, the context the judge sees.
        rule_key: The rule table's key of a question's ``category`` (LLaVA-Bench's ``llava_bench_<category>``).

    Raises:
        UserError: For a record without a field it needs, a category the rule table lacks, an image without a
            context, or a question one of the answer files does not answer.
    """
    questions = read_jsonl(args.question, what="question file", fields=QUESTION_FIELDS)
    if not questions:
        raise UserError(f"the question file {args.question!r} holds no questions; point --question at LLaVA-Bench's questions.jsonl")
    contexts = {record["image"]: record for record in read_jsonl(args.context, what="context file", fields=context_fields)}
    rules = read_json(args.rule, what="rule table")
    answers = [(path, _by_question(path, "answers file")) for path in args.answer_list]
    plan = []
    for index, question in enumerate(questions):
        qid, category = question["question_id"], rule_key(question["category"])
        if category not in rules:
            raise UserError(f"question {qid!r}: category {category!r} is not in the rule table {args.rule!r} (it has {sorted(rules)})")
        if question["image"] not in contexts:
            raise UserError(f"question {qid!r}: image {question['image']!r} has no entry in the context file {args.context!r}")
        pair = []
        for path, by_id in answers:
            if qid not in by_id:
                raise UserError(f"question {qid!r} has no answer in {path!r}")
            pair.append(by_id[qid])
        context = context_of(contexts[question["image"]], f"context of image {question['image']!r}")
        messages = [{"role": "system", "content": SYSTEM_MESSAGE},
                    {"role": "user", "content": review_prompt(question, context, pair, rules[category])}]
        record = {"id": index + 1, "question_id": qid, "answer1_id": pair[0].get("answer_id", qid),
                  "answer2_id": pair[1].get("answer_id", qid), "category": category}
        plan.append((record, messages))
    return plan


def write_reviews(output: Path, provenance: Provenance, *, overwrite: bool,
                  review: Callable[[set[Any], Callable[[Mapping[str, Any]], None]], None]) -> None:
    """Run ``review(done, write)``, which calls ``write(record)`` once per question not in ``done``, into ``output``.

    Every review is kept the moment it is paid for (:class:`llava.eval.answers.AnswersFile`, one line each, handed
    to the operating system). Resuming, ``done`` holds the questions already reviewed (damaged lines are set aside
    first). With ``overwrite``, ``done`` is empty, and the old reviews and their record stay until the first new
    review replaces them; from then on the file holds the new judge's reviews under its record, so a judge that
    fails midway leaves every review it gave, and a plain rerun asks only for the rest.
    """
    reviews = AnswersFile(output, overwrite=overwrite, accept=is_review, by_prompt=False, what="review file")
    done = {record["question_id"] for record in reviews.existing}
    if not overwrite:
        provenance.check(has_answers=bool(done))
    with reviews:
        reviews.begin(on_commit=provenance.start if overwrite else lambda: provenance.resume(has_answers=bool(done)))
        review(done, reviews.write)
        reviews.finish()


def review_producer(args: argparse.Namespace, client: JudgeClient) -> dict[str, Any]:
    """What the reviews depend on: the judge and the exact inputs (a re-generated answers file changes them)."""
    return {
        "endpoint": client.url, "judge_model": client.model, "max_tokens": args.max_tokens, "rule": file_digest(args.rule),
        "question": file_digest(args.question), "context": file_digest(args.context),
        "reference": file_digest(args.answer_list[0]), "answers": file_digest(args.answer_list[1]),
    }


def run_reviews(args: argparse.Namespace, client: JudgeClient, plan: Callable[[argparse.Namespace], list[Planned]] = plan_reviews
                ) -> list[dict[str, Any]]:
    """Review every question without a review in ``args.output``; returns the new review records.

    Args:
        plan: Reads and checks the inputs (:func:`plan_reviews` with the command's context and rule keys).
    """
    if len(args.answer_list) != 2:
        raise UserError(f"--answer-list takes two answer files (reference, then model), got {len(args.answer_list)}")
    inputs = {"--question": args.question, "--context": args.context, "--rule": args.rule,
              "--answer-list reference": args.answer_list[0], "--answer-list model": args.answer_list[1]}
    guard_outputs(inputs=inputs, files={"--output": args.output})  # before anything is read or the judge is asked
    planned = plan(args)
    output = Path(os.path.expanduser(args.output))
    provenance = Provenance(output, review_producer(args, client), output_flag="--output", what="review")
    written: list[dict[str, Any]] = []
    done: set[Any] = set()

    def review(already: set[Any], write: Callable[[Mapping[str, Any]], None]) -> None:
        done.update(already)
        for record, messages in planned:
            if record["question_id"] in already:
                continue
            content = client.chat(messages, max_tokens=args.max_tokens, temperature=TEMPERATURE).text
            reviewed = {**record, "content": content, "tuple": parse_score(content)}
            write(reviewed)
            written.append(reviewed)

    write_reviews(output, provenance, overwrite=args.overwrite, review=review)
    logger.info("%d new reviews, %d already in %s", len(written), len(done), output)
    return written


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


def plan_bench(args: argparse.Namespace) -> list[Planned]:
    """LLaVA-Bench's plan: the context is the record's ``caption`` lines, the rule key ``llava_bench_<category>``."""
    return plan_reviews(args, rule_key=lambda category: "llava_bench_" + category)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = build_parser().parse_args(argv)
    setup_logging()
    if args.max_tokens < 1:
        raise UserError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    client = judge_from_env(args.judge_model, DEFAULT_JUDGE, max_retries=args.max_retries, timeout=args.judge_timeout)
    return run_reviews(args, client, plan_bench)


__all__ = ["JudgeClient", "build_parser", "is_review", "main", "parse_score", "plan_bench", "plan_reviews", "review_parser",
           "review_prompt", "run_reviews", "write_reviews"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
