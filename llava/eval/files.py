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
import logging
import math
import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Iterable

from llava.outputs import atomic_output, check_outputs, guard_outputs, same_file, write_json, write_text
from llava.utils import UserError

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]


def _describe(path: PathLike) -> str:
    return repr(os.fspath(path))


def _require_file(path: PathLike, what: str) -> Path:
    resolved = Path(os.path.expanduser(os.fspath(path)))
    if not resolved.is_file():
        raise FileNotFoundError(f"{what} {_describe(path)} does not exist")
    return resolved


def _jsonl_objects(path: PathLike, what: str, unreadable: list[int] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSONL file of objects.

    Args:
        unreadable: When given, a line that is not a JSON object is skipped and its number appended here.

    Raises:
        FileNotFoundError: If the file is missing.
        UserError: On a line that is not a JSON object (without ``unreadable``), naming the file and line number.
    """
    resolved = _require_file(path, what)
    with resolved.open(encoding="utf-8") as handle:
        try:
            lines = list(handle)
        except UnicodeDecodeError as error:
            raise UserError(f"{what} {_describe(path)} is not UTF-8 text (byte {error.start}); is it a JSONL file?") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if unreadable is not None:
                unreadable.append(number)
                continue
            raise UserError(f"{what} {_describe(path)} line {number} is not valid JSON ({error.msg})") from None
        if not isinstance(record, dict):
            if unreadable is not None:
                unreadable.append(number)
                continue
            raise UserError(f"{what} {_describe(path)} line {number} is a {type(record).__name__}, expected a JSON object")
        yield number, record


def read_jsonl(path: PathLike, *, what: str = "JSONL file", fields: Mapping[str, type | tuple[type, ...]] | None = None
               ) -> list[dict[str, Any]]:
    """Read a JSONL file of objects; blank lines are skipped.

    Args:
        path: The file.
        what: What it is, for messages (``"question file"``).
        fields: When given, every record must have these fields with these types (:func:`check_fields`): the one
            schema check of the records a command reads (questions, contexts, answers), done before any of them
            is used.

    Raises:
        FileNotFoundError: If the file is missing.
        ValueError: On a line that is not a JSON object, or (``fields``) lacks a field or has the wrong type, naming
            the file, the line and the field.
    """
    records = []
    for number, record in _jsonl_objects(path, what):
        if fields:
            check_fields(record, fields, f"{what} {_describe(path)} line {number}")
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
            raise UserError(f"{what} {_describe(path)} is not valid JSON (line {error.lineno}: {error.msg})") from None
        except UnicodeDecodeError as error:
            raise UserError(f"{what} {_describe(path)} is not UTF-8 text (byte {error.start}); is it a JSON file?") from None


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
    except (pd.errors.ParserError, UnicodeDecodeError) as error:
        raise UserError(f"{what} {_describe(path)} is not a valid UTF-8 TSV table ({error})") from None
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


# ------------------------------------------------------------------------------------------------ fields

#: Accepted types of a question id: upstream's files use strings (GQA, MME, TextVQA) and integers (POPE, SEED).
QUESTION_ID = (str, int)

_TYPE_WORDS = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "a JSON object", bool: "true or false"}


def _type_words(types: type | tuple[type, ...]) -> str:
    options = types if isinstance(types, tuple) else (types,)
    return " or ".join(_TYPE_WORDS.get(option, option.__name__) for option in options)


def _has_type(value: Any, types: type | tuple[type, ...]) -> bool:
    options = types if isinstance(types, tuple) else (types,)
    if object in options:
        return True
    if isinstance(value, bool) and bool not in options:  # JSON true is not a number here
        return False
    return isinstance(value, options)


def check_fields(record: Mapping[str, Any], fields: Mapping[str, type | tuple[type, ...]], where: str) -> None:
    """Require each of ``fields`` in ``record`` with one of its types (``bool`` is never an ``int``).

    Args:
        record: A question or answer object.
        fields: Field name -> accepted type(s), e.g. ``{"question_id": QUESTION_ID, "text": str}``.
        where: What the record is, for the message (e.g. ``"question file 'q.jsonl' question 3"``).

    Raises:
        UserError: Naming ``where``, the field and, for a wrong type, the value found.
    """
    for key, types in fields.items():
        if key not in record:
            raise UserError(f"{where} has no {key!r} field (fields: {sorted(record)})")
        if not _has_type(record[key], types):
            shown = repr(record[key])
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise UserError(f"{where}: {key!r} must be {_type_words(types)}, got {shown} ({type(record[key]).__name__})")


def has_fields(record: Mapping[str, Any], fields: Mapping[str, type | tuple[type, ...]]) -> bool:
    """Whether :func:`check_fields` accepts ``record`` (e.g. whether a line of an output file is a whole record)."""
    try:
        check_fields(record, fields, "record")
    except UserError:
        return False
    return True


#: The fields naming a record's picture or clip: a question gives at most one (training refuses the same).
VISUAL_FIELDS = ("image", "video")


def check_one_visual(record: Mapping[str, Any], where: str) -> None:
    """Refuse a record that names both an image and a video (a loader would silently use one and drop the other).

    Raises:
        UserError: ``"<where> (question_id 'q0') has both 'image' and 'video'; give one of them"``.
    """
    given = [key for key in VISUAL_FIELDS if record.get(key) is not None]
    if len(given) > 1:
        qid = record.get("question_id")
        named = f" (question_id {qid!r})" if qid is not None else ""
        raise UserError(f"{where}{named} has both {given[0]!r} and {given[1]!r}; give one of them")


def ordinal(number: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ..., ``11th``, ``12th``, ``13th``, ``21st``: how messages name a question."""
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def check_records(records: Any, fields: Mapping[str, type | tuple[type, ...]], where: str, expected: str) -> list[dict[str, Any]]:
    """Check that ``records`` is a list of objects with ``fields``; a file of another benchmark is one sentence.

    Args:
        records: What a benchmark file held.
        fields: Required fields and types of each record.
        where: The file, for messages (e.g. ``"VizWiz question file 'x.jsonl'"``).
        expected: What the file should be, e.g. ``"upstream's llava_test.jsonl"``.

    Raises:
        UserError: Naming ``where``, the first bad record and the fields expected.
    """
    if not isinstance(records, list):
        raise UserError(f"{where} must hold a list of records with {_field_list(fields)} ({expected}), got a {type(records).__name__}")
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict) or any(key not in record for key in fields):
            shown = sorted(record) if isinstance(record, dict) else type(record).__name__
            raise UserError(
                f"{where}: the {ordinal(number)} record has {shown}, but each needs {_field_list(fields)} ({expected}); "
                "is it the file of another benchmark?"
            )
        check_fields(record, fields, f"{where}, {ordinal(number)} record")
    return records


