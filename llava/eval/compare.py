"""Compare projector types under one recipe: the paper's Table 1 (scores, Vanilla-normalised Acc., FLOPs,
latency) and an accuracy-vs-FLOPs figure with the Pareto front.

Usage::

    python -m llava.eval.compare \\
        --results vanilla=playground/data/eval/results/llava-v1.5-7b \\
        --results small=playground/data/eval/results/llava-v1.5-7b-k16 \\
        --checkpoint vanilla=checkpoints/llava-v1.5-7b --checkpoint small=checkpoints/llava-v1.5-7b-k16 \\
        --vanilla vanilla --out table.md --figure pareto.png [--json table.json] [--prompt-tokens 52] [--strict-protocol]

``--results NAME=PATH`` (repeatable; ``PATH`` alone names the run by its folder): a results folder as the
``scripts/v1_5/eval/*.sh`` scripts write it (``./playground/data/eval/results/$CKPT/<benchmark>.json``, each
``{"benchmark", "score", "metric", ...}`` from the scorers' ``--output-json``; MM-Vet's ``mmvet.json`` from
``llava.eval.eval_mmvet --output-json`` or by hand from another grader's total), or one JSON mapping benchmark →
score (:mod:`llava.eval.summarize`). SEED and Q-Bench (``seed.json``, ``qbench.json``, ``qbench_zh.json``) are
shown after the Table-1 columns and are not part of Acc.; any other ``*.json`` of a folder is named in a note as
ignored. Outputs are checked before anything is read: ``--out``, ``--json`` and ``--figure`` must be files that
are none of the inputs.

Cost per run, first found of:

1. ``--cost NAME=FILE``: JSON ``{"flops": <FLOPs per image>, "latency_ms": <ms>}`` (``"tflops"`` accepted);
2. ``cost.json`` in the run's results folder, same format;
3. ``--checkpoint NAME=DIR``: analytic FLOPs of one image's prefill from the checkpoint's ``config.json``,
   by the cost engine (:mod:`llava.cost`, which asks the projector type's own plugin), with
   ``--prompt-tokens`` text tokens; no latency. The row then also names the checkpoint's type
   (``NAME (mypool_k16)``), the name the cost tables and the demo panel give it. ``--projector-type NAME=TYPE``
   counts it with ``TYPE`` instead of the config's type, for a run evaluated with the loaders'
   ``--projector-type`` (a training-free compressor on that checkpoint); the row then names ``TYPE``.
   ``--reducer NAME=TYPE`` counts it with the in-LLM reducer ``TYPE``, for a run evaluated with the loaders'
   ``--reducer`` (its answers' ``.meta.json`` records it as ``"reducer"``): every LLM layer at its own token count
   (:mod:`llava.cost.reducer`, the count the cost command's ``--reducer`` prints, here with attention scores and the LM head
   on the last position like the other rows), on top of the projector's own (a compressor and a reducer both
   count). The row names both (``NAME (mlp2x_gelu + mydrop_k2_r50)``) and its Tokens cell gives the image tokens
   per layer (``576 x2, 288 x30``), never one averaged number. A cost file (1., 2.) still wins over the analytic
   count; the row then names the reducer and gives the file's numbers.

Protocol: rows are comparable only when measured the same way. The scorers copy each answers file's record
(``<answers>.meta.json``: conv mode, prompt flags, decoding, ``--projector-type``, ``--reducer``) into their score
file as ``"protocol"``, and MME's into perception and cognition; the table states per row the prompt format
(``vicuna_v1, greedy``) and MME's split (``MME P / C``), and checks each benchmark against the one recipe
:mod:`llava.eval.protocol` pins (that of ``scripts/v1_5/eval``: greedy decoding, SQA and MMBench's single-prediction
prompt, MMBench's language, MME as perception + cognition) and against the ``--vanilla`` run's conv mode and answer
length. A run that departs is marked ``†``, named in a note with what differs, and left off the Pareto front;
``--strict-protocol`` refuses it instead. A score file without the record (scored by hand or by another tool) is
shown as "not recorded". The records also name the method: a run answered with ``--reducer`` or
``--projector-type`` is counted with it without the flags here (a flag that disagrees is refused).

Acc. is the paper's Vanilla-normalised accuracy, ``100 / |B| · Σ_b s_b / s_b^Vanilla``, over the benchmarks the
run shares with ``--vanilla`` (a run name, or ``paper-vanilla`` for the paper's row). A run is on the Pareto
front when no other run has at most its FLOPs and at least its Acc. with one of them strictly better.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from llava.eval.files import atomic_output, guard_outputs, read_json, write_json, write_text
from llava.eval.protocol import method_of, mme_split, prompt_cell, recipe_text, row_differences
from llava.eval.summarize import (
    EXTRA_BENCHMARKS,
    PAPER_BASELINE_NAME,
    column_label,
    input_files,
    load_records,
    normalized_accuracy,
    ordered_benchmarks,
    published_scores,
    score_files,
)
from llava.utils import UserError, cli_main, setup_logging

logger = logging.getLogger(__name__)

COST_FILE = "cost.json"


@dataclass
class Run:
    """One projector type's results: benchmark scores and (optionally) its prefill cost.

    Attributes:
        name: Row label (e.g. the projector type).
        scores: ``{benchmark key: score}`` on the paper's scale (MME as a sum, others in %).
        flops: FLOPs of one image's full prefill, or ``None``.
        latency_ms: Prefill latency, or ``None``.
        tokens: Visual tokens sent to the LLM, or ``None``.
        cost_source: Where the cost came from (a file, a checkpoint's analytic count).
        projector_type: The checkpoint's ``mm_projector_type`` (its method's type, by the one name grammar), when
            known.
        reducer: The in-LLM reducer type the run was evaluated with (``--reducer``), or ``None``.
        per_layer: With a reducer, the image tokens per LLM layer (``"576 x2, 288 x30"``); ``tokens`` is then the
            count entering the LLM.
        protocols: Per benchmark, the protocol its answers were produced under (:mod:`llava.eval.protocol`), ``None``
            where the score file does not record it.
        mme: MME's perception, cognition and total, when the score file gives them.
    """

    name: str
    scores: dict[str, float]
    flops: float | None = None
    latency_ms: float | None = None
    tokens: int | None = None
    cost_source: str = ""
    ignored: list[str] = field(default_factory=list)
    projector_type: str | None = None
    reducer: str | None = None
    per_layer: str | None = None
    protocols: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    mme: dict[str, float] | None = None

    @property
    def label(self) -> str:
        """The row's name, with the checkpoint's type (and reducer) when it is not the name itself."""
        kinds = " + ".join(kind for kind in (self.projector_type, self.reducer) if kind is not None)
        return f"{self.name} ({kinds})" if kinds and kinds != self.name else self.name

    @property
    def tokens_cell(self) -> str:
        """The Tokens column: per LLM layer with a reducer, else the visual tokens sent."""
        if self.per_layer is not None:
            return self.per_layer
        return "-" if self.tokens is None else str(self.tokens)


@dataclass
class Comparison:
    """Runs normalised by one of them (or by the paper's Vanilla row)."""

    runs: list[Run]
    vanilla: str
    benchmarks: list[str]
    acc: dict[str, float | None] = field(default_factory=dict)
    relative: dict[str, dict[str, float]] = field(default_factory=dict)
    front: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Per run, where it departs from the pinned protocol (:func:`llava.eval.protocol.row_differences`).
    differences: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "vanilla": self.vanilla, "benchmarks": self.benchmarks, "columns": {k: column_label(k) for k in self.benchmarks},
            "runs": [{"name": r.name, "projector_type": r.projector_type, "reducer": r.reducer, "per_layer": r.per_layer,
                      "scores": r.scores, "relative": self.relative.get(r.name, {}),
                      "acc": self.acc.get(r.name),
                      "flops": r.flops, "latency_ms": r.latency_ms, "tokens": r.tokens, "cost_source": r.cost_source,
                      "prompt": prompt_cell(r.protocols), "protocols": r.protocols, "mme_split": r.mme,
                      "protocol_differences": self.differences.get(r.name, []),
                      "pareto": r.name in self.front} for r in self.runs],
            "notes": self.notes,
        }


