"""The paper's Table-1 row for one run: eight benchmark scores and the Vanilla-normalised accuracy.

Usage::

    python -m llava.eval.summarize RESULTS_DIR [--baseline BASELINE_DIR | --baseline paper-vanilla]
        [--name my_run] [--output-json PATH] [--output-csv PATH]

``RESULTS_DIR`` layout: one JSON file per benchmark, written by the scorers' ``--output-json`` (the
``scripts/v1_5/eval/*.sh`` scripts write them to ``./playground/data/eval/results/$CKPT/``)::

    RESULTS_DIR/
      gqa.json          python -m llava.eval.eval_gqa ...         accuracy (%) on testdev-balanced
      mmbench.json      python -m llava.eval.eval_mmbench ...     MMBench-EN accuracy (%)
      mmbench_cn.json   python -m llava.eval.eval_mmbench --lang cn ...
      mme.json          python -m llava.eval.eval_mme ...         perception + cognition
      pope.json         python -m llava.eval.eval_pope ...        F1 x100, mean over the 3 splits
      sqa.json          python -m llava.eval.eval_science_qa ...  IMG-Accuracy (%)
      textvqa.json      python -m llava.eval.eval_textvqa ...     accuracy (%)
      mmvet.json        python -m llava.eval.eval_mmvet ... --output-json   MM-Vet total (GPT judge)
      seed.json         scripts/convert_seed_for_submission.py ... SEED-Bench image accuracy (%)   (not in Acc.)
      qbench.json       python -m llava.eval.eval_qbench ...      Q-Bench LLVisionQA dev (%)      (not in Acc.)
      qbench_zh.json    the same, Chinese instruction                                      (not in Acc.)

Each file is an object with at least ``"score"`` (other fields are kept as details). Benchmarks without a
file are shown as missing; SEED and Q-Bench are shown when present, after the Table-1 columns, and are not part of
Acc. (the paper's Acc. is over its eight benchmarks). Any other ``*.json`` in the folder (besides the summary's own
``summary.json`` and ``llava.eval.compare``'s ``cost.json``) is named in a warning as ignored. Instead of a folder,
``RESULTS_DIR`` (and ``--baseline``) may be one JSON file
mapping benchmark names to scores, e.g. ``{"gqa": 62.9, "MMB-EN": 65.5, "mme": {"score": 1785}}``;
names are the keys above or the column names below, in any case. ``--baseline paper-vanilla`` uses the
paper's Vanilla row (LLaVA-v1.5-7B, 576 tokens).

Acc. is the paper's Vanilla-normalised accuracy (appendix, eq. app_normalized_accuracy):
``100 / |B| * sum_b s_b / s_b^Vanilla`` over the benchmarks B that both runs have. The command prints the
table and writes it as JSON and CSV (by default ``summary.json``/``summary.csv`` in RESULTS_DIR, or next to
a results file).
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from llava.eval.files import atomic_output, guard_outputs, read_json, write_json
from llava.utils import cli_main, setup_logging

logger = logging.getLogger(__name__)

# Benchmark key -> Table-1 column name, in the table's order.
BENCHMARKS: dict[str, str] = {
    "gqa": "GQA",
    "mmbench": "MMB-EN",
    "mmbench_cn": "MMB-CN",
    "mme": "MME",
    "pope": "POPE-F1",
    "sqa": "SQA-IMG",
    "textvqa": "TextVQA",
    "mmvet": "MM-Vet",
}

# Score files the eval scripts write besides Table 1's: shown after its columns, never part of Acc.
EXTRA_BENCHMARKS: dict[str, str] = {
    "seed": "SEED-IMG",
    "qbench": "Q-Bench",
    "qbench_zh": "Q-Bench-ZH",
}

# JSON files a results folder may hold that are not scores: this command's output and compare's cost file.
NOT_SCORES = frozenset({"summary.json", "cost.json"})

# Other spellings accepted in score files.
_ALIASES = {
    "mmb": "mmbench", "mmb_en": "mmbench", "mmbench_en": "mmbench", "mmb-cn": "mmbench_cn", "mmb_cn": "mmbench_cn",
    "mmbench-cn": "mmbench_cn", "pope_f1": "pope", "scienceqa": "sqa", "sqa_img": "sqa", "vqa-t": "textvqa",
    "vqat": "textvqa", "mm-vet": "mmvet", "mme_all": "mme", "seed_img": "seed", "seed-bench": "seed", "q-bench": "qbench",
    "q-bench-zh": "qbench_zh",
}

#: The published row this project's plugins offer for normalising (``--baseline`` / ``--vanilla``); the scores come
#: from the plugin that declares it (:func:`published_scores`).
PAPER_BASELINE_NAME = "paper-vanilla"


def published_scores(name: str | os.PathLike[str]) -> dict[str, float] | None:
    """The scores an installed plugin publishes under ``name`` (e.g. ``paper-vanilla``), or ``None``."""
    from llava.model.multimodal_projector.plugins import reference_scores

    scores = reference_scores().get(os.fspath(name))
    return None if scores is None else {benchmark_key(key): float(value) for key, value in scores.items()}


def _published_row(source: str | os.PathLike[str]) -> dict[str, float] | None:
    """:func:`published_scores` for a ``RESULTS_DIR`` / ``--baseline`` value that is not an existing file or folder
    (a path is read as scores without importing the plugins, which costs seconds)."""
    if os.path.exists(os.path.expanduser(os.fspath(source))):
        return None
    return published_scores(source)


def benchmark_key(name: str) -> str:
    """Resolve a benchmark name (key, column name or alias, any case) to its key.

    Raises:
        ValueError: For an unknown name, listing the accepted keys.
    """
    lowered = name.strip().lower()
    known = {**BENCHMARKS, **EXTRA_BENCHMARKS}
    if lowered in known:
        return lowered
    for key, column in known.items():
        if lowered == column.lower():
            return key
    if lowered in _ALIASES:
        return _ALIASES[lowered]
    raise ValueError(f"unknown benchmark {name!r}; expected one of {', '.join(known)}")


def column_label(key: str) -> str:
    """The table column of a benchmark key (Table 1's name, or the extra benchmarks')."""
    return BENCHMARKS.get(key) or EXTRA_BENCHMARKS.get(key) or key


def ordered_benchmarks(score_sets: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every benchmark key in ``score_sets``: Table 1's in its order, then others in order of appearance."""
    seen = [key for scores in score_sets for key in scores]
    known = [*BENCHMARKS, *EXTRA_BENCHMARKS]
    return [key for key in known if key in seen] + list(dict.fromkeys(key for key in seen if key not in known))


