"""MM-Vet: a GPT judge grades each answer from 0.0 to 1.0 against the ground truth; scores per capability.

Usage (the official MM-Vet evaluator's flags and file names)::

    export OPENAI_API_KEY=...                              # the judge's key (see llava.eval.judge)
    export OPENAI_BASE_URL=https://api.openai.com/v1       # optional: any OpenAI-compatible endpoint
    python scripts/convert_mmvet_for_eval.py --src answers/M.jsonl --dst playground/data/eval/mm-vet/results/M.json
    python -m llava.eval.eval_mmvet --mmvet_path playground/data/eval/mm-vet \
        --result_path playground/data/eval/mm-vet/results --model M [--num_run 5] [--output-json RESULTS/mmvet.json]

Inputs: ``MMVET_PATH/mm-vet.json`` (``{"v1_0": {"imagename", "capability": [...], "question", "answer"}, ...}``,
from MM-Vet's release) and ``RESULT_PATH/MODEL.json`` (``{"v1_0": "prediction", ...}``, what
``convert_mmvet_for_eval.py`` writes). ``--use_sub_set`` grades only the ids in ``MMVET_PATH/bard_set.json``.

Each question is one user message: the grading prompt, a newline, then the row
``question | ground truth | prediction | `` (``<AND>``/``<OR>`` in the ground truth padded with spaces), at
temperature 0 with at most 3 reply tokens. The first word of the reply must be a number in [0, 1]; otherwise the
question is asked again with a closing request for the number, 0.5 warmer each time (at most 2.0), and after
:data:`MAX_ATTEMPTS` unusable replies it scores 0.0, as in the official evaluator. The shipped prompt
(``llava/eval/table/mmvet_prompt.txt``) is our own wording of MM-Vet's rule with our own examples; for numbers
comparable with published MM-Vet scores pass the official evaluator's prompt with ``--prompt-file`` and its
judge with ``--gpt_model`` (default ``gpt-4-0613``, or ``$LLAVA_JUDGE_MODEL``). Each judge call has
``--judge-timeout`` seconds in all (see :mod:`llava.eval.judge`). Every output is checked (writable, not an
input) before the first judge call.

Outputs, in ``RESULT_PATH`` with the official names:

- ``MODEL_JUDGE-grade-Nruns.json``: ``{id: {"model": [...], "content": [...], "score": [...]}}``, one entry per run;
  rewritten after every grade, so a rerun resumes (more runs are added to the same questions). Grades paid for
  under another ``--num_run`` (``...-grade-Kruns.json`` with the same record) are reused, up to N per question, so
  ``--num_run 2`` after ``--num_run 1`` asks only for the second run (that file is left as it is); a damaged entry
  moves to ``...runs.json.rejected`` (named in the log) and is graded again, every intact one stays. A sidecar
  ``.meta.json`` records the judge, the prompt and the predictions; resuming after any of them changed is
  refused until ``--overwrite``.
- ``MODEL_[bardset_]JUDGE-cap-score-Nruns.csv``: per capability (most frequent first), ``total``, ``std`` (of the
  run totals) and ``runs`` (each run's total); ``...-cap-int-score-Nruns.csv``: the same per capability
  combination (most frequent first, named by joining the capabilities with ``_`` in the order the data lists
  them; the official evaluator joins them in Python's set order, which changes from run to run).
  A score is ``100 * sum(grades) / count``, averaged over runs and rounded to ``--decimal_places``.
- ``--output-json``: the total and all of the above for :mod:`llava.eval.summarize` (``mmvet.json``).
"""

from __future__ import annotations

import argparse
import csv
import glob
import hashlib
import io
import json
import logging
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llava.eval.files import read_json, require_keys, write_json, write_score, write_text
from llava.eval.judge import DEFAULT_TIMEOUT, JudgeClient, judge_from_env
from llava.eval.protocol import answers_protocol
from llava.eval.provenance import Provenance, file_digest
from llava.outputs import guard_outputs, rejected_path
from llava.utils import UserError, cli_main, setup_logging

logger = logging.getLogger(__name__)

DEFAULT_JUDGE = "gpt-4-0613"
PROMPT_FILE = Path(__file__).with_name("table") / "mmvet_prompt.txt"
MAX_TOKENS = 3
MAX_ATTEMPTS = 5
MAX_TEMPERATURE = 2.0  # the OpenAI API refuses warmer requests
NUDGE = "\nThe correctness score of the last row, as one number: "
SUBSET_FILE, SUBSET_TAG = "bard_set.json", "bardset_"