# -- Pareto front ------------------------------------------------------------------------------------
def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points (cost, accuracy) that no other point dominates, by increasing cost.

    ``q`` dominates ``p`` when ``q.cost <= p.cost`` and ``q.acc >= p.acc`` with one strict. A sweep over the
    points sorted by cost (ties: higher accuracy first) keeps a point when its accuracy beats every cheaper
    point's, or equals the best so far at the same cost and accuracy (identical points dominate nothing).
    """
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    best: tuple[float, float] | None = None  # (cost, accuracy) of the last point kept
    for i in order:
        cost, acc = points[i]
        if best is None or acc > best[1] or (cost, acc) == best:
            front.append(i)
            best = (cost, acc)
    return front


# -- loading -----------------------------------------------------------------------------------------
def split_named(value: str) -> tuple[str, str]:
    """``NAME=PATH`` → ``(NAME, PATH)``; a bare ``PATH`` is named by its last component (without ``.json``)."""
    name, sep, path = value.partition("=")
    if not sep:
        path = value
        name = Path(value.rstrip("/")).name.removesuffix(".json")
    if not name or not path:
        raise UserError(f"--results/--cost/--checkpoint: expected NAME=PATH or PATH, got {value!r}")
    return name, path


def read_cost(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A cost file: ``{"flops" | "tflops", "latency_ms", "visual_tokens"?}``; returns ``{"flops", "latency_ms", "tokens"}``.

    Raises:
        ValueError: If it has neither FLOPs nor latency, or a value is not a finite number.
    """
    values = read_json(path, what="cost file")
    if not isinstance(values, Mapping):
        raise ValueError(f"cost file {os.fspath(path)!r} must hold a JSON object like {{\"flops\": 1.25e12, \"latency_ms\": 40.6}}")
    out: dict[str, Any] = {"flops": None, "latency_ms": None, "tokens": values.get("visual_tokens")}
    for key, target, scale in (("flops", "flops", 1.0), ("tflops", "flops", 1e12), ("latency_ms", "latency_ms", 1.0)):
        if key in values:
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"cost file {os.fspath(path)!r}: {key} must be a finite number >= 0, got {value!r}")
            out[target] = float(value) * scale
    if out["flops"] is None and out["latency_ms"] is None:
        raise ValueError(f"cost file {os.fspath(path)!r} has neither 'flops'/'tflops' nor 'latency_ms'")
    return out


