"""``braco cost`` tables over projector types: the paper's compressor-cost table and any registered type.

- :func:`compressors_table`: ``tab:main_compressor_cost`` (K = 16 on LLaVA-1.5-7B) recomputed method by method
  (Braco through its own config, each baseline through :func:`braco_patch.baselines.module_flops.baseline_module_flops`), with the
  paper's figure and our deviation at the paper's boundary;
- :func:`types_table`: any projector type (asked of its plugin, :func:`llava.cost.module.module_cost`): K, boundary,
  pre- and post-projector FLOPs and the full prefill;
- :func:`expand_types`: ``all`` → every plugin's types at the given budgets (each plugin's ``CostModel.types_at_budget``).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Sequence

from llava.cost.flops import projector_flops
from llava.cost.module import CostSetting, ModuleCost, module_cost, types_at_budget
from llava.cost.pipeline import Accounting, projector_pipeline_flops
from llava.cost.presets import PipelineSpec
from llava.cost.video import Video

from ..baselines.module_flops import MODULE_FLOPS, baseline_module_flops
from ..config import BracoConfig
from . import paper
from .coder_flops import compressor_flops

__all__ = ["compressors_table", "format_compressors", "expand_types", "types_table", "format_types"]

logger = logging.getLogger(__name__)

#: Options of the paper-setting rows that differ from our module's own count (see docs/BENCHMARKS.md).
PAPER_VARIANTS: dict[str, dict[str, Any]] = {"prumerge": {"score_source": "full_matrix"}}


def _braco_cost(budget: int, setting: CostSetting) -> ModuleCost:
    alloc = BracoConfig.from_budget(budget)
    return ModuleCost(
        f"braco ({alloc.name})", budget, "pre", compressor_flops(alloc, setting.mm_hidden, setting.grid, setting.computation),
        projector_flops(budget, setting.mm_hidden, setting.lm.hidden, setting.projector_depth),
    )


def _method_cost(method: str, budget: int, setting: CostSetting, variant: dict[str, Any]) -> ModuleCost:
    if method == "braco":
        return _braco_cost(budget, setting)
    return baseline_module_flops(method, budget, setting, **variant)


def compressors_table(setting: CostSetting, budget: int = 16) -> list[dict[str, Any]]:
    """One row per method of ``tab:main_compressor_cost`` (plus every baseline the paper's table leaves out).

    Each row: our pre/post FLOPs (our module's count, and, where the paper evidently counted differently, the
    paper's accounting as a second row), the paper's GFLOPs at its boundary (K = 16 only) and the deviation. A
    method that cannot give ``budget`` on the grid gets a row ``{"method", "accounting", "left_out": reason}``.
    """
    refs = paper.COMPRESSOR_COST_K16 if budget == 16 else {}
    methods = ["braco", *MODULE_FLOPS]
    rows = []
    for method in methods:
        variants = [("ours", {})] + ([("repository", PAPER_VARIANTS[method])] if method in PAPER_VARIANTS else [])
        for label, variant in variants:
            try:
                cost = _method_cost(method, budget, setting, variant)
            except ValueError as exc:  # a budget the method cannot give on this grid (QueCC/TokenPacker at 25)
                rows.append({"method": method, "accounting": label, "left_out": str(exc)})
                continue
            keys = [k for k in refs if k.split("@")[0] == method] or [None]
            for key in keys:
                boundary = refs[key][0] if key else cost.boundary
                ref = refs[key][3] if key else None
                got = (cost.pre if boundary == "pre" else cost.post) / 1e9
                rows.append({
                    "method": method, "accounting": label, "type": cost.projector_type, "tokens": cost.tokens,
                    "boundary": boundary, "pre": cost.pre, "post": cost.post, "at_boundary": got * 1e9,
                    "paper_gflops": ref, "deviation": None if ref is None else got / ref - 1,
                    "paper_latency_ms": refs[key][2] if key else None, "paper_memory_mb": refs[key][4] if key else None,
                    "note": cost.note,
                })
    return rows


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


def expand_types(names: Iterable[str], budgets: Sequence[int], setting: CostSetting | None = None) -> list[str]:
    """``names`` with ``all`` replaced by every plugin's projector types at each of ``budgets``.

    Plugins that refuse a budget (or declare no types per budget) are logged and left out; with
    ``setting``, so are the types ``all`` gives that cannot run on its grid (their ``module_flops`` refuses).
    """
    out: list[str] = []
    for name in names:
        if name != "all":
            out.append(name)
            continue
        for budget in budgets:
            for plugin, types in types_at_budget(budget).items():
                if isinstance(types, str):
                    logger.info("budget %d: %s left out (%s)", budget, plugin, types)
                    continue
                out.extend(t for t in types if setting is None or _fits(t, setting))
    return list(dict.fromkeys(out))


def _fits(projector_type: str, setting: CostSetting) -> bool:
    try:
        module_cost(projector_type, setting)
    except ValueError as exc:
        logger.info("%s left out: %s", projector_type, exc)
        return False
    return True


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