# ---------------------------------------------------------------------------------------------- grading


def grading_row(record: Mapping[str, Any], prediction: str) -> str:
    """The table row the judge completes: ``question | ground truth | prediction | ``."""
    truth = str(record["answer"]).replace("<AND>", " <AND> ").replace("<OR>", " <OR> ")
    return " | ".join([str(record["question"]), truth, prediction, ""])


def parse_correctness(reply: str) -> float | None:
    """The grade in the first word of ``reply`` if it is a number in [0, 1], else None."""
    words = reply.strip().split()
    if not words:
        return None
    try:
        value = float(words[0])
    except ValueError:
        return None
    return value if 0.0 <= value <= 1.0 else None


@dataclass(frozen=True)
class Grade:
    """One grading of one answer: the replying model, its reply and the grade."""

    model: str
    content: str
    score: float


def grade_answer(client: JudgeClient, prompt: str, record: Mapping[str, Any], prediction: str) -> Grade:
    """Ask the judge until it replies with a usable grade (see the module docstring)."""
    question = prompt + "\n" + grading_row(record, prediction)
    temperature = 0.0
    for attempt in range(MAX_ATTEMPTS):
        reply = client.chat([{"role": "user", "content": question}], max_tokens=MAX_TOKENS, temperature=temperature)
        score = parse_correctness(reply.text)
        if score is not None:
            return Grade(reply.model, reply.text.strip(), score)
        logger.warning("attempt %d: no grade in the judge's reply %r", attempt + 1, reply.text[:80])
        question = prompt + "\n" + grading_row(record, prediction) + NUDGE
        temperature = min(temperature + 0.5, MAX_TEMPERATURE)
    logger.warning("no usable grade after %d attempts; scoring 0.0", MAX_ATTEMPTS)
    return Grade(reply.model, reply.text.strip(), 0.0)


# ---------------------------------------------------------------------------------------------- inputs


def load_questions(mmvet_path: str, use_sub_set: bool) -> dict[str, dict[str, Any]]:
    """``mm-vet.json``'s records by id, in file order (only ``bard_set.json``'s ids with ``use_sub_set``)."""
    data = read_json(os.path.join(os.path.expanduser(mmvet_path), "mm-vet.json"), what="MM-Vet question file")
    if not isinstance(data, dict) or not data:
        raise UserError(f"{mmvet_path!r}/mm-vet.json must map question ids to records, as MM-Vet's release does")
    for qid, record in data.items():
        if not isinstance(record, dict):
            raise UserError(f"mm-vet.json: question {qid!r} is not an object")
        require_keys(record, ("question", "answer", "capability"), f"mm-vet.json question {qid!r}")
        caps = record["capability"]
        if not isinstance(caps, list) or not caps or not all(isinstance(cap, str) for cap in caps):
            raise UserError(f"mm-vet.json: question {qid!r} needs a non-empty list of capability names, got {caps!r}")
    if not use_sub_set:
        return data
    subset = read_json(os.path.join(os.path.expanduser(mmvet_path), SUBSET_FILE), what="MM-Vet subset file")
    if not isinstance(subset, (list, dict)) or not subset:
        raise UserError(f"{SUBSET_FILE} in {mmvet_path!r} lists no question ids, so there is nothing to grade; "
                        "restore MM-Vet's file or leave out --use_sub_set")
    unknown = [qid for qid in subset if qid not in data]
    if unknown:
        raise UserError(f"{SUBSET_FILE} names {len(unknown)} ids that mm-vet.json lacks (first: {unknown[0]!r})")
    return {qid: record for qid, record in data.items() if qid in subset}


def load_predictions(path: str, questions: Mapping[str, Any]) -> dict[str, str]:
    """The model's predictions by id; every question must have one (a text)."""
    predictions = read_json(path, what="MM-Vet results file")
    if not isinstance(predictions, dict):
        raise UserError(f"{path!r} must map question ids to predictions, as convert_mmvet_for_eval.py writes it")
    missing = [qid for qid in questions if qid not in predictions]
    if missing:
        raise UserError(f"{path!r} has no prediction for {len(missing)} of the {len(questions)} questions "
                        f"(first: {missing[0]!r}); finish the model's answers and convert them again")
    for qid in questions:
        if not isinstance(predictions[qid], str):
            raise UserError(f"{path!r}: the prediction for {qid!r} is not a text: {predictions[qid]!r}")
    extra = len(set(predictions) - set(questions))
    if extra:
        logger.warning("%d predictions in %s are for ids outside the graded questions; ignored", extra, path)
    return {qid: predictions[qid] for qid in questions}