def checkpoint_cost(checkpoint: str | os.PathLike[str], prompt_tokens: int, projector_type: str | None = None,
                    reducer: str | None = None) -> dict[str, Any]:
    """Analytic prefill FLOPs of a checkpoint (:func:`llava.cost.pipeline.checkpoint_prefill_flops`), with
    ``projector_type`` in place of its config's when given, and the LLM counted per layer under ``reducer``."""
    from llava.cost.pipeline import checkpoint_prefill_flops

    config = Path(checkpoint) / "config.json"
    if not config.is_file():
        raise UserError(f"checkpoint {os.fspath(checkpoint)!r} has no config.json")
    if not isinstance(read_json(config, what="checkpoint config"), Mapping):  # names the file when it does not parse
        raise UserError(f"checkpoint config {os.fspath(config)!r} must hold a JSON object")
    flops = checkpoint_prefill_flops(checkpoint, prompt_tokens, overwrite=None if projector_type is None else {"mm_projector_type": projector_type},
                                     reducer=reducer)
    return {"flops": float(flops["total"]), "latency_ms": None, "tokens": flops["visual_tokens"], "accounting": flops.get("accounting", ""),
            "projector_type": flops.get("projector_type"), "per_layer": flops.get("per_layer")}


def cost_file(results: str | os.PathLike[str], cost: str | None = None) -> Path | None:
    """The cost file :func:`load_run` reads for a run: ``--cost``, else the results folder's ``cost.json`` when it
    has one, else ``None`` (the one rule, for the reader and the output guard alike)."""
    if cost is not None:
        return Path(cost)
    local = Path(results) / COST_FILE
    return local if local.is_file() else None


