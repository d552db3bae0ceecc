"""``braco cost`` tables over methods and projector types, every row asked of its plugin's cost model.

- :func:`compressors_table`: ``tab:main_compressor_cost`` (K = 16 on LLaVA-1.5-7B) recomputed method by method: each
  registered method's type at the budget (its plugin's ``types_at_budget``), costed by its plugin
  (:func:`llava.cost.module.module_cost`), once per accounting it offers (its own, then its cost model's
  ``variants``), with the paper's figure and our deviation at the paper's boundary;
- :func:`types_table`: any projector type (asked of its plugin): K, boundary, pre- and post-projector FLOPs and the
  full prefill;
- :func:`reducers_table`: with ``--projector all``, every registered in-LLM reducer at the settings its plugin
  showcases (its paper's; on a smaller LLM the first of its types that fits), on the vanilla prefill: the image
  tokens per LLM layer and the full prefill, the LLM counted layer by layer (:mod:`llava.cost.reducer`).

``all`` is expanded by :func:`llava.cost.module.expand_types`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Sequence

from llava.cost.module import CostSetting, module_cost
from llava.cost.pipeline import Accounting, projector_pipeline_flops
from llava.cost.presets import PipelineSpec
from llava.cost.video import Video

from . import paper

__all__ = ["compressors_table", "format_compressors", "format_reducers", "paper_setting_flops", "reducers_table", "types_table",
           "format_types"]

logger = logging.getLogger(__name__)


def _method_rows(plugin: Any, budget: int, setting: CostSetting, refs: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of one method: each accounting it offers, at the paper's boundaries (or its own)."""
    try:
        projector_type = plugin.budget_types(budget)[0]
    except (ValueError, IndexError) as exc:  # a budget the method never gives
        return [{"method": plugin.name, "accounting": "ours", "left_out": str(exc) or f"no type at {budget} tokens"}]
    rows = []
    for label, variant in [("ours", None), *((name, name) for name in plugin.cost.variants)]:
        try:
            cost = module_cost(projector_type, dataclasses.replace(setting, variant=variant))
        except ValueError as exc:  # a budget the method cannot give on this grid (QueCC/TokenPacker at 25)
            rows.append({"method": plugin.name, "accounting": label, "left_out": str(exc)})
            continue
        keys = [k for k in refs if k.split("@")[0] == plugin.name] or [None]
        for key in keys:
            boundary = refs[key][0] if key else cost.boundary
            ref = refs[key][3] if key else None
            got = (cost.pre if boundary == "pre" else cost.post) / 1e9
            rows.append({
                "method": plugin.name, "accounting": label, "type": cost.projector_type, "tokens": cost.tokens,
                "boundary": boundary, "pre": cost.pre, "post": cost.post, "at_boundary": got * 1e9,
                "paper_gflops": ref, "deviation": None if ref is None else got / ref - 1,
                "paper_latency_ms": refs[key][2] if key else None, "paper_memory_mb": refs[key][4] if key else None,
                "note": cost.note,
            })
    return rows


def compressors_table(setting: CostSetting, budget: int = 16) -> list[dict[str, Any]]:
    """One row per registered method (and per further accounting its cost model offers), as ``tab:main_compressor_cost``.

    Each row: our pre/post FLOPs (the method's own count, and, where its cost model offers another accounting such as
    the release's, that one as a second row), the paper's GFLOPs at its boundary (K = 16 only) and the deviation. A
    method that cannot give ``budget`` on the grid gets a row ``{"method", "accounting", "left_out": reason}``.
    """
    from llava.model.multimodal_projector.registry import list_plugins

    refs = paper.COMPRESSOR_COST_K16 if budget == 16 else {}
    methods = [plugin for plugin in list_plugins() if plugin.takes_budget and plugin.cost is not None and plugin.cost.module_flops]
    return [row for plugin in methods for row in _method_rows(plugin, budget, setting, refs)]


def paper_setting_flops(budget: int = 16, *, prompt_tokens: int = 7, count_attention: bool = False) -> dict[str, int]:
    """Each method's figure in ``tab:main_compressor_cost``'s setting (LLaVA-1.5-7B: D = 1024 on 24 x 24, Vicuna-7B,
    ``prompt_tokens`` question tokens), in FLOPs: :func:`compressors_table`'s row at the paper's boundary, under the
    last accounting the method's cost model offers (the release's, where it has one: PruMerge's full score matrix)."""
    from llava.cost.pipeline import cost_setting
    from llava.cost.presets import get_preset

    setting = cost_setting(get_preset("llava-v1.5-7b"), question_tokens=prompt_tokens, count_attention=count_attention)
    return {row["method"]: int(row["at_boundary"]) for row in compressors_table(setting, budget) if "left_out" not in row}


def format_compressors(rows: Sequence[dict[str, Any]], setting: CostSetting, budget: int) -> str:
    lines = [
        f"(f) compressor modules at K = {budget} (paper tab:main_compressor_cost), GFLOP per image; D = {setting.mm_hidden}, "
        f"{setting.grid[0]}x{setting.grid[1]} grid, LLM width {setting.lm.hidden}, QueCC prompt {setting.prompt_tokens} tokens, "
        f"attention scores {'counted' if setting.count_attention else 'not counted'}",
        f"{'method':<12} {'accounting':<10} {'bound.':>6} {'K':>3} {'pre G':>9} {'post G':>9} {'at bound.':>9} {'paper G':>8} {'dev':>8}  note",
    ]
    for r in rows:
        if "left_out" in r:
            lines.append(f"{r['method']:<12} {r['accounting']:<10} left out: {r['left_out']}")
            continue
        ref = "-" if r["paper_gflops"] is None else f"{r['paper_gflops']:.3f}"
        dev = "-" if r["deviation"] is None else f"{r['deviation']:+.2%}"
        lines.append(
            f"{r['method']:<12} {r['accounting']:<10} {r['boundary']:>6} {r['tokens']:>3} {r['pre'] / 1e9:>9.3f} {r['post'] / 1e9:>9.3f} "
            f"{r['at_boundary'] / 1e9:>9.3f} {ref:>8} {dev:>8}  {r['note']}"
        )
    lines.append("    pre = the module; post = module + the mlp2x_gelu it feeds or follows; gaps explained in docs/BENCHMARKS.md")
    return "\n".join(lines)