# ---------------------------------------------------------------------------------------------- scores


def capability_columns(questions: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Capabilities, most frequent first (ties in order of first appearance)."""
    counts = Counter(cap for record in questions.values() for cap in dict.fromkeys(record["capability"]))
    return [cap for cap, _ in counts.most_common()]


def integration_groups(questions: Mapping[str, Mapping[str, Any]]) -> dict[str, frozenset[str]]:
    """Capability combinations by name, most frequent first (ties in order of first appearance)."""
    names: dict[frozenset[str], str] = {}
    counts: Counter[frozenset[str]] = Counter()
    for record in questions.values():
        key = frozenset(record["capability"])
        names.setdefault(key, "_".join(dict.fromkeys(record["capability"])))
        counts[key] += 1
    return {names[key]: key for key, _ in counts.most_common()}


def score_tables(questions: Mapping[str, Mapping[str, Any]], grades: Mapping[str, Mapping[str, Sequence[Any]]],
                 num_run: int, decimal_places: int) -> dict[str, Any]:
    """Per-capability and per-combination scores, their ``total``, ``std`` and the per-run totals.

    Each run's score of a group is ``100 * sum(grades) / count`` over the group's questions; a table cell is
    the mean over runs; ``std`` is the population standard deviation of the run totals.
    """
    if not questions:
        raise UserError("there are no MM-Vet questions to score")
    groups = {cap: (lambda caps, cap=cap: cap in caps) for cap in capability_columns(questions)}
    combos = {name: (lambda caps, key=key: frozenset(caps) == key) for name, key in integration_groups(questions).items()}
    totals = [100 * sum(grades[qid]["score"][run] for qid in questions) / len(questions) for run in range(num_run)]
    mean = sum(totals) / num_run
    std = math.sqrt(sum((total - mean) ** 2 for total in totals) / num_run)

    def table(members: Mapping[str, Any]) -> dict[str, float]:
        row = {}
        for name, member in members.items():
            ids = [qid for qid, record in questions.items() if member(record["capability"])]
            per_run = [100 * sum(grades[qid]["score"][run] for qid in ids) / len(ids) for run in range(num_run)]
            row[name] = round(sum(per_run) / num_run, decimal_places)
        return row

    summary = {"total": round(mean, decimal_places), "std": round(std, decimal_places),
               "runs": [round(total, decimal_places) for total in totals]}
    return {"capabilities": table(groups) | summary, "integrations": table(combos) | summary}


def table_csv(model: str, row: Mapping[str, Any]) -> str:
    """One table as the official evaluator's CSV: an index column holding the model, then the columns."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["", *row])
    writer.writerow([model, *(("[" + ", ".join(map(str, value)) + "]") if isinstance(value, list) else value for value in row.values())])
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------- the run



def _prompt(args: argparse.Namespace) -> str:
    """``--prompt``, else ``--prompt-file``'s text, else the shipped prompt."""
    if args.prompt is not None:
        return args.prompt
    path = Path(os.path.expanduser(args.prompt_file or PROMPT_FILE))
    if not path.is_file():
        raise UserError(f"--prompt-file {args.prompt_file!r} does not exist")
    return path.read_text(encoding="utf-8")


def _usable_grade_entry(entry: Any) -> bool:
    """Whether a grade-file entry is ``{"model": [...], "content": [...], "score": [...]}`` with one item per run."""
    if not isinstance(entry, dict):
        return False
    columns = [entry.get(key) for key in ("model", "content", "score")]
    if not all(isinstance(column, list) for column in columns) or len({len(column) for column in columns}) != 1:
        return False
    return all(isinstance(score, (int, float)) and not isinstance(score, bool) and 0.0 <= score <= 1.0
               for score in entry["score"])


def _read_grades(grade_file: Path) -> dict[str, dict[str, list[Any]]]:
    """The grades already paid for. A damaged entry moves to ``GRADE_FILE.rejected`` (its question is graded
    again); every intact entry stays."""
    if not grade_file.is_file():
        return {}
    grades = read_json(grade_file, what="MM-Vet grade file")
    if not isinstance(grades, dict):
        raise UserError(f"{os.fspath(grade_file)!r} is not an MM-Vet grade file; move it away or pass --overwrite to grade again")
    damaged = {qid: entry for qid, entry in grades.items() if not _usable_grade_entry(entry)}
    if damaged:
        rejected = rejected_path(grade_file)
        with open(rejected, "a", encoding="utf-8") as handle:
            for qid, entry in damaged.items():
                handle.write(json.dumps({"id": qid, "entry": entry}, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        grades = {qid: entry for qid, entry in grades.items() if qid not in damaged}
        write_json(grade_file, grades, indent=4)
        logger.warning("%d damaged grade(s) of %s moved to %s; those questions are graded again",
                       len(damaged), grade_file, rejected)
    return grades


def _intact_grades(grade_file: Path) -> dict[str, dict[str, list[Any]]]:
    """The usable entries of another run count's grade file, read without changing it (unreadable: none)."""
    try:
        grades = read_json(grade_file, what="MM-Vet grade file")
    except (OSError, ValueError):
        return {}
    return {qid: entry for qid, entry in grades.items() if _usable_grade_entry(entry)} if isinstance(grades, dict) else {}


def reuse_other_runs(out: "OutputFiles", producer: Mapping[str, Any], grades: dict[str, dict[str, list[Any]]],
                     num_run: int) -> int:
    """Add to ``grades`` the grades of the same questions paid for under another ``--num_run`` (the grade files
    ``MODEL_JUDGE-grade-Kruns.json`` beside ``out.grades`` whose record names the same judge, prompt and
    predictions), at most ``num_run`` per question; returns how many were added. Those files are only read."""
    stem = out.grades.name.rsplit("-grade-", 1)[0]
    added = 0
    for other in sorted(out.grades.parent.glob(glob.escape(stem) + "-grade-*runs.json")):
        if other == out.grades or not re.fullmatch(r"\d+", other.name[len(stem) + len("-grade-"):-len("runs.json")]):
            continue
        try:
            Provenance(other, producer, what="grade").check(has_answers=True)
        except UserError:
            continue  # graded by another judge, prompt or predictions: not this run's grades
        for qid, entry in _intact_grades(other).items():
            mine = grades.get(qid, {"model": [], "content": [], "score": []})
            if len(entry["score"]) > len(mine["score"]):
                grades[qid] = {key: list(entry[key][:num_run]) for key in ("model", "content", "score")}
                added += len(grades[qid]["score"]) - len(mine["score"])
        if added:
            logger.info("reusing %d grade(s) already paid for in %s", added, other)
    return added


@dataclass(frozen=True)
class OutputFiles:
    """Where one grading writes, with the official evaluator's names."""

    grades: Path
    capabilities: Path
    integrations: Path

    @classmethod
    def for_run(cls, args: argparse.Namespace, judge_model: str) -> "OutputFiles":
        folder, judge = Path(os.path.expanduser(args.result_path)), judge_model.replace("/", "-")
        stem = f"{args.model}_{SUBSET_TAG if args.use_sub_set else ''}{judge}"
        return cls(grades=folder / f"{args.model}_{judge}-grade-{args.num_run}runs.json",
                   capabilities=folder / f"{stem}-cap-score-{args.num_run}runs.csv",
                   integrations=folder / f"{stem}-cap-int-score-{args.num_run}runs.csv")


def _grade_missing(client: JudgeClient, prompt: str, questions: Mapping[str, Mapping[str, Any]], predictions: Mapping[str, str],
                   grades: dict[str, dict[str, list[Any]]], num_run: int, grade_file: Path,
                   on_first_write: Callable[[], None] | None = None) -> int:
    """Add the grades ``grades`` lacks, run by run, saving after each; returns how many were asked.

    ``on_first_write`` runs once, right after the first save (``--overwrite`` records its settings there).
    """
    asked = 0
    for run in range(num_run):
        for qid, question in questions.items():
            entry = grades.setdefault(qid, {"model": [], "content": [], "score": []})
            if len(entry["score"]) > run:
                continue
            grade = grade_answer(client, prompt, question, predictions[qid])
            for key in ("model", "content", "score"):
                entry[key].append(getattr(grade, key))
            write_json(grade_file, grades, indent=4)
            if asked == 0 and on_first_write is not None:
                on_first_write()
            asked += 1
    return asked


def grade_all(args: argparse.Namespace, client: JudgeClient) -> dict[str, Any]:
    """Grade every question ``args.num_run`` times (resuming), write the tables; returns the scores."""
    if args.num_run < 1 or not 0 <= args.decimal_places <= 6:
        raise UserError(f"--num_run must be at least 1 and --decimal_places within 0..6, got {args.num_run} and {args.decimal_places}")
    results_file = os.path.join(os.path.expanduser(args.result_path), f"{args.model}.json")
    question_file = os.path.join(os.path.expanduser(args.mmvet_path), "mm-vet.json")
    out = OutputFiles.for_run(args, client.model)
    # Every output checked before anything is read or a judge call is paid for (a read-only or full disk too).
    answers = getattr(args, "answers_file", None)
    guard_outputs(inputs={"--mmvet_path mm-vet.json": question_file, "--model results": results_file, "--answers-file": answers},
                  files={"grade file": out.grades, "score table": out.capabilities, "combination table": out.integrations,
                         "--output-json": args.output_json})
    protocol = answers_protocol(answers)  # a broken record stops before a judge call is paid for
    questions = load_questions(args.mmvet_path, args.use_sub_set)
    predictions = load_predictions(results_file, questions)
    prompt = _prompt(args)

    grades = {} if args.overwrite else _read_grades(out.grades)
    producer = {"endpoint": client.url, "judge_model": client.model, "max_tokens": MAX_TOKENS,
                "prompt": hashlib.sha256(prompt.encode()).hexdigest()[:16], "predictions": file_digest(results_file)}
    provenance = Provenance(out.grades, producer, output_flag="--result_path or --model", what="grade")
    if not args.overwrite:
        provenance.resume(has_answers=bool(grades))
        if reuse_other_runs(out, provenance.producer, grades, args.num_run):
            write_json(out.grades, grades, indent=4)  # kept under this run count's name before any call
    # --overwrite: the old grades and their record stay until the first new grade replaces them, so a judge that
    # fails at once leaves no new record next to old grades (a resume would take those for this run's)
    asked = _grade_missing(client, prompt, questions, predictions, grades, args.num_run, out.grades,
                           on_first_write=provenance.start if args.overwrite else None)
    logger.info("%d new grades in %s", asked, out.grades)

    scores = score_tables(questions, grades, args.num_run, args.decimal_places)
    for name, path in (("capabilities", out.capabilities), ("integrations", out.integrations)):
        text = table_csv(args.model, scores[name])
        write_text(path, text)
        print(f"{name} ({path.name}):\n{text}", end="")
    totals = scores["capabilities"]
    write_score(args.output_json, "mmvet", totals["total"], f"MM-Vet total, GPT judge {client.model}, mean of {args.num_run} runs",
                std=totals["std"], runs=totals["runs"], questions=len(questions), capabilities=scores["capabilities"],
                integrations=scores["integrations"], grade_file=os.fspath(out.grades),
                protocol=protocol)
    return scores


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.eval.eval_mmvet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mmvet_path", "--mmvet-path", required=True, help="folder with mm-vet.json (and bard_set.json)")
    parser.add_argument("--result_path", "--result-path", required=True, help="folder with MODEL.json; the grades and tables go here")
    parser.add_argument("--model", required=True, help="the results file's name without .json")
    parser.add_argument("--gpt_model", "--judge-model", dest="gpt_model", default=None, help=f"judge model (default: $LLAVA_JUDGE_MODEL or {DEFAULT_JUDGE})")
    parser.add_argument("--num_run", "--num-run", dest="num_run", type=int, default=1, help="gradings per answer (the MM-Vet paper uses 5)")
    parser.add_argument("--decimal_places", "--decimal-places", dest="decimal_places", type=int, default=1)
    parser.add_argument("--use_sub_set", "--use-sub-set", dest="use_sub_set", action="store_true", help="grade only the ids in bard_set.json")
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", default=None, help="the grading prompt itself")
    prompt.add_argument("--prompt-file", default=None, help="a file holding the grading prompt (default: the shipped one)")
    parser.add_argument("--openai_api_key", default=None, help="used when OPENAI_API_KEY is not set")
    parser.add_argument("--output-json", default=None, help="also write the scores for llava.eval.summarize (mmvet.json)")
    parser.add_argument("--answers-file", "--answers_file", dest="answers_file", default=None,
                        help="the answers MODEL.json was converted from: their record names the protocol in --output-json")
    parser.add_argument("--max-retries", type=int, default=6, help="retries of a rate-limited or failed call")
    parser.add_argument("--judge-timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds one judge call may take in all, however slowly the endpoint answers")
    parser.add_argument("--overwrite", action="store_true", help="grade everything again instead of resuming")
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    setup_logging()
    client = judge_from_env(args.gpt_model, DEFAULT_JUDGE, max_retries=args.max_retries, api_key=args.openai_api_key,
                            timeout=args.judge_timeout)
    return grade_all(args, client)


__all__ = ["DEFAULT_JUDGE", "Grade", "build_parser", "capability_columns", "grade_all", "grade_answer", "grading_row",
           "integration_groups", "load_predictions", "load_questions", "main", "parse_correctness", "score_tables", "table_csv"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