def _score_value(value: Any, where: str) -> float:
    if isinstance(value, Mapping):
        if "score" not in value:
            raise ValueError(f"{where} has no 'score' field")
        value = value["score"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def score_files(folder: str | os.PathLike[str]) -> tuple[dict[str, Path], list[Path]]:
    """The score files of a results folder (``{key: <key>.json}``) and the other ``*.json`` files it ignores."""
    root = Path(folder)
    known = {*BENCHMARKS, *EXTRA_BENCHMARKS}
    files = {key: root / f"{key}.json" for key in [*BENCHMARKS, *EXTRA_BENCHMARKS] if (root / f"{key}.json").is_file()}
    ignored = sorted(path for path in root.glob("*.json") if path.stem not in known and path.name not in NOT_SCORES)
    return files, ignored


def load_records(source: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Read each benchmark's score record (``{"score", ...details}``) from a results folder, a JSON mapping, or a
    published row's name (``"paper-vanilla"``); a bare number in a mapping becomes ``{"score": number}``.

    A folder's other ``*.json`` files are named in a warning (see :func:`score_files`).

    Raises:
        FileNotFoundError: If the path does not exist.
        ValueError: On an unknown benchmark name or a non-numeric score.
    """
    published = _published_row(source)
    if published is not None:
        return {key: {"score": value} for key, value in published.items()}
    path = Path(source)
    if path.is_dir():
        files, ignored = score_files(path)
        if ignored:
            logger.warning("%s: ignored %s (not score files of %s)", path, ", ".join(p.name for p in ignored),
                           ", ".join(f"{key}.json" for key in [*BENCHMARKS, *EXTRA_BENCHMARKS]))
        named = {key: (read_json(file, what="score file"), os.fspath(file)) for key, file in files.items()}
    elif not path.is_file():
        raise FileNotFoundError(f"results {os.fspath(path)!r} is neither a folder nor a JSON file")
    else:
        mapping = read_json(path, what="scores file")
        if not isinstance(mapping, Mapping):
            raise ValueError(f"scores file {os.fspath(path)!r} must hold a JSON object of benchmark -> score")
        named = {benchmark_key(name): (value, f"{os.fspath(path)}[{name!r}]") for name, value in mapping.items()}
    return {key: {**(value if isinstance(value, Mapping) else {}), "score": _score_value(value, where)}
            for key, (value, where) in named.items()}


def load_scores(source: str | os.PathLike[str]) -> dict[str, float]:
    """The scores of :func:`load_records` (same sources, same errors)."""
    return {key: record["score"] for key, record in load_records(source).items()}


def input_files(source: str | os.PathLike[str] | None) -> list[Path]:
    """The files :func:`load_scores` reads for ``source`` (for the output guard); none for the paper's row."""
    if source is None or _published_row(source) is not None:
        return []
    path = Path(source)
    return list(score_files(path)[0].values()) if path.is_dir() else [path]


@dataclass
class Summary:
    """One Table-1 row: scores, the baseline's, per-benchmark ratios (%) and Acc."""

    name: str
    scores: dict[str, float]
    baseline_name: str | None = None
    baseline: dict[str, float] = field(default_factory=dict)
    relative: dict[str, float] = field(default_factory=dict)
    acc: float | None = None
    used: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "columns": BENCHMARKS,
            "extra_columns": {key: label for key, label in EXTRA_BENCHMARKS.items() if key in self.scores},
            "scores": self.scores,
            "baseline_name": self.baseline_name,
            "baseline": self.baseline,
            "relative": self.relative,
            "acc": self.acc,
            "benchmarks_in_acc": self.used,
            "missing": [key for key in BENCHMARKS if key not in self.scores],
        }


def normalized_accuracy(scores: Mapping[str, float], baseline: Mapping[str, float]) -> tuple[float, dict[str, float]]:
    """The paper's Acc.: ``100 * mean_b(s_b / s_b^baseline)`` over the Table-1 benchmarks both have (not
    :data:`EXTRA_BENCHMARKS`: the paper's Acc. is over its eight).

    Returns:
        ``(Acc., {benchmark: 100 * s_b / s_b^baseline})``.

    Raises:
        ValueError: If no benchmark is shared, or a baseline score is zero.
    """
    shared = [key for key in ordered_benchmarks([scores]) if key in baseline and key not in EXTRA_BENCHMARKS]
    if not shared:
        raise ValueError("the run and the baseline have no benchmark in common")
    relative = {}
    for key in shared:
        if baseline[key] == 0:
            raise ValueError(f"baseline score for {key!r} is 0; cannot normalise by it")
        relative[key] = 100.0 * scores[key] / baseline[key]
    return sum(relative.values()) / len(relative), relative


def run_name(results: str | os.PathLike[str]) -> str:
    """The default row label: a results folder's whole name (``llava-v1.5-7b``, whose ``.5-7b`` is no file
    suffix), a scores file's name without ``.json``."""
    path = Path(results)
    return (path.name if path.is_dir() else path.stem) or os.fspath(results)


def summarize(results: str | os.PathLike[str], baseline: str | os.PathLike[str] | None = None, name: str | None = None) -> Summary:
    """Build the row for ``results``, normalised by ``baseline`` when given."""
    scores = load_scores(results)
    if not scores:
        raise ValueError(f"no benchmark scores found in {os.fspath(results)!r} (expected files like gqa.json)")
    summary = Summary(name=name or run_name(results), scores=scores)
    if baseline is not None:
        summary.baseline_name = os.fspath(baseline)
        summary.baseline = load_scores(baseline)
        summary.acc, summary.relative = normalized_accuracy(scores, summary.baseline)
        summary.used = list(summary.relative)
        left_out = [key for key in BENCHMARKS if key not in summary.used]
        if left_out:
            logger.warning("Acc. is over %d benchmarks; missing: %s", len(summary.used), ", ".join(left_out))
    return summary


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _columns(summary: Summary) -> list[str]:
    """Table 1's benchmarks, then the extra ones the run has."""
    return [*BENCHMARKS, *(key for key in EXTRA_BENCHMARKS if key in summary.scores)]


def format_table(summary: Summary) -> str:
    """A Markdown table: the run's scores (and the baseline's, and the ratios) with Acc."""
    columns = _columns(summary)
    header = ["Method", *(column_label(key) for key in columns), "Acc."]
    rows = [[summary.name, *(_cell(summary.scores.get(key)) for key in columns), _cell(summary.acc)]]
    if summary.baseline_name is not None:
        rows.append([f"{summary.baseline_name} (baseline)", *(_cell(summary.baseline.get(key)) for key in columns), "100.0"])
        rows.append([f"{summary.name} / baseline (%)", *(_cell(summary.relative.get(key)) for key in columns), _cell(summary.acc)])
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    extra = [column_label(key) for key in columns if key in EXTRA_BENCHMARKS]
    if extra:
        lines.append(f"\n{', '.join(extra)}: shown, not in Acc. (the paper's Acc. is over its eight benchmarks).")
    return "\n".join(lines)


def write_csv(summary: Summary, path: str | os.PathLike[str]) -> None:
    """Write the rows of :func:`format_table` as CSV (unrounded numbers, empty cells for missing)."""
    columns = _columns(summary)
    with atomic_output(path) as handle:
        writer = csv.writer(handle, lineterminator="\r\n")
        writer.writerow(["row", *columns, "acc"])
        writer.writerow([summary.name, *(summary.scores.get(key, "") for key in columns), summary.acc if summary.acc is not None else ""])
        if summary.baseline_name is not None:
            writer.writerow(["baseline", *(summary.baseline.get(key, "") for key in columns), 100.0])
            writer.writerow(["relative_percent", *(summary.relative.get(key, "") for key in columns), summary.acc])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="results folder (one <benchmark>.json per benchmark) or a scores JSON")
    parser.add_argument("--baseline", default=None, help=f"baseline folder or JSON, or {PAPER_BASELINE_NAME!r}")
    parser.add_argument("--name", default=None, help="row label (default: the folder name)")
    parser.add_argument("--output-json", "--output_json", dest="output_json", default=None)
    parser.add_argument("--output-csv", "--output_csv", dest="output_csv", default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> Summary:
    args = build_parser().parse_args(argv)
    setup_logging()
    results = Path(args.results)
    # Suffixes are appended, not swapped in: with_suffix would cut a run name such as llava-v1.5-7b at its dot.
    stem = os.fspath(results / "summary" if results.is_dir() else results.with_name(f"{results.stem}_summary"))
    json_path = Path(args.output_json) if args.output_json else Path(stem + ".json")
    csv_path = Path(args.output_csv) if args.output_csv else Path(stem + ".csv")
    inputs = {f"results {path.name}": path for path in input_files(args.results)}
    inputs.update({f"--baseline {path.name}": path for path in input_files(args.baseline)})
    guard_outputs(inputs=inputs, files={"--output-json": json_path, "--output-csv": csv_path})
    summary = summarize(args.results, args.baseline, args.name)
    print(format_table(summary))
    write_json(json_path, summary.as_dict())
    write_csv(summary, csv_path)
    logger.info("wrote %s and %s", json_path, csv_path)
    return summary


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
