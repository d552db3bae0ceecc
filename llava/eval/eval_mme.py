"""MME: convert an answers file to the MME tool's per-category files, then the perception/cognition scores.

Usage::

    # convert ./playground/data/eval/MME/answers/M.jsonl and score it (what scripts/v1_5/eval/mme.sh runs)
    python -m llava.eval.eval_mme --experiment M [--data-dir ./playground/data/eval/MME] [--output-json ...]
    # score an existing eval_tool/answers/M folder only (what MME's calculation.py does)
    python -m llava.eval.eval_mme --results_dir ./playground/data/eval/MME/eval_tool/answers/M

Conversion (upstream ``convert_answer_to_mme.py``): the question id is ``<category>/<image file>``; the
prompt loses "Answer the question using a single word or phrase.", gains " Please answer yes or no." (two
spaces where the benchmark file has two), and is looked up in ``MME_Benchmark_release_version`` for the
ground truth. Each ``eval_tool/answers/M/<category>.txt`` line is ``<image>.txt, question, gt, prediction``,
tab-separated. Unlike upstream, the two questions of an image are written next to each other even if the
answers file was merged from chunks in another order, and tabs/newlines in a prediction become spaces
(upstream would write a line the tool cannot split). Each image has two questions under one id, so answers are
told apart by ``question_id`` and ``prompt``, as upstream's converter pairs them: two answers to one question are
refused, naming both lines. A question of an answered category without an answer is reported and written with an
empty prediction, which counts as wrong (upstream's tool would pair the wrong lines); categories without any answer
are left out of the totals, with a warning. The category folder is written as a whole: it replaces the one of an
earlier run only when complete, and a category no longer answered does not linger in it.

Scoring (MME's ``calculation.py``): a prediction is "yes"/"no" if it is exactly that, else by whether its
first four characters contain "yes" (checked first) or "no", else "other" (wrong). Per task,
``score = 100 * (acc + acc_plus)`` where acc_plus is the share of images with both questions right.
Perception sums 10 tasks, cognition 4; the paper's MME number is their sum.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any, Sequence

from llava.constants import SHORT_ANSWER_PROMPT
from llava.eval.files import read_answers, report_missing, write_score
from llava.eval.protocol import answers_protocol
from llava.outputs import atomic_folder, guard_outputs
from llava.utils import UserError, cli_main, setup_logging

logger = logging.getLogger(__name__)

PERCEPTION = ("existence", "count", "position", "color", "posters", "celebrity", "scene", "landmark", "artwork", "OCR")
COGNITION = ("commonsense_reasoning", "numerical_calculation", "text_translation", "code_reasoning")
EVAL_TYPES = {"Perception": PERCEPTION, "Cognition": COGNITION}

BENCHMARK_FOLDER = "MME_Benchmark_release_version"
SHORT_ANSWER = SHORT_ANSWER_PROMPT
YES_NO = " Please answer yes or no."


def load_ground_truth(benchmark_dir: str | os.PathLike[str]) -> dict[tuple[str, str, str], str]:
    """Read ``{(category, <image>.txt, question): answer}`` from an MME release folder.

    A category folder either has ``images/`` and ``questions_answers_YN/`` or keeps images and ``.txt``
    files side by side; each ``.txt`` line is ``question<TAB>answer``.
    """
    root = Path(benchmark_dir)
    if not root.is_dir():
        raise UserError(f"MME benchmark folder {os.fspath(root)!r} does not exist; put MME's {BENCHMARK_FOLDER} there")
    truth: dict[tuple[str, str, str], str] = {}
    for category_dir in sorted(path for path in root.iterdir() if path.is_dir()):
        qa_dir = category_dir / "questions_answers_YN" if (category_dir / "images").is_dir() else category_dir
        for qa_file in sorted(qa_dir.glob("*.txt")):
            for number, line in enumerate(qa_file.read_text(encoding="utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                fields = line.strip().split("\t")
                if len(fields) != 2:
                    raise UserError(f"{os.fspath(qa_file)!r} line {number} is not 'question<TAB>answer'")
                truth[(category_dir.name, qa_file.name, fields[0])] = fields[1]
    return truth


def _mme_question(prompt: str, category: str, qa_file: str, truth: dict) -> str:
    if SHORT_ANSWER in prompt:
        prompt = prompt.replace(SHORT_ANSWER, "").strip()
    if "Please answer yes or no." not in prompt:
        prompt = prompt + YES_NO
        if (category, qa_file, prompt) not in truth:
            prompt = prompt.replace(YES_NO, " " + YES_NO)
    return prompt


def convert_answers(
    answers_file: str | os.PathLike[str], benchmark_dir: str | os.PathLike[str], output_dir: str | os.PathLike[str]
) -> dict[str, int]:
    """Write ``output_dir/<category>.txt`` for every category in the answers file (the folder as a whole).

    Returns:
        ``{category: number of lines written}``.

    Raises:
        UserError: If an answer's question is not in the benchmark's ground truth, or two answers are to one question.
    """
    truth = load_ground_truth(benchmark_dir)
    per_category: dict[str, dict[str, dict[str, str]]] = {}
    for answer in read_answers(answers_file, by_prompt=True):
        question_id = str(answer["question_id"])
        category = question_id.split("/")[0]
        qa_file = question_id.split("/")[-1].split(".")[0] + ".txt"
        question = _mme_question(answer["prompt"], category, qa_file, truth)
        if (category, qa_file, question) not in truth:
            raise UserError(
                f"answer {question_id!r}: question {question!r} is not in {category}/{qa_file} of the MME benchmark"
            )
        per_category.setdefault(category, {}).setdefault(qa_file, {})[question] = " ".join(answer["text"].replace("\t", " ").splitlines())
    expected = [key for key in truth if key[0] in per_category]
    answered = {(category, qa_file, question) for category, files in per_category.items()
                for qa_file, questions in files.items() for question in questions}
    missing = report_missing("MME", expected, answered, "they are written with an empty prediction and count as wrong")
    for category, qa_file, question in missing:
        per_category[category].setdefault(qa_file, {})[question] = ""
    written = {}
    with atomic_folder(output_dir, command="python -m llava.eval.eval_mme") as staging:
        for category, by_image in per_category.items():
            lines = ["\t".join((qa_file, question, truth[(category, qa_file, question)], prediction))
                     for qa_file, questions in by_image.items() for question, prediction in questions.items()]
            (staging / f"{category}.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            written[category] = len(lines)
    return written


def parse_pred_ans(prediction: str) -> str:
    """MME tool's reading of a (lower-cased) prediction: "yes", "no" or "other"."""
    if prediction in ("yes", "no"):
        return prediction
    head = prediction[:4]
    if "yes" in head:
        return "yes"
    if "no" in head:
        return "no"
    return "other"


