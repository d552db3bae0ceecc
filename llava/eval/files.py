"""Reading benchmark files and writing score files, shared by the loaders, converters and scorers.

Nothing here imports torch, so the scorers run on a machine without a model stack.

Formats (upstream LLaVA's, see ``llava-interface.md`` section 8):

* question files: JSONL (``model_vqa``, ``model_vqa_loader``), a JSON list in the training format
  (``model_vqa_science``) or an MMBench TSV with base64 images (``model_vqa_mmbench``);
* answers files: JSONL, one object per answer;
* score files (ours): one small JSON object per benchmark, ``{"benchmark", "score", "metric", ...}``,
  which :mod:`llava.eval.summarize` reads from a results directory.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

from llava.outputs import atomic_output, check_outputs, same_file, write_json, write_text

PathLike = str | os.PathLike[str]


def _describe(path: PathLike) -> str:
    return repr(os.fspath(path))


def _require_file(path: PathLike, what: str) -> Path:
    resolved = Path(os.path.expanduser(os.fspath(path)))
    if not resolved.is_file():
        raise FileNotFoundError(f"{what} {_describe(path)} does not exist")
    return resolved


def read_jsonl(path: PathLike, *, what: str = "JSONL file") -> list[dict[str, Any]]:
    """Read a JSONL file of objects; blank lines are skipped.

    Raises:
        FileNotFoundError: If the file is missing.
        ValueError: On a line that is not a JSON object, naming the file and line number.
    """
    resolved = _require_file(path, what)
    records: list[dict[str, Any]] = []
    with resolved.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{what} {_describe(path)} line {number} is not valid JSON ({error.msg})"
                ) from None
            if not isinstance(record, dict):
                raise ValueError(
                    f"{what} {_describe(path)} line {number} is a {type(record).__name__}, "
                    "expected a JSON object"
                )
            records.append(record)
    return records


def read_jsonl_lenient(path: PathLike, *, what: str = "answers file") -> tuple[list[dict[str, Any]], int]:
    """Read a JSONL file, counting instead of failing on lines that do not parse.

    Upstream's submission converters (VQAv2, VizWiz) tolerate broken lines this way.

    Returns:
        ``(records, number of unreadable lines)``.
    """
    resolved = _require_file(path, what)
    records: list[dict[str, Any]] = []
    bad = 0
    with resolved.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(record, dict):
                records.append(record)
            else:
                bad += 1
    return records, bad


def read_json(path: PathLike, *, what: str = "JSON file") -> Any:
    """Load a JSON document, naming the file if it does not parse."""
    resolved = _require_file(path, what)
    with resolved.open(encoding="utf-8") as handle:
        try:
            return json.load(handle)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{what} {_describe(path)} is not valid JSON (line {error.lineno}: {error.msg})"
            ) from None


def read_tsv(path: PathLike, *, what: str = "TSV file") -> list[dict[str, Any]]:
    """Read a tab-separated table with pandas, as upstream's MMBench tools do.

    pandas' missing-value rules matter: empty cells and strings such as ``"nan"``, ``"None"`` or
    ``"N/A"`` become NaN, which the MMBench loader treats as "no option"/"no hint", like upstream.

    Returns:
        One dict per row with native Python values (NaN for missing cells).

    Raises:
        ImportError: If pandas is missing (it is in the ``eval`` extra).
    """
    resolved = _require_file(path, what)
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(
            f"reading {_describe(path)} needs pandas; install the eval extra (pip install -e '.[eval]')"
        ) from None
    try:
        frame = pd.read_table(resolved)
    except pd.errors.EmptyDataError:
        return []
    except pd.errors.ParserError as error:
        raise ValueError(f"{what} {_describe(path)} is not a valid TSV table ({error})") from None
    return frame.to_dict("records")


def load_questions(path: PathLike) -> list[dict[str, Any]]:
    """Load a question file in any of upstream's three formats.

    ``.tsv`` files are MMBench tables; a file whose first non-blank character is ``[`` is a JSON list
    (ScienceQA's ``llava_test_CQM-A.json``); anything else is JSONL.

    Raises:
        FileNotFoundError: If the file is missing.
        ValueError: If it holds no questions, or a line/entry is malformed (named in the message).
    """
    resolved = _require_file(path, "question file")
    if resolved.suffix.lower() == ".tsv":
        questions = read_tsv(resolved, what="question file")
    else:
        with resolved.open(encoding="utf-8") as handle:
            head = handle.read(4096).lstrip()
        if head.startswith("["):
            questions = read_json(resolved, what="question file")
            if not isinstance(questions, list):
                raise ValueError(f"question file {_describe(path)} must hold a JSON list")
            for position, entry in enumerate(questions):
                if not isinstance(entry, dict):
                    raise ValueError(
                        f"question file {_describe(path)} entry {position} is a "
                        f"{type(entry).__name__}, expected a JSON object"
                    )
        else:
            questions = read_jsonl(resolved, what="question file")
    if not questions:
        raise ValueError(f"question file {_describe(path)} contains no questions")
    return questions


def write_score(
    path: PathLike | None, benchmark: str, score: float, metric: str, **details: Any
) -> dict[str, Any]:
    """Build a score record and write it to ``path`` (if given) for :mod:`llava.eval.summarize`.

    Args:
        path: Output file, usually ``<results dir>/<benchmark>.json``; ``None`` only builds the record.
        benchmark: Benchmark key (see ``llava.eval.summarize.BENCHMARKS``).
        score: The number the paper reports for this benchmark, on the paper's scale.
        metric: What ``score`` is, in words.
        details: Anything else worth keeping (per-split numbers, counts, source files).

    Returns:
        The record.
    """
    if not math.isfinite(score):
        raise ValueError(f"score for {benchmark!r} must be a finite number, got {score!r}")
    record = {"benchmark": benchmark, "score": float(score), "metric": metric, **details}
    if path is not None:
        write_json(path, record)
    return record


def is_missing(value: Any) -> bool:
    """Upstream MMBench's notion of an empty cell: None, NaN, or the strings "nan"/"none" (any case)."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and value.lower() in ("nan", "none")


def require_keys(record: dict[str, Any], keys: Iterable[str], where: str) -> None:
    """Raise a ValueError naming ``where`` and the first of ``keys`` missing from ``record``."""
    for key in keys:
        if key not in record:
            raise ValueError(f"{where} has no {key!r} field (fields: {sorted(record)})")


__all__ = [
    "atomic_output",
    "check_outputs",
    "is_missing",
    "load_questions",
    "read_json",
    "read_jsonl",
    "read_jsonl_lenient",
    "read_tsv",
    "require_keys",
    "same_file",
    "write_json",
    "write_text",
    "write_score",
]