def run_inputs(name: str, results: str | os.PathLike[str], cost: str | None = None, checkpoint: str | None = None) -> dict[str, Path]:
    """Every file :func:`load_run` reads for run ``name``, named for the output guard."""
    inputs = {f"--results {name} ({file.name})": file for file in input_files(results)}
    source = cost_file(results, cost)
    if source is not None:
        inputs[f"--cost {name}" if cost is not None else f"the cost file of run {name} ({COST_FILE})"] = source
    elif checkpoint is not None:
        inputs[f"--checkpoint {name} (config.json)"] = Path(checkpoint) / "config.json"
    return inputs


def load_run(name: str, results: str | os.PathLike[str], cost: str | None = None, checkpoint: str | None = None,
             prompt_tokens: int = 52, projector_type: str | None = None, reducer: str | None = None) -> Run:
    """A :class:`Run` from a results folder or scores JSON, with its cost and protocol (see the module docstring).

    The method the answers were produced with (their records' ``--projector-type`` and ``--reducer``) counts the
    cost when ``projector_type`` / ``reducer`` are not given, and must equal them when they are.
    """
    records = load_records(results)
    if not records:
        raise UserError(f"no benchmark scores found for run {name!r} in {os.fspath(results)!r} (expected files like gqa.json)")
    protocols = {key: record.get("protocol") if isinstance(record.get("protocol"), Mapping) else None
                 for key, record in records.items()}
    projector_type, reducer = _recorded_method(name, method_of(protocols), projector_type, reducer)
    run = Run(name=name, scores={key: record["score"] for key, record in records.items()}, reducer=reducer,
              protocols=protocols, mme=mme_split(records.get("mme")))  # named even when a cost file gives its cost
    if Path(results).is_dir():
        run.ignored = [path.name for path in score_files(results)[1]]
    source = cost_file(results, cost)
    if source is not None:
        values = read_cost(source)
        run.cost_source = os.fspath(source)
    elif checkpoint is not None:
        values = checkpoint_cost(checkpoint, prompt_tokens, projector_type, reducer)
        with_type = "" if projector_type is None else f" as {projector_type}"
        run.cost_source = f"analytic from {os.fspath(checkpoint)}{with_type}: {values['accounting']}"
        run.projector_type, run.per_layer = values["projector_type"], values["per_layer"]
    else:
        return run
    run.flops, run.latency_ms, run.tokens = values["flops"], values["latency_ms"], values.get("tokens")
    return run


def _recorded_method(name: str, recorded: Mapping[str, Any], projector_type: str | None,
                     reducer: str | None) -> tuple[str | None, str | None]:
    """The projector type and reducer a run is counted with: the flags', else its answers' records'."""
    from llava.model.reducers import NO_REDUCER

    out = []
    for flag, given, key in (("--projector-type", projector_type, "projector_type"), ("--reducer", reducer, "reducer")):
        found = recorded.get(key)
        found = None if found in (None, NO_REDUCER) else found
        if given is not None and found is not None and given != found:
            raise UserError(f"{flag} {name}={given} disagrees with run {name!r}'s answers, produced with {key} {found}; "
                            f"give {flag} {name}={found} or drop the flag")
        out.append(given if given is not None else found)
    return out[0], out[1]