def score_task(lines: Sequence[str], task: str = "task") -> dict[str, float]:
    """Score the lines of one ``<task>.txt`` file.

    Returns:
        ``{"acc", "acc_plus", "score", "images", "questions", "other"}``; acc and acc_plus in [0, 1],
        score = 100 * (acc + acc_plus).

    Raises:
        ValueError: On a malformed line, a ground truth other than yes/no, or an image without exactly
            two questions.
    """
    per_image: dict[str, list[bool]] = {}
    other = 0
    for number, line in enumerate(lines, start=1):
        fields = line.rstrip("\n").split("\t")
        if len(fields) != 4:
            raise UserError(f"MME {task}.txt line {number} has {len(fields)} tab-separated fields, expected 4")
        image, _question, truth, prediction = fields
        truth = truth.lower()
        if truth not in ("yes", "no"):
            raise UserError(f"MME {task}.txt line {number}: ground truth {truth!r} is not yes/no")
        parsed = parse_pred_ans(prediction.lower())
        other += parsed == "other"
        per_image.setdefault(image, []).append(parsed == truth)
    if not per_image:
        raise UserError(f"MME {task}.txt has no answers")
    for image, results in per_image.items():
        if len(results) != 2:
            raise UserError(f"MME {task}: image {image!r} has {len(results)} questions, expected 2")
    questions = sum(len(results) for results in per_image.values())
    acc = sum(sum(results) for results in per_image.values()) / questions
    acc_plus = sum(all(results) for results in per_image.values()) / len(per_image)
    return {
        "acc": acc, "acc_plus": acc_plus, "score": 100.0 * (acc + acc_plus),
        "images": len(per_image), "questions": questions, "other": other,
    }


