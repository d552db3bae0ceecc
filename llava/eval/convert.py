"""Answers-file converters for benchmarks scored by an official tool or server.

Each function has a command-line twin with upstream's flags; ``scripts/convert_*.py`` call them:

========================================  ==================================================================
``scripts/convert_gqa_for_eval.py``       ``--src --dst``: ``[{"questionId", "prediction"}]`` for GQA's eval.py
``scripts/convert_mmvet_for_eval.py``     ``--src --dst``: ``{"v1_<question_id>": text}`` for the MM-Vet judge
``scripts/convert_vqav2_for_submission``  ``--dir --split --ckpt``: EvalAI upload ``[{"question_id", "answer"}]``
``scripts/convert_vizwiz_for_submission`` ``--annotation-file --result-file --result-upload-file``
``scripts/convert_seed_for_submission``   ``--annotation-file --result-file --result-upload-file``
``scripts/convert_mmbench_for_submission`` ``--annotation-file --result-dir --upload-dir --experiment``
========================================  ==================================================================

VQAv2 and VizWiz answers are normalised with :class:`~llava.eval.m4c_evaluator.EvalAIAnswerProcessor`; GQA
predictions lose trailing periods and are lower-cased; SEED accuracy is an exact letter match.

Every converter checks its inputs and outputs before reading (:func:`llava.outputs.guard_outputs`), refuses two
answers to one question (by ``question_id``, with ``round_id`` for MMBench; naming both lines) and a question file
of another benchmark (naming the fields it expects). Upstream's VQAv2 and VizWiz converters skip unreadable
answer lines and count them; so do these.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llava.eval.files import (
    QUESTION_ID,
    atomic_output,
    check_records,
    guard_outputs,
    read_answers,
    read_json,
    read_jsonl,
    report_missing,
    write_json,
    write_score,
    write_text,
)
from llava.eval.m4c_evaluator import EvalAIAnswerProcessor
from llava.utils import UserError, setup_logging

logger = logging.getLogger(__name__)


def _parser(description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(description=description)


# ------------------------------------------------------------------------------------------------ GQA


def convert_gqa(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Write GQA's prediction list: ``text.rstrip(".").lower()`` per answer, in file order."""
    guard_outputs(inputs={"--src": src}, files={"--dst": dst})
    predictions = [
        {"questionId": answer["question_id"], "prediction": answer["text"].rstrip(".").lower()}
        for answer in read_answers(src, by_prompt=False)
    ]
    write_json(dst, predictions, indent=None)
    return predictions


def _src_dst_main(description: str, convert: Callable[[str, str], Any], argv: Sequence[str] | None) -> Any:
    """Command line of the converters that take ``--src ANSWERS --dst OUTPUT`` (upstream's flags)."""
    parser = _parser(description)
    parser.add_argument("--src", type=str, required=True)
    parser.add_argument("--dst", type=str, required=True)
    args = parser.parse_args(argv)
    setup_logging()
    return convert(args.src, args.dst)


def gqa_main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    return _src_dst_main("Convert a GQA answers file for GQA's official eval.py.", convert_gqa, argv)


# ------------------------------------------------------------------------------------------------ MM-Vet


