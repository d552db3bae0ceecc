"""The three ``braco cost`` tables as data (for ``--json``) and as text.

(a) full-pipeline prefill FLOPs, vanilla vs each budget (paper Table 1's FLOPs column);
(b) the compressor per paper step, official computation next to ours (paper ``tab:app_stage_flops``);
(c) the compressor at the pre- and post-projector boundary (paper ``tab:main_compressor_cost``).
"""

from __future__ import annotations

from typing import Any, Iterable

from llava.cost.flops import projector_flops, total
from llava.cost.pipeline import Accounting
from llava.cost.presets import InputSpec, PipelineSpec
from llava.cost.video import Video

from ..config import BRACO_BUDGETS, BracoConfig
from . import paper
from .coder_flops import check_allocation, compressor_flops
from .pipeline import pipeline_cost, prompt_range

__all__ = ["unit_for", "pipeline_table", "stage_table", "boundary_table", "format_pipeline", "format_stages", "format_boundary"]


def _paper_key(cfg: BracoConfig) -> str | None:
    """``c3s7`` when ``cfg`` is the paper's allocation for its budget (same C, S and coordinates), else ``None``."""
    budget = BRACO_BUDGETS.get(cfg.output_tokens)
    if budget is None or (cfg.cutoff, cfg.residual_tokens) != budget[:2] or cfg.resolved_coordinates != budget[2]:
        return None
    return f"c{cfg.cutoff}s{cfg.residual_tokens}"


def _paper_boundary(cfg: BracoConfig) -> dict[str, float]:
    """The paper's module-level GFLOPs for ``cfg`` (budget tables, or the residual-only ablation table)."""
    key = _paper_key(cfg)
    if key is not None:
        return paper.BOUNDARY_GFLOPS.get(key, {})
    short = f"c{cfg.cutoff}s{cfg.residual_tokens}"
    if short in paper.RESIDUAL_ONLY_GFLOPS and cfg.resolved_coordinates == "coef":
        return {"pre": paper.RESIDUAL_ONLY_GFLOPS[short]}
    return {}


def unit_for(values: Iterable[float]) -> tuple[float, str]:
    """Scale and suffix (T, G, M, K) that show the largest of ``values`` with a leading digit."""
    top = max(values, default=0)
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if top >= scale:
            return scale, suffix
    return 1.0, ""


def _dev(got: float, ref: float | None) -> float | None:
    if ref is None:
        return None
    if ref == 0:
        return 0.0 if got == 0 else None
    return got / ref - 1