def calculate(results_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Score every ``<task>.txt`` in ``results_dir``.

    Returns:
        ``{"Perception": float, "Cognition": float, "total": float, "tasks": {task: score_task(...)},
        "missing": [tasks without a file]}``.

    Raises:
        ValueError: If no task file is found.
    """
    root = Path(results_dir)
    tasks: dict[str, dict[str, float]] = {}
    totals: dict[str, float] = {}
    missing = []
    for eval_type, names in EVAL_TYPES.items():
        totals[eval_type] = 0.0
        for name in names:
            path = root / f"{name}.txt"
            if not path.is_file():
                missing.append(name)
                continue
            tasks[name] = score_task(path.read_text(encoding="utf-8").splitlines(), name)
            totals[eval_type] += tasks[name]["score"]
    if not tasks:
        raise UserError(f"no MME task files (<task>.txt) in {os.fspath(root)!r}")
    if missing:
        logger.warning("MME: no results for %s; the totals leave them out", ", ".join(missing))
    return {**totals, "total": sum(totals.values()), "tasks": tasks, "missing": missing}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", type=str, default=None, help="answers/<experiment>.jsonl under --data-dir")
    parser.add_argument("--data-dir", "--data_dir", dest="data_dir", default="./playground/data/eval/MME")
    parser.add_argument("--results_dir", "--results-dir", dest="results_dir", default=None)
    parser.add_argument("--output-json", "--output_json", dest="output_json", default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    setup_logging()
    if args.experiment is None and args.results_dir is None:
        raise UserError("give --experiment (convert and score) or --results_dir (score only)")
    results_dir, protocol = args.results_dir, None
    if args.experiment is not None:
        data_dir = Path(args.data_dir)
        results_dir = results_dir or data_dir / "eval_tool" / "answers" / args.experiment
        answers = data_dir / "answers" / f"{args.experiment}.jsonl"
        inputs = {"--experiment answers": answers, "--data-dir benchmark": data_dir / BENCHMARK_FOLDER}
        guard_outputs(inputs=inputs, files={"--output-json": args.output_json}, folders={"--results_dir": results_dir})
        protocol = answers_protocol(answers)  # a record that does not parse stops before anything is written
        written = convert_answers(answers, data_dir / BENCHMARK_FOLDER, results_dir)
        logger.info("wrote %d MME category files to %s", len(written), results_dir)
    else:
        guard_outputs(inputs={"--results_dir": results_dir}, files={"--output-json": args.output_json})
    result = calculate(results_dir)
    for eval_type in EVAL_TYPES:
        print(f"=========== {eval_type} ===========")
        print(f"total score: {result[eval_type]:.2f}\n")
        for name in EVAL_TYPES[eval_type]:
            if name in result["tasks"]:
                print(f"\t {name}  score: {result['tasks'][name]['score']:.2f}")
        print()
    print(f"MME total (perception + cognition): {result['total']:.2f}")
    return write_score(
        args.output_json, "mme", result["total"], "perception + cognition scores",
        perception=result["Perception"], cognition=result["Cognition"],
        tasks={name: task["score"] for name, task in result["tasks"].items()},
        missing=result["missing"], results_dir=os.fspath(results_dir), protocol=protocol,
    )


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