def _field_list(fields: Mapping[str, Any]) -> str:
    return ", ".join(repr(key) for key in fields)


# ------------------------------------------------------------------------------------------------ answer identity

AnswerIdentity = tuple[Any, Any, Any]


def answer_identity(record: Mapping[str, Any], *, by_prompt: bool) -> AnswerIdentity:
    """What tells one answer from another: ``(question_id, round_id, prompt or None)``.

    Upstream's converters pair an answer with its question by ``question_id`` alone (GQA, POPE, SQA, SEED,
    VQAv2, VizWiz, MM-Vet, Q-Bench), or by ``question_id`` and ``prompt`` where one id carries several questions
    (MME's ``llava_mme.jsonl`` asks two questions per image and uses the image path as id; TextVQA's uses the
    image id). MMBench's ``--all-rounds`` adds ``round_id``. The loader core, which serves every benchmark, uses
    ``by_prompt=True`` for resuming and for its duplicate check; each scorer uses its benchmark's rule.
    """
    return (record["question_id"], record.get("round_id"), record["prompt"] if by_prompt else None)


def describe_identity(identity: AnswerIdentity) -> str:
    """``question_id 'x'`` (with its round and, for prompt identities, "and the same prompt")."""
    question_id, round_id, prompt = identity
    text = f"question_id {question_id!r}"
    if round_id is not None:
        text += f" round {round_id!r}"
    return text + (" and the same prompt" if prompt is not None else "")


def read_answers(
    path: PathLike, *, by_prompt: bool, what: str = "answers file", fields: Mapping[str, type | tuple[type, ...]] | None = None,
    unreadable: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Read an answers JSONL for scoring: every line an answer, no two answers with the same identity.

    Args:
        path: The answers file.
        by_prompt: The benchmark's identity rule (see :func:`answer_identity`).
        what: What the file is, for messages.
        fields: Required fields and types besides ``question_id`` (and ``prompt`` when ``by_prompt``); default
            ``{"text": str}``.
        unreadable: When given, lines that are not JSON objects are skipped and their numbers appended here
            (upstream's VQAv2 and VizWiz converters tolerate them); otherwise they are an error.

    Raises:
        FileNotFoundError: If the file is missing.
        UserError: One sentence naming the line of a malformed answer, or the two lines of a repeated one.
    """
    required: dict[str, type | tuple[type, ...]] = {"question_id": QUESTION_ID}
    if by_prompt:
        required["prompt"] = str
    required.update(fields if fields is not None else {"text": str})
    records: list[dict[str, Any]] = []
    seen: dict[AnswerIdentity, int] = {}
    for number, record in _jsonl_objects(path, what, unreadable):
        where = f"{what} {_describe(path)} line {number}"
        check_fields(record, required, where)
        identity = answer_identity(record, by_prompt=by_prompt)
        if identity in seen:
            raise UserError(
                f"{where} repeats the answer on line {seen[identity]} ({describe_identity(identity)}); each question "
                "must be answered once: remove one of them (were two answers files concatenated?)"
            )
        seen[identity] = number
        records.append(record)
    return records


def report_missing(benchmark: str, expected: Sequence[Any], answered: Collection[Any], consequence: str) -> list[Any]:
    """Warn about questions of the benchmark's question list that have no answer, and return them.

    Args:
        benchmark: Name for the message.
        expected: Keys of every question, in order.
        answered: Keys that have an answer.
        consequence: What the scorer does with them, e.g. ``"they count as wrong"``.
    """
    missing = [key for key in expected if key not in answered]
    if missing:
        shown = ", ".join(repr(key) for key in missing[:5]) + (", ..." if len(missing) > 5 else "")
        logger.warning("%s: %d of %d questions have no answer (%s); %s", benchmark, len(missing), len(expected), shown, consequence)
    return missing


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
    """Raise a UserError naming ``where`` and the first of ``keys`` missing from ``record`` (any type accepted)."""
    check_fields(record, {key: object for key in keys}, where)


__all__ = [
    "QUESTION_ID",
    "answer_identity",
    "atomic_output",
    "check_fields",
    "check_one_visual",
    "has_fields",
    "check_outputs",
    "check_records",
    "describe_identity",
    "guard_outputs",
    "is_missing",
    "load_questions",
    "ordinal",
    "read_json",
    "read_jsonl",
    "read_answers",
    "read_jsonl_lenient",
    "read_tsv",
    "report_missing",
    "require_keys",
    "same_file",
    "write_json",
    "write_text",
    "write_score",
]
