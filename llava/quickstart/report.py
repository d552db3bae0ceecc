"""Scoring the quickstart's answers, counting prefill FLOPs, and writing the table, JSON and figure.

Accuracy is exact match after normalisation (lower case, surrounding whitespace and a trailing full stop
removed). Chance is the accuracy of guessing uniformly among a question type's possible answers, averaged
over the held-out questions. Prefill FLOPs are analytic (the cost engine, :mod:`llava.cost`, asking each compressor's plugin for its module's
count) for one image and the mean
held-out prompt; the accounting is printed with the table.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llava.eval.compare import Comparison, Run, compare
from llava.eval.compare import format_table as compare_table
from llava.eval.files import read_jsonl
from llava.eval.protocol import answers_protocol


def normalise(text: str) -> str:
    return text.strip().lower().rstrip(".").strip()


@dataclass
class Score:
    accuracy: float
    chance: float
    answered: int
    by_category: dict[str, float] = field(default_factory=dict)
    chance_by_category: dict[str, float] = field(default_factory=dict)


def score_answers(answers_file: str | os.PathLike[str], gold_file: str | os.PathLike[str]) -> Score:
    """Exact-match accuracy of an answers JSONL against the gold JSONL, overall and per question type.

    Raises:
        ValueError: If an answer's question id is not in the gold file, or a gold question is unanswered.
    """
    gold = {record["question_id"]: record for record in read_jsonl(gold_file, what="gold answers file")}
    answers = {record["question_id"]: record["text"] for record in read_jsonl(answers_file, what="answers file")}
    unknown = sorted(set(answers) - set(gold), key=str)
    missing = sorted(set(gold) - set(answers), key=str)
    if unknown or missing:
        raise ValueError(
            f"{os.fspath(answers_file)!r} does not match the gold answers: unknown ids {unknown[:5]}, unanswered ids {missing[:5]}"
        )
    hits: dict[str, list[bool]] = defaultdict(list)
    chances: dict[str, list[float]] = defaultdict(list)
    for question_id, record in gold.items():
        hits[record["category"]].append(normalise(answers[question_id]) == record["answer"])
        chances[record["category"]].append(record["chance"])
    everything = [hit for values in hits.values() for hit in values]
    all_chances = [value for values in chances.values() for value in values]
    return Score(
        accuracy=sum(everything) / len(everything),
        chance=sum(all_chances) / len(all_chances),
        answered=len(everything),
        by_category={category: sum(values) / len(values) for category, values in sorted(hits.items())},
        chance_by_category={category: sum(values) / len(values) for category, values in sorted(chances.items())},
    )


def prefill_flops(checkpoint_dir: str | os.PathLike[str], prompt_tokens: int, reducer: str | None = None) -> dict[str, Any]:
    """Analytic FLOPs of one image's prefill through a saved checkpoint (:func:`llava.cost.pipeline.checkpoint_prefill_flops`).

    Counted: the whole vision tower, the projector (compressor included, by its plugin's cost model), and the LLM
    over the visual tokens plus ``prompt_tokens`` text tokens; under an in-LLM ``reducer``, every LLM layer at its own
    token count (the count ``compare --reducer`` and the cost command's ``--reducer`` give).

    Returns:
        ``{"visual_tokens", "total", "vision", "compressor", "projector", "llm", "accounting"}``, and with ``reducer``
        its ``"per_layer"`` image tokens (``"64 x1, 32 x1"``).
    """
    from llava.cost.pipeline import checkpoint_prefill_flops

    return checkpoint_prefill_flops(checkpoint_dir, prompt_tokens, reducer=reducer)


@dataclass
class RunResult:
    """One projector's quickstart run, or an in-LLM reducer's answers on a trained checkpoint (``reducer``; no training)."""

    projector: str
    visual_tokens: int
    score: Score
    flops: dict[str, Any]
    seconds: dict[str, float]
    checkpoint: str
    answers: str
    reducer: str | None = None

    @property
    def name(self) -> str:
        """The row's name: the projector type, with the reducer it answered under (``mlp2x_gelu + mydrop_k1_r50``)."""
        return self.projector if self.reducer is None else f"{self.projector} + {self.reducer}"

    @property
    def wall_time(self) -> float:
        return sum(self.seconds.values())


#: The built-in projector every compressor is normalised by (upstream's ``mlp{N}x_gelu``: all visual tokens).
VANILLA_PATTERN = r"mlp\d+x_gelu"

#: The cost note of a reducer's row (its full accounting is in ``results.json``): the table states it once, not per row.
REDUCER_COST = ("FLOPs analytic under a reducer: every LLM layer at its own token count (the Tokens cell), the rest counted "
                "as for the other rows")

DETAIL_COLUMNS = ("projector", "accuracy", "chance", "train s", "eval s", "wall s")


def comparison(results: Sequence[RunResult]) -> Comparison:
    """The runs as :mod:`llava.eval.compare` rows: question types are the benchmarks, scores in %.

    Vanilla is the first ``mlp{N}x_gelu`` run without a reducer (else the first run). Latency is the held-out answering
    wall time per question (model load and batched generation included), not a prefill latency. A reducer's row is
    :class:`llava.eval.compare.Run`'s reducer row: it names the checkpoint's type and the reducer, and its Tokens cell
    gives the image tokens per LLM layer.
    """
    runs = [
        Run(
            name=r.name, scores={c: 100 * a for c, a in r.score.by_category.items()}, flops=float(r.flops["total"]),
            latency_ms=1000 * r.seconds.get("eval", 0.0) / max(r.score.answered, 1), tokens=r.visual_tokens,
            cost_source=f"FLOPs analytic ({r.flops['accounting']})" if r.reducer is None else REDUCER_COST,
            projector_type=None if r.reducer is None else r.projector, reducer=r.reducer, per_layer=r.flops.get("per_layer"),
            protocols=dict.fromkeys(r.score.by_category, answers_protocol(r.answers)),
        )
        for r in results
    ]
    vanilla = next((r.name for r in results if r.reducer is None and re.fullmatch(VANILLA_PATTERN, r.projector)), results[0].name)
    return compare(runs, vanilla)


def _details(results: Sequence[RunResult]) -> list[str]:
    rows = [DETAIL_COLUMNS]
    for r in results:
        train = r.seconds.get("stage1", 0.0) + r.seconds.get("stage2", 0.0)
        rows.append((r.name, f"{100 * r.score.accuracy:.1f}%", f"{100 * r.score.chance:.1f}%", f"{train:.0f}",
                     f"{r.seconds.get('eval', 0.0):.0f}", f"{r.wall_time:.0f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(DETAIL_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def format_table(results: Sequence[RunResult], skipped: Sequence[str] = ()) -> str:
    """The comparison table (:func:`llava.eval.compare.format_table`: per-type accuracy and its ratio to vanilla,
    Acc., prefill FLOPs, answering time per question, Pareto front), then overall accuracy, chance and times."""
    lines: list[str] = []
    if results:
        lines.append(compare_table(comparison(results)))
        lines.append("Lat. (ms) here: held-out answering wall time per question (model load + batched generation of 4 tokens).")
        lines.append("")
        lines.extend(_details(results))
        chance = results[0].score.chance_by_category
        lines.append("")
        lines.append("chance by question type: " + ", ".join(f"{c} {100 * v:.0f}%" for c, v in sorted(chance.items())))
        lines.append(f"held-out questions: {results[0].score.answered}")
    lines.extend(f"skipped: {note}" for note in skipped)
    return "\n".join(lines)


def write_results(path: str | os.PathLike[str], results: Sequence[RunResult], meta: dict[str, Any]) -> Path:
    """``results.json``: the run settings (``meta``) and every projector's numbers."""
    payload = {
        **meta,
        "runs": [{**asdict(result), "wall_time": result.wall_time} for result in results],
    }
    path = Path(path)
    path.write_text(json.dumps(payload, indent=2))
    return path


def _tokens(result: RunResult) -> str:
    """The image tokens of a run for a figure: per LLM layer under a reducer, else the count sent."""
    return result.flops.get("per_layer") or str(result.visual_tokens)


def plot_results(path: str | os.PathLike[str], results: Sequence[RunResult]) -> Path:
    """``quickstart.png``: accuracy per question type (with chance), and accuracy against prefill FLOPs; each run has
    one colour in both, named once in the legend below them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    categories = sorted({category for result in results for category in result.score.by_category})
    figure, (bars, cost) = plt.subplots(1, 2, figsize=(11, 4.5))
    width = 0.8 / max(len(results), 1)
    for index, result in enumerate(results):
        positions = [c + index * width for c in range(len(categories))]
        bars.bar(positions, [100 * result.score.by_category[c] for c in categories], width, color=f"C{index % 10}",
                 label=f"{result.name} ({_tokens(result)} tokens)")
        cost.scatter(result.flops["total"] / 1e6, 100 * result.score.accuracy, s=60, color=f"C{index % 10}")
    if results:
        chance = results[0].score.chance_by_category
        for c, category in enumerate(categories):
            bars.hlines(100 * chance[category], c - width / 2, c + width * (len(results) - 0.5), colors="black", linestyles="dashed")
        cost.axhline(100 * results[0].score.chance, color="black", linestyle="dashed", label="chance")
        cost.legend(fontsize=8)
    bars.set_xticks([c + width * (len(results) - 1) / 2 for c in range(len(categories))], categories, rotation=20)
    bars.set_ylabel("accuracy (%)  [dashed: chance]")
    bars.set_ylim(0, 100)
    bars.set_title("held-out accuracy by question type")
    cost.margins(x=0.3, y=0.15)
    cost.set_xlabel("prefill MFLOPs per image (analytic)")
    cost.set_ylabel("accuracy (%)")
    cost.set_title("accuracy vs. prefill compute")
    columns = min(max(len(results), 1), 3)
    figure.legend(*bars.get_legend_handles_labels(), loc="lower center", ncol=columns, fontsize=8)
    figure.tight_layout(rect=(0, 0.03 + 0.05 * math.ceil(len(results) / columns), 1, 1))
    path = Path(path)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


__all__ = [
    "RunResult",
    "VANILLA_PATTERN",
    "comparison",
    "Score",
    "format_table",
    "normalise",
    "plot_results",
    "prefill_flops",
    "score_answers",
    "write_results",
]