def _grids(spec: PipelineSpec, inputs: Iterable[InputSpec]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for inp in inputs:
        if spec.grid(inp) not in out:
            out.append(spec.grid(inp))
    return out


# -- (a) pipeline ------------------------------------------------------------------------------------
def pipeline_table(
    spec: PipelineSpec, inputs: Iterable[InputSpec], allocations: list[BracoConfig], acc: Accounting,
    *, llm_layers: int | None = None, vision_layers: int | None = None, video: Video | None = None,
) -> list[dict[str, Any]]:
    """Rows of table (a), one image per row, or one video of ``video.frames`` frames (``inputs`` are then frames;
    the paper's Table 1 is per image, so video rows have no paper column)."""
    ours_acc = Accounting(**{**acc.to_dict(), "computation": "ours"})
    rows = []
    for inp in inputs:
        refs = paper.pipeline_tflops(spec.name, inp.label) if video is None else {}
        for alloc in [None, *allocations]:
            cost = pipeline_cost(spec, inp, alloc, acc, llm_layers=llm_layers, vision_layers=vision_layers, video=video)
            ours = pipeline_cost(spec, inp, alloc, ours_acc, llm_layers=llm_layers, vision_layers=vision_layers, video=video)
            ref = refs.get("vanilla") if alloc is None else (refs.get(alloc.output_tokens) if _paper_key(alloc) else None)
            rows.append({
                "input": inp.label, "views": inp.views, **cost.to_dict(), "total_ours": ours.total,
                "paper_tflops": ref, "deviation": _dev(cost.total / 1e12, ref),
            })
    return rows


def format_pipeline(
    rows: list[dict[str, Any]], spec: PipelineSpec, inputs: Iterable[InputSpec], acc: Accounting, video: Video | None = None
) -> str:
    big, bu = unit_for(r["total"] for r in rows)
    small, su = unit_for([r["compressor"] for r in rows] + [r["projector"] for r in rows])
    what = "one image" if video is None else f"one video of {video.frames} frames"
    lines = [
        f"(a) full-pipeline prefill FLOPs, {what} ({spec.name}: {spec.description})",
        f"    accounting: {acc.describe()}",
        *([f"    rows are {video.describe()}; input = tokens per frame"] if video is not None else []),
        f"{'input':>6} {'method':<22} {'vis.tok':>7} {'LLM tok':>7} {'vision ' + bu:>9} {'compr. ' + su:>9} {'proj. ' + su:>8} "
        f"{'LLM ' + bu:>8} {'total ' + bu:>8} {'ours ' + bu:>8} {'paper T':>8} {'dev':>7}",
    ]
    for r in rows:
        paper_t = f"{r['paper_tflops']:.2f}" if r["paper_tflops"] is not None else "-"
        dev = f"{r['deviation']:+.2%}" if r["deviation"] is not None else "-"
        lines.append(
            f"{r['input']:>6} {r['label']:<22} {r['visual_tokens']:>7} {r['llm_tokens']:>7} {r['vision'] / big:>9.3f} "
            f"{r['compressor'] / small:>9.3f} {r['projector'] / small:>8.2f} {r['llm'] / big:>8.3f} {r['total'] / big:>8.3f} "
            f"{r['total_ours'] / big:>8.3f} {paper_t:>8} {dev:>7}"
        )
    for inp in inputs if video is None else ():  # the paper's prompt fit is for its image rows
        span = prompt_range(spec, inp, acc)
        if paper.pipeline_tflops(spec.name, inp.label):
            what = f"prompt lengths {span[0]}-{span[1]} keep" if span else "no prompt length keeps"
            lines.append(f"    input {inp.label}: {what} every paper row within 2% under this accounting")
    return "\n".join(lines)


# -- (b) stages --------------------------------------------------------------------------------------
def stage_table(spec: PipelineSpec, inputs: Iterable[InputSpec], allocations: list[BracoConfig]) -> list[dict[str, Any]]:
    dim, rows = spec.mm_hidden, []
    for grid in _grids(spec, inputs):
        for alloc in allocations:
            check_allocation(alloc, grid, f"budget {alloc.output_tokens} ({alloc.name})")
            official = compressor_flops(alloc, dim, grid, "official")
            ours = compressor_flops(alloc, dim, grid, "ours")
            ref = paper.STAGE_MFLOPS.get(_paper_key(alloc) or "") if (dim, grid) == paper.MODULE_SETTING else None
            rows.append({
                "grid": list(grid), "dim": dim, "allocation": alloc.name,
                "official": official, "ours": ours,
                "official_steps": [total(official[f"step{i}"]) for i in range(1, 5)],
                "ours_steps": [total(ours[f"step{i}"]) for i in range(1, 5)],
                "paper_mflops": list(ref) if ref else None,
            })
    return rows


def format_stages(rows: list[dict[str, Any]]) -> str:
    lines = [
        "(b) compressor per paper step, MFLOP per image (1 basis, 2 embedding, 3 coordinates, 4 residual); "
        "ours: eval mode, embedding cached",
        f"{'grid':>7} {'alloc':<10} {'computation':<11} {'step 1':>9} {'step 2':>9} {'step 3':>8} {'step 4':>10} {'total':>10}",
    ]
    for r in rows:
        grid = f"{r['grid'][0]}x{r['grid'][1]}"
        for kind in ("official", "ours"):
            steps = r[f"{kind}_steps"]
            lines.append(
                f"{grid:>7} {r['allocation']:<10} {kind:<11} " + " ".join(f"{v / 1e6:>{w}.3f}" for v, w in zip(steps, (9, 9, 8, 10)))
                + f" {sum(steps) / 1e6:>10.3f}"
            )
        if r["paper_mflops"]:
            ref = r["paper_mflops"]
            devs = [_dev(o / 1e6, p) for o, p in zip(r["official_steps"], ref)]
            lines.append(f"{grid:>7} {r['allocation']:<10} {'paper':<11} " + " ".join(f"{v:>{w}.3f}" for v, w in zip(ref, (9, 9, 8, 10)))
                         + f" {sum(ref):>10.3f}")
            lines.append(f"{'':>7} {'':<10} {'off./paper':<11} " + " ".join(
                f"{('-' if d is None else f'{d:+.2%}'):>{w}}" for d, w in zip(devs, (9, 9, 8, 10))))
    return "\n".join(lines)


# -- (c) boundary ------------------------------------------------------------------------------------
def boundary_table(spec: PipelineSpec, inputs: Iterable[InputSpec], allocations: list[BracoConfig]) -> list[dict[str, Any]]:
    dim, hidden, rows = spec.mm_hidden, spec.lm_dims.hidden, []
    for grid in _grids(spec, inputs):
        for alloc in allocations:
            check_allocation(alloc, grid, f"budget {alloc.output_tokens} ({alloc.name})")
            mlp = total(projector_flops(alloc.output_tokens, dim, hidden, spec.projector_depth))
            official = total(compressor_flops(alloc, dim, grid, "official"))
            ours = total(compressor_flops(alloc, dim, grid, "ours"))
            ref = _paper_boundary(alloc) if (dim, grid) == paper.MODULE_SETTING else {}
            rows.append({
                "grid": list(grid), "allocation": alloc.name, "tokens": alloc.output_tokens, "mlp": mlp,
                "official_pre": official, "official_post": official + mlp, "ours_pre": ours, "ours_post": ours + mlp,
                "paper_pre": ref.get("pre"), "paper_post": ref.get("post"),
                "deviation_pre": _dev(official / 1e9, ref.get("pre")), "deviation_post": _dev((official + mlp) / 1e9, ref.get("post")),
            })
    return rows


def format_boundary(rows: list[dict[str, Any]], spec: PipelineSpec) -> str:
    scale, unit = unit_for(r["official_post"] for r in rows)
    lines = [
        f"(c) compressor at the projector boundary, {unit}FLOP per image (post = pre + mlp{spec.projector_depth}x_gelu on the K tokens)",
        f"{'grid':>7} {'alloc':<10} {'K':>3} {'MLP(K)':>7} {'off. pre':>9} {'off. post':>9} {'ours pre':>9} {'ours post':>9} "
        f"{'paper pre':>9} {'paper post':>10} {'dev pre':>8} {'dev post':>8}",
    ]
    for r in rows:
        def fmt(v, w, pct=False):
            if v is None:
                return f"{'-':>{w}}"
            return f"{v:>+{w}.2%}" if pct else f"{v:>{w}.3f}"

        grid = f"{r['grid'][0]}x{r['grid'][1]}"
        ref_scale = 1e9 / scale  # paper values are GFLOP
        lines.append(
            f"{grid:>7} {r['allocation']:<10} {r['tokens']:>3} {r['mlp'] / scale:>7.3f} "
            f"{r['official_pre'] / scale:>9.3f} {r['official_post'] / scale:>9.3f} {r['ours_pre'] / scale:>9.3f} {r['ours_post'] / scale:>9.3f} "
            f"{fmt(None if r['paper_pre'] is None else r['paper_pre'] * ref_scale, 9)} "
            f"{fmt(None if r['paper_post'] is None else r['paper_post'] * ref_scale, 10)} "
            f"{fmt(r['deviation_pre'], 8, True)} {fmt(r['deviation_post'], 8, True)}"
        )
    for r in rows:
        if r["paper_pre"] is not None and r["paper_post"] is not None:
            delta = r["paper_post"] - r["paper_pre"]
            lines.append(f"    {r['allocation']}: paper post - pre = {delta:.3f} G; mlp{spec.projector_depth}x_gelu on {r['tokens']} "
                         f"tokens = {r['mlp'] / 1e9:.3f} G ({_dev(r['mlp'] / 1e9, delta):+.2%})")
    if any(r["paper_pre"] is not None for r in rows):
        lines.append(f"    note: {paper.BOUNDARY_NOTE}")
    return "\n".join(lines)