# -- the comparison ----------------------------------------------------------------------------------
def compare(runs: Sequence[Run], vanilla: str, strict_protocol: bool = False) -> Comparison:
    """Normalise every run by ``vanilla`` (a run name or ``paper-vanilla``) and find the Pareto front.

    A run measured under another protocol than the pinned one (:mod:`llava.eval.protocol`; or than ``vanilla``'s on
    conv mode and answer length) is labelled and left off the front, or refused with ``strict_protocol``.

    Raises:
        ValueError: For duplicate run names or an unknown ``vanilla``.
        UserError: With ``strict_protocol``, for a run measured under another protocol.
    """
    names = [run.name for run in runs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UserError(f"run names must be unique, got {duplicates} more than once")
    published = published_scores(vanilla)
    if published is not None:
        reference = published
    elif vanilla in names:
        reference = runs[names.index(vanilla)].scores
    else:
        raise UserError(f"--vanilla {vanilla!r} is not one of the runs {names} nor {PAPER_BASELINE_NAME!r}")
    result = Comparison(runs=list(runs), vanilla=vanilla, benchmarks=ordered_benchmarks([r.scores for r in runs]))
    zero = [key for key, value in reference.items() if value == 0]
    if zero:  # a ratio to 0 is undefined: those benchmarks cannot enter anyone's Acc.
        result.notes.append(f"{', '.join(zero)} left out of Acc.: {vanilla} scored 0")
        reference = {key: value for key, value in reference.items() if value != 0}
    for run in runs:
        try:
            result.acc[run.name], result.relative[run.name] = normalized_accuracy(run.scores, reference)
        except ValueError as exc:
            result.acc[run.name] = None
            result.notes.append(f"{run.name}: no Acc. ({exc})")
            continue
        left_out = [key for key in result.benchmarks
                    if key not in result.relative[run.name] and key not in zero and key not in EXTRA_BENCHMARKS]
        if left_out:
            result.notes.append(f"{run.name}: Acc. over {len(result.relative[run.name])} benchmarks (missing {', '.join(left_out)})")
        if run.ignored:
            result.notes.append(f"{run.name}: ignored {', '.join(run.ignored)} (not benchmark score files)")
    extra = [column_label(key) for key in result.benchmarks if key in EXTRA_BENCHMARKS]
    if extra:
        result.notes.append(f"{', '.join(extra)} shown, not in Acc. (the paper's Acc. is over its Table-1 benchmarks)")
    _check_protocols(result, runs[names.index(vanilla)].protocols if vanilla in names else None, strict_protocol)
    placed = [run for run in runs if run.flops is not None and result.acc[run.name] is not None
              and not result.differences.get(run.name)]
    result.front = [placed[i].name for i in pareto_front([(run.flops, result.acc[run.name]) for run in placed])]
    return result


def _check_protocols(result: Comparison, reference: Mapping[str, Any] | None, strict: bool) -> None:
    """Fill ``result.differences`` and its notes; with ``strict``, refuse the first run that departs."""
    for run in result.runs:
        found = row_differences(run.protocols, run.mme, reference)
        if not found:
            continue
        if strict:
            raise UserError(f"run {run.name!r} was measured under another protocol ({'; '.join(found)}); answer it again "
                            "with the pinned recipe (scripts/v1_5/eval) or drop --strict-protocol to see it labelled")
        result.differences[run.name] = found
        result.notes.append(f"{run.name} †: another protocol, not on the Pareto front ({'; '.join(found)})")
    unknown = [run.name for run in result.runs if not run.protocols or any(p is None for p in run.protocols.values())]
    if unknown:
        result.notes.append(f"protocol not recorded for {', '.join(unknown)} (score files without the answers' record: "
                            "scored by hand, by another tool or before this was recorded)")
    result.notes.append(f"Protocol pinned: {recipe_text(result.benchmarks)}")


def _mme_cell(run: Run) -> str:
    if "mme" not in run.scores:
        return "-"
    if run.mme is None:
        return "not recorded"
    return f"{run.mme['perception']:.1f} / {run.mme['cognition']:.1f}"


def _flops_unit(values: Sequence[float]) -> tuple[float, str]:
    top = max(values, default=0.0)
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if top >= scale:
            return scale, suffix
    return 1.0, ""


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _score_cell(score: float | None, relative: float | None) -> str:
    if score is None:
        return "-"
    text = f"{score:.0f}" if score >= 1000 else f"{score:.1f}"
    return text if relative is None else f"{text} ({relative:.1f}%)"


def format_table(result: Comparison) -> str:
    """A Markdown table in the paper's layout: per-benchmark score (ratio to Vanilla), Acc., FLOPs, latency."""
    scale, unit = _flops_unit([r.flops for r in result.runs if r.flops is not None])
    columns = [(column_label(k), k) for k in result.benchmarks]
    if "mme" in result.benchmarks:  # the split right after the MME score
        at = result.benchmarks.index("mme") + 1
        columns[at:at] = [("MME P / C", None)]
    header = ["Method", "Tokens", "Prompt", *(label for label, _ in columns), "Acc. (%)", f"FLOPs ({unit or '1'})", "Lat. (ms)",
              "Pareto"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(header) - 3)) + "|"]
    for run in result.runs:
        relative = result.relative.get(run.name, {})
        cells = [
            run.label + (" †" if result.differences.get(run.name) else ""), run.tokens_cell, prompt_cell(run.protocols),
            *(_mme_cell(run) if k is None else _score_cell(run.scores.get(k), relative.get(k)) for _, k in columns),
            _number(result.acc.get(run.name)), "-" if run.flops is None else f"{run.flops / scale:.3g}",
            _number(run.latency_ms, 2), "yes" if run.name in result.front else "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Acc.: Vanilla-normalised accuracy against {result.vanilla!r}, 100/|B| · Σ s_b / s_b^Vanilla.")
    sources = sorted({r.cost_source for r in result.runs if r.cost_source})
    if sources:
        lines.append("Cost: " + "; ".join(sources) + ".")
    lines.extend(f"Note: {note}." for note in result.notes)
    return "\n".join(lines)