def types_table(
    spec: PipelineSpec, types: Sequence[str], acc: Accounting, setting: CostSetting, config: Any = None,
    video: Video | None = None,
) -> list[dict[str, Any]]:
    """K, boundary, pre/post module FLOPs and full-pipeline FLOPs of each projector type (vanilla ``mlp2x_gelu`` first).

    ``config``: a checkpoint's config; the type it names is costed with its stored settings. ``video``: the full
    pipeline is one video's (:mod:`llava.cost.video`); the module columns stay per view (one frame).
    """
    rows = []
    for name in dict.fromkeys([f"mlp{spec.projector_depth}x_gelu", *types]):
        own = config if config is not None and getattr(config, "mm_projector_type", None) == name else None
        cost = module_cost(name, setting, own)
        pipe = projector_pipeline_flops(
            spec, name, prompt_tokens=acc.prompt_tokens, count_attention=acc.count_attention, lm_head=acc.lm_head,
            vision_layers=acc.vision_layers, computation=acc.computation, question_tokens=setting.prompt_tokens, config=own,
            video=video,
        )
        rows.append({"type": name, **cost.to_dict(), "pipeline": pipe})
    return rows


def format_types(rows: Sequence[dict[str, Any]], spec: PipelineSpec, acc: Accounting, video: Video | None = None) -> str:
    from .report import unit_for

    scale, unit = unit_for(r["post"] for r in rows)
    big, big_unit = unit_for(r["pipeline"]["total"] for r in rows)
    lines = [
        f"(g) projector types on {spec.name} (one view): module cost asked of each type's plugin (its cost model)",
        f"    full pipeline: {acc.describe()}",
        *([f"    pipeline and LLM tok: {video.describe()}"] if video is not None else []),
        f"{'type':<24} {'K':>5} {'bound.':>6} {'pre ' + unit:>9} {'post ' + unit:>9} {'pipeline ' + big_unit:>11} {'LLM tok':>7}",
    ]
    for r in rows:
        p = r["pipeline"]
        lines.append(
            f"{r['type']:<24} {r['tokens']:>5} {r['boundary']:>6} {r['pre'] / scale:>9.3f} {r['post'] / scale:>9.3f} "
            f"{p['total'] / big:>11.3f} {p['visual_tokens'] + acc.prompt_tokens:>7}"
        )
    return "\n".join(lines)


def reducers_table(spec: PipelineSpec, acc: Accounting, vanilla: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per registered reducer plugin, on ``vanilla`` (the ``mlp{N}x_gelu`` row of :func:`types_table`): its
    type that fits this LLM (:func:`llava.model.reducer_fit.fitting_type`: its showcased settings, its paper's, where
    the LLM has their layers) with the LLM part replaced by its per-layer count under the same accounting; a plugin
    with no fitting type is a ``{"method", "left_out": why}`` row.

    Raises:
        ValueError: If the per-layer count without a reducer disagrees with the vanilla row's LLM count (a bug).
    """
    from llava.cost.reducer import with_reducer
    from llava.model.reducer_fit import fitting_type
    from llava.model.reducers import reducer_plugins
    from llava.plugin_api import LMDims

    pipe = vanilla["pipeline"]
    lm = LMDims.from_config(spec.llm)
    rows = []
    for plugin in reducer_plugins():
        name, tried, why = fitting_type(plugin, spec.llm, int(pipe["visual_tokens"]))
        if name is None:
            rows.append({"method": plugin.name, "left_out": f"none of {tried} fits this LLM ({why})"})
            continue
        reduced = with_reducer(pipe, name, lm, acc.prompt_tokens, count_attention=acc.count_attention, lm_head=acc.lm_head)
        rows.append({"type": name, "method": plugin.name, "per_layer": reduced["per_layer"], "llm": reduced["llm"],
                     "total": reduced["total"], "vanilla_total": pipe["total"], "reducer": reduced["reducer"]})
    return rows


def format_reducers(rows: Sequence[dict[str, Any]], spec: PipelineSpec, vanilla: str) -> str:
    from .report import unit_for

    big, big_unit = unit_for(r["total"] for r in rows if "left_out" not in r)
    lines = [
        f"(j) in-LLM reducers on {spec.name} with {vanilla} (each at its plugin's showcased settings, or the first type "
        "that fits this LLM): the LLM counted "
        "layer by layer at its own image tokens, never averaged; same accounting as (g)",
        f"{'type':<24} {'method':<12} {'pipeline ' + big_unit:>11} {'vs vanilla':>10}  image tokens per LLM layer",
    ]
    for r in rows:
        if "left_out" in r:
            lines.append(f"{'-':<24} {r['method']:<12} left out: {r['left_out']}")
            continue
        lines.append(f"{r['type']:<24} {r['method']:<12} {r['total'] / big:>11.3f} {r['total'] / r['vanilla_total']:>10.1%}  {r['per_layer']}")
    return "\n".join(lines)
