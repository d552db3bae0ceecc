"""LLaVA-Bench: summarise GPT-4 review files into relative scores per category.

Usage (as upstream)::

    python -m llava.eval.summarize_gpt_review -f reviews/llava-v1.5-13b.jsonl
    python -m llava.eval.summarize_gpt_review -d reviews/    # every gpt4_text*/review_*/reviews_*.jsonl
    python -m llava.eval.summarize_gpt_review -d reviews/ -s 13b -v 0613   # only files naming "13b", judged by 0613

``-s/--select A B``: only review files whose name contains every one of the strings. ``-v/--version 0314|0613``:
only files of that judge version (a name containing "0613" is a 0613 review, any other a 0314 one). In a folder
whose path contains "review", every ``.jsonl`` file is a review file.

Each review line has ``tuple = [reference score, model score]`` and usually a ``category``. Per category
(and ``all``) the two scores are averaged (each mean rounded to 3 decimals, as upstream), and the line
printed is ``<category> <100 * model / reference> <10 * reference> <10 * model>`` rounded to 1 decimal. Reviews
whose judge reply held no score pair (``[-1, -1]``) are left out of the means, with a warning counting them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any, Sequence

from llava.utils import UserError, cli_main, setup_logging

logger = logging.getLogger(__name__)

_PREFIXES = ("gpt4_text", "reviews_", "review_")


def is_unparsed(pair: Sequence[float]) -> bool:
    """Whether a score pair is the placeholder of a review without scores (upstream writes ``[-1, -1]``)."""
    return any(value < 0 for value in pair)


def summarize_reviews(path: str | os.PathLike[str], ignore: Sequence[int] = ()) -> dict[str, tuple[float, float, float]]:
    """Return ``{category: (relative score, reference x10, model x10)}`` for one review file, sorted by name.

    Reviews whose judge reply held no score pair (``[-1, -1]``) are left out of every mean and counted in a
    warning: averaging the placeholder as a score would pull both means down.

    Raises:
        UserError: On a line that is not JSON, or has neither ``tuple`` nor ``score``.
    """
    scores: dict[str, list[list[float]]] = {}
    unparsed = total = 0
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                review = json.loads(line)
            except ValueError:
                review = None
            if not isinstance(review, dict):
                raise UserError(f"review file {os.fspath(path)!r} line {number} is not a JSON object; run "
                                "eval_gpt_review_bench on it again (it sets damaged lines aside and re-reviews them)")
            if review.get("question_id") in ignore:
                continue
            pair = review.get("tuple", review.get("score"))
            if not isinstance(pair, (list, tuple)) or len(pair) < 2:
                raise UserError(f"review file {os.fspath(path)!r} line {number} has no [reference, model] score pair")
            try:
                values = [float(value) for value in pair]
            except (TypeError, ValueError):
                raise UserError(f"review file {os.fspath(path)!r} line {number}: the score pair {pair!r} is not numbers") from None
            total += 1
            if is_unparsed(values):
                unparsed += 1
                continue
            scores.setdefault("all", []).append(values)
            if "category" in review:
                scores.setdefault(review["category"], []).append(values)
    if unparsed:
        logger.warning("%s: %d of %d reviews have no score pair (the judge's reply did not start with two scores) "
                       "and are left out", os.fspath(path), unparsed, total)
    summary = {}
    for category in sorted(scores):
        pairs = scores[category]
        reference = round(sum(pair[0] for pair in pairs) / len(pairs), 3)
        model = round(sum(pair[1] for pair in pairs) / len(pairs), 3)
        relative = round(model / reference * 100, 1) if reference else float("nan")
        summary[category] = (relative, round(reference * 10, 1), round(model * 10, 1))
    return summary


def judge_version(config: str) -> str:
    """The GPT-4 judge version a review file name stands for: ``0613`` if it says so, else ``0314``."""
    return "0613" if "0613" in config else "0314"


def selected(config: str, select: Sequence[str] | None, version: str | None) -> bool:
    """Whether a review file (``config``: its name without prefix and suffix) passes ``-s`` and ``-v``."""
    if select and not all(part in config for part in select):
        return False
    return version is None or judge_version(config) == version


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-d", "--dir", default=None)
    parser.add_argument("-v", "--version", default=None, help="judge version to keep: 0314 or 0613")
    parser.add_argument("-s", "--select", nargs="*", default=None, help="keep files whose name contains all of these")
    parser.add_argument("-f", "--files", nargs="*", default=None)
    parser.add_argument("-i", "--ignore", nargs="*", default=None, help="question ids to leave out")
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    setup_logging()
    ignore = [int(value) for value in args.ignore] if args.ignore else []
    if args.files:
        files = [Path(name) if args.dir is None else Path(args.dir) / name for name in args.files]
    elif args.dir is not None:
        every = "review" in args.dir
        files = [
            Path(args.dir) / name for name in os.listdir(args.dir)
            if name.endswith(".jsonl") and (every or name.startswith(_PREFIXES))
        ]
    else:
        raise UserError("give review files with -f or a folder with -d")
    results = {}
    for path in sorted(files):
        config = path.name.replace("gpt4_text_", "").replace(".jsonl", "")
        if not selected(config, args.select, args.version):
            continue
        print(config)
        results[config] = summarize_reviews(path, ignore)
        for category, (relative, reference, model) in results[config].items():
            print(category, relative, reference, model)
        print("=" * 33)
    return results


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