def plot_pareto(path: str | os.PathLike[str], result: Comparison, *, xlabel: str = "prefill FLOPs per image") -> Path:
    """PNG: Acc. against FLOPs (log scale when they span more than 10x), the Pareto front as a step line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    placed = [r for r in result.runs if r.flops is not None and result.acc.get(r.name) is not None]
    if not placed:
        raise UserError("no run has both FLOPs and Acc.; give costs with --cost, cost.json or --checkpoint")
    scale, unit = _flops_unit([r.flops for r in placed])
    figure, axes = plt.subplots(figsize=(6.5, 4.5))
    for run in placed:
        on_front = run.name in result.front
        axes.scatter(run.flops / scale, result.acc[run.name], s=70 if on_front else 40, marker="o" if on_front else "x",
                     color="tab:red" if on_front else "tab:gray", zorder=3)
        axes.annotate(run.name, (run.flops / scale, result.acc[run.name]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    front = [next(r for r in placed if r.name == name) for name in result.front]
    axes.step([r.flops / scale for r in front], [result.acc[r.name] for r in front], where="post", color="tab:red",
              label="Pareto front", zorder=2)
    flops = [r.flops for r in placed]
    if min(flops) > 0 and max(flops) / min(flops) > 10:
        axes.set_xscale("log")
    axes.set_xlabel(f"{xlabel} ({unit}FLOPs)")
    axes.set_ylabel(f"Acc. (% of {result.vanilla})")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    axes.margins(x=0.15, y=0.1)
    figure.tight_layout()
    path = Path(path)
    try:
        with atomic_output(path, "wb") as handle:
            figure.savefig(handle, dpi=120, format="png")
    finally:
        plt.close(figure)
    return path


# -- command line ------------------------------------------------------------------------------------
def _named(values: Sequence[str] | None, flag: str, runs: Sequence[str]) -> dict[str, str]:
    out = dict(split_named(v) for v in values or [])
    unknown = sorted(set(out) - set(runs))
    if unknown:
        raise UserError(f"{flag} names {unknown}, which are not runs given with --results ({list(runs)})")
    return out


def _reducers(reducers: dict[str, str], checkpoints: Mapping[str, str]) -> dict[str, str]:
    """``--reducer NAME=TYPE`` checked before anything is read: a run with a checkpoint, a known reducer type."""
    from llava.model.reducers import NO_REDUCER, resolve_reducer

    for name, reducer in reducers.items():
        if name not in checkpoints:
            raise UserError(f"--reducer {name}={reducer}: run {name!r} has no --checkpoint to count it on; add --checkpoint {name}=DIR")
        if reducer != NO_REDUCER:
            resolve_reducer(reducer)  # an unknown type is one sentence
    return {name: reducer for name, reducer in reducers.items() if reducer != NO_REDUCER}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.eval.compare", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", action="append", required=True, metavar="NAME=PATH",
                        help="a results folder (scripts/v1_5/eval) or scores JSON per run; repeat per run")
    parser.add_argument("--vanilla", required=True, help=f"the run to normalise by, or {PAPER_BASELINE_NAME!r}")
    parser.add_argument("--cost", action="append", metavar="NAME=FILE", help='cost JSON {"flops", "latency_ms"} of a run')
    parser.add_argument("--checkpoint", action="append", metavar="NAME=DIR", help="checkpoint whose config.json gives analytic FLOPs")
    parser.add_argument("--projector-type", "--projector_type", dest="projector_types", action="append", metavar="NAME=TYPE",
                        help="count run NAME's --checkpoint with this projector type (as the loaders' --projector-type ran it)")
    parser.add_argument("--reducer", dest="reducers", action="append", metavar="NAME=TYPE",
                        help="count run NAME's --checkpoint with this in-LLM reducer, per layer (as the loaders' --reducer ran it)")
    parser.add_argument("--prompt-tokens", "--prompt_tokens", type=int, default=52,
                        help="text tokens besides the visual ones for --checkpoint FLOPs (default %(default)s, the paper's fit)")
    parser.add_argument("--strict-protocol", "--strict_protocol", dest="strict_protocol", action="store_true",
                        help="refuse a run measured under another protocol instead of labelling it")
    parser.add_argument("--out", default=None, help="write the Markdown table here")
    parser.add_argument("--json", default=None, help="write the table's numbers as JSON here")
    parser.add_argument("--figure", default=None, help="write the Acc.-vs-FLOPs PNG here")
    return parser


def main(argv: Sequence[str] | None = None) -> Comparison:
    args = build_parser().parse_args(argv)
    setup_logging()
    if args.prompt_tokens < 0:
        raise UserError(f"--prompt-tokens must be 0 or more text tokens, got {args.prompt_tokens}")
    named = [split_named(v) for v in args.results]
    names = [name for name, _ in named]
    costs = _named(args.cost, "--cost", names)
    checkpoints = _named(args.checkpoint, "--checkpoint", names)
    types = _named(args.projector_types, "--projector-type", names)
    for name, projector_type in types.items():
        from llava.eval.core import override_settings

        if name not in checkpoints:
            raise UserError(f"--projector-type {name}={projector_type}: run {name!r} has no --checkpoint to count it on; add --checkpoint {name}=DIR")
        override_settings(projector_type)  # an unknown type is one sentence
    reducers = _reducers(_named(args.reducers, "--reducer", names), checkpoints)
    inputs: dict[str, Any] = {}
    for name, path in named:
        inputs.update(run_inputs(name, path, costs.get(name), checkpoints.get(name)))
    inputs.update({f"--checkpoint {name}": path for name, path in checkpoints.items()})
    guard_outputs(inputs=inputs, files={"--out": args.out, "--json": args.json, "--figure": args.figure})
    runs = [load_run(name, path, costs.get(name), checkpoints.get(name), args.prompt_tokens, types.get(name),
                     reducers.get(name)) for name, path in named]
    result = compare(runs, args.vanilla, strict_protocol=args.strict_protocol)
    table = format_table(result)
    if args.figure:
        plot_pareto(args.figure, result)
    print(table)
    if args.out:
        write_text(args.out, table + "\n")
    if args.json:
        write_json(args.json, result.as_dict())
    for path in (args.out, args.json, args.figure):
        if path:
            logger.info("wrote %s", path)
    return result


if __name__ == "__main__":
    raise SystemExit(cli_main(main))


__all__ = [
    "Comparison", "Run", "compare", "cost_file", "format_table", "load_run", "main", "pareto_front", "plot_pareto", "read_cost",
    "run_inputs", "split_named",
]