def convert_mmvet(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> dict[str, str]:
    """Write the MM-Vet judge's input: ``{"v1_<question_id>": answer text}``."""
    guard_outputs(inputs={"--src": src}, files={"--dst": dst})
    results = {f"v1_{answer['question_id']}": answer["text"] for answer in read_answers(src, by_prompt=False)}
    write_json(dst, results, indent=2)
    return results


def mmvet_main(argv: Sequence[str] | None = None) -> dict[str, str]:
    return _src_dst_main("Convert an MM-Vet answers file for the MM-Vet GPT-4 grader.", convert_mmvet, argv)


# ------------------------------------------------------------------------------------------------ VQAv2


def convert_vqav2(
    result_file: str | os.PathLike[str], test_file: str | os.PathLike[str], dst: str | os.PathLike[str]
) -> list[dict[str, Any]]:
    """Write the EvalAI upload for every question of ``test_file``; unanswered questions get ``""``."""
    guard_outputs(inputs={"answers (--dir --split --ckpt)": result_file, "test questions (--dir)": test_file},
                  files={"upload (--dir --split --ckpt)": dst})
    bad_lines: list[int] = []
    by_id = {answer["question_id"]: answer["text"] for answer in read_answers(result_file, by_prompt=False, unreadable=bad_lines)}
    questions = check_records(read_jsonl(test_file, what="VQAv2 test question file"), {"question_id": QUESTION_ID},
                              f"VQAv2 test question file {os.fspath(test_file)!r}", "upstream's llava_vqav2_mscoco_test2015.jsonl")
    logger.info("total results: %d, total split: %d, error_line: %d", len(by_id), len(questions), len(bad_lines))
    processor = EvalAIAnswerProcessor()
    upload = [
        {
            "question_id": question["question_id"],
            "answer": processor(by_id[question["question_id"]]) if question["question_id"] in by_id else "",
        }
        for question in questions
    ]
    report_missing("VQAv2", [question["question_id"] for question in questions], by_id, "they are submitted as ''")
    write_json(dst, upload, indent=None)
    return upload


def vqav2_main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = _parser("Convert merged VQAv2 answers into an EvalAI submission file.")
    parser.add_argument("--dir", type=str, default="./playground/data/eval/vqav2")
    parser.add_argument("--ckpt", type=str, required=True)
    parser.add_argument("--split", type=str, required=True)
    args = parser.parse_args(argv)
    setup_logging()
    root = Path(args.dir)
    return convert_vqav2(
        root / "answers" / args.split / args.ckpt / "merge.jsonl",
        root / "llava_vqav2_mscoco_test2015.jsonl",
        root / "answers_upload" / args.split / f"{args.ckpt}.json",
    )


# ------------------------------------------------------------------------------------------------ VizWiz


def convert_vizwiz(
    annotation_file: str | os.PathLike[str], result_file: str | os.PathLike[str], upload_file: str | os.PathLike[str]
) -> list[dict[str, Any]]:
    """Write the VizWiz upload ``[{"image", "answer"}]`` in question order.

    Raises:
        ValueError: If a question has no answer (the server needs all of them), or the upload file is an input.
    """
    guard_outputs(inputs={"--annotation-file": annotation_file, "--result-file": result_file},
                  files={"--result-upload-file": upload_file})
    bad_lines: list[int] = []
    by_id = {answer["question_id"]: answer["text"] for answer in read_answers(result_file, by_prompt=False, unreadable=bad_lines)}
    questions = check_records(read_jsonl(annotation_file, what="VizWiz question file"), {"question_id": QUESTION_ID, "image": str},
                              f"VizWiz question file {os.fspath(annotation_file)!r}", "upstream's llava_test.jsonl")
    logger.info("total results: %d, total split: %d, error_line: %d", len(by_id), len(questions), len(bad_lines))
    missing = [question["question_id"] for question in questions if question["question_id"] not in by_id]
    if missing:
        raise UserError(
            f"VizWiz: {len(missing)} questions have no answer in {os.fspath(result_file)!r} "
            f"(first: {missing[0]!r}); the upload needs every question"
        )
    processor = EvalAIAnswerProcessor()
    upload = [{"image": question["image"], "answer": processor(by_id[question["question_id"]])} for question in questions]
    write_json(upload_file, upload, indent=None)
    return upload


def vizwiz_main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = _parser("Convert VizWiz answers into a submission file.")
    parser.add_argument("--annotation-file", type=str, required=True)
    parser.add_argument("--result-file", type=str, required=True)
    parser.add_argument("--result-upload-file", type=str, required=True)
    args = parser.parse_args(argv)
    setup_logging()
    return convert_vizwiz(args.annotation_file, args.result_file, args.result_upload_file)


# ------------------------------------------------------------------------------------------------ SEED


def _lookup(results: dict[Any, Any], question_id: Any) -> Any:
    """Find a SEED answer whether its id was written as a string or an integer."""
    for candidate in (question_id, str(question_id)):
        if candidate in results:
            return results[candidate]
    try:
        return results.get(int(question_id))
    except (TypeError, ValueError):
        return None


def score_seed(annotation: dict[str, Any], results: dict[Any, dict[str, Any]], data_type: str | None = None) -> dict[str, Any]:
    """Exact-letter accuracy (percent) per question type and in total, optionally for one data type.

    Returns:
        ``{"types": {type name: accuracy}, "total": accuracy, "count": questions}``.
    """
    names = {type_id: name for name, type_id in annotation["question_type"].items()}
    counts: dict[Any, list[int]] = {}
    for question in annotation["questions"]:
        if data_type is not None and question["data_type"] != data_type:
            continue
        tally = counts.setdefault(question["question_type_id"], [0, 0])
        answer = _lookup(results, question["question_id"])
        tally[0] += int(answer is not None and answer["text"] == question["answer"])
        tally[1] += 1
    total_correct = sum(correct for correct, _ in counts.values())
    total = sum(count for _, count in counts.values())
    return {
        "types": {names.get(type_id, str(type_id)): 100.0 * c / n for type_id, (c, n) in sorted(counts.items())},
        "total": 100.0 * total_correct / total if total else float("nan"),
        "count": total,
    }


def load_seed_annotation(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``SEED-Bench.json``, checked: ``{"questions": [{"question_id", "question_type_id", "data_type", "answer"}],
    "question_type": {name: id}}``.

    Raises:
        UserError: For a file of another shape, naming the fields expected.
    """
    document = read_json(path, what="SEED-Bench annotation file")
    where = f"SEED-Bench annotation file {os.fspath(path)!r}"
    if not isinstance(document, dict) or not isinstance(document.get("question_type"), dict):
        raise UserError(f"{where} must be SEED-Bench.json, an object with 'questions' and 'question_type' (name -> id)")
    check_records(document.get("questions"), {"question_id": QUESTION_ID, "question_type_id": (int, str), "data_type": str,
                                              "answer": str}, where, "SEED-Bench.json's 'questions'")
    return document


def convert_seed(
    annotation_file: str | os.PathLike[str], result_file: str | os.PathLike[str], upload_file: str | os.PathLike[str]
) -> dict[str, Any]:
    """Score SEED-Bench (all, image, video) and write the upload JSONL ``{"question_id", "prediction"}``.

    Raises:
        ValueError: If a question has no answer (after the scores are computed), or the upload file is an input.
    """
    guard_outputs(inputs={"--annotation-file": annotation_file, "--result-file": result_file},
                  files={"--result-upload-file": upload_file})
    annotation = load_seed_annotation(annotation_file)
    results = {answer["question_id"]: answer for answer in read_answers(result_file, by_prompt=False)}
    scores = {
        "all": score_seed(annotation, results),
        "image": score_seed(annotation, results, "image"),
        "video": score_seed(annotation, results, "video"),
    }
    lines = []
    for question in annotation["questions"]:
        answer = _lookup(results, question["question_id"])
        if answer is None:
            raise UserError(f"SEED question {question['question_id']!r} has no answer in {os.fspath(result_file)!r}; "
                            "the upload needs every question (answer the missing ones: re-running seed.sh resumes)")
        lines.append(json.dumps({"question_id": question["question_id"], "prediction": answer["text"]}))
    write_text(upload_file, "".join(line + "\n" for line in lines))
    return scores


def seed_main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = _parser("Score SEED-Bench answers and write the upload file.")
    parser.add_argument("--annotation-file", type=str, required=True)
    parser.add_argument("--result-file", type=str, required=True)
    parser.add_argument("--result-upload-file", type=str, required=True)
    parser.add_argument("--output-json", "--output_json", dest="output_json", default=None)
    args = parser.parse_args(argv)
    setup_logging()
    guard_outputs(inputs={"--annotation-file": args.annotation_file, "--result-file": args.result_file},
                  files={"--result-upload-file": args.result_upload_file, "--output-json": args.output_json})
    scores = convert_seed(args.annotation_file, args.result_file, args.result_upload_file)
    for name, accuracy in scores["all"]["types"].items():
        print(f"{name}: {accuracy:.2f}%")
    print(f"Total accuracy: {scores['all']['total']:.2f}%")
    print(f"image accuracy: {scores['image']['total']:.2f}%")
    print(f"video accuracy: {scores['video']['total']:.2f}%")
    if args.output_json:
        write_score(
            args.output_json, "seed", scores["image"]["total"], "accuracy (%) on SEED-Bench image questions",
            total=scores["all"]["total"], video=scores["video"]["total"], types=scores["all"]["types"],
        )
    return scores


# ------------------------------------------------------------------------------------------------ MMBench

# Columns upstream drops from the question table before adding the predictions.
_MMBENCH_DROPPED = ["hint", "category", "source", "image", "comment", "l2-category"]


def convert_mmbench(
    annotation_file: str | os.PathLike[str],
    result_dir: str | os.PathLike[str],
    upload_dir: str | os.PathLike[str],
    experiment: str,
) -> Path:
    """Write ``upload_dir/<experiment>.xlsx``: the question table without images plus a ``prediction`` column.

    The table keeps upstream's column order (``prediction`` is the 7th column); for questions answered in
    several rounds the last round's text is kept, as upstream does.

    Returns:
        The path of the spreadsheet.
    """
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("writing the MMBench submission needs pandas and openpyxl (pip install -e '.[eval]')") from None
    target = Path(upload_dir) / f"{experiment}.xlsx"
    answers = Path(result_dir) / f"{experiment}.jsonl"
    guard_outputs(inputs={"--annotation-file": annotation_file, "--result-dir answers": answers},
                  files={"--upload-dir spreadsheet": target})
    try:
        table = pd.read_table(annotation_file)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise UserError(f"--annotation-file {os.fspath(annotation_file)!r} is not a readable TSV table ({error})") from None
    if "index" not in table.columns:
        raise UserError(f"--annotation-file {os.fspath(annotation_file)!r} is not an MMBench table: it has no 'index' column "
                        f"(columns: {list(table.columns)[:8]})")
    upload = table.drop(columns=[column for column in _MMBENCH_DROPPED if column in table.columns])
    upload.insert(min(6, len(upload.columns)), "prediction", None)
    predictions: dict[Any, str] = {}
    # One line per question and round; upstream keeps the last round's text for a question.
    for answer in read_answers(answers, by_prompt=False):
        predictions[answer["question_id"]] = answer["text"]
    upload["prediction"] = [predictions.get(index) for index in table["index"]]
    report_missing("MMBench", [index.item() if hasattr(index, "item") else index for index in table["index"]], predictions,
                   "their prediction cell is left empty")
    with atomic_output(target, "wb") as handle:
        upload.to_excel(handle, index=False, engine="openpyxl")
    return target


def mmbench_main(argv: Sequence[str] | None = None) -> Path:
    parser = _parser("Write an MMBench (EN or CN) submission spreadsheet.")
    parser.add_argument("--annotation-file", type=str, required=True)
    parser.add_argument("--result-dir", type=str, required=True)
    parser.add_argument("--upload-dir", type=str, required=True)
    parser.add_argument("--experiment", type=str, required=True)
    args = parser.parse_args(argv)
    setup_logging()
    return convert_mmbench(args.annotation_file, args.result_dir, args.upload_dir, args.experiment)


__all__ = [
    "convert_gqa",
    "convert_mmbench",
    "convert_mmvet",
    "convert_seed",
    "convert_vizwiz",
    "convert_vqav2",
    "gqa_main",
    "mmbench_main",
    "mmvet_main",
    "score_seed",
    "seed_main",
    "vizwiz_main",
    "vqav2_main",
]
