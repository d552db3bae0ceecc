"""The baselines' ``module_flops``: :data:`braco_patch.baselines.cost.MODULE_FLOPS` as :class:`~.projectors.ModuleCost`.

:func:`baseline_module_flops` maps a method name (a key of ``MODULE_FLOPS``), a budget K and a
:class:`~.projectors.CostSetting` to the module/projector split that ``braco cost`` reports. A plugin that
registers a baseline as projector types offers it as its tool::

    tools={"module_flops": lambda config, setting: baseline_module_flops("divprune", budget_of(config), setting)}

where ``budget_of`` reads K from the type name (or from the runtime setting, for MQT-LLaVA's query count).

What each method's parts are (``module`` = the pre-projector figure, ``module + projector`` = post):

- ``prumerge`` / PruMerge+: K - 1 kept tokens merged by key similarity plus the extra token, then
  ``mlp2x_gelu`` on K. The CLS-attention scores are the tower's (``score_source="tower"``: no extra work);
  ``score_source="full_matrix"`` counts the repository's own ``T x T`` single-head product.
- ``divprune``: runs after ``mlp2x_gelu`` on all N tokens (the projector part), then the ``N x N`` cosine
  similarity in the LLM width (the module).
- ``mqt``: the query abstractor ends in the LLM width itself (projector part empty).
- ``quecc``: the module plus its extra prompt pass through the LLM (``setting.prompt_tokens`` question tokens,
  logits at every position as the repository's ``forward`` computes them), then ``mlp2x_gelu`` on K.
- ``tokenpacker``: the packer's attention and key/value MLPs (module), its own 2-layer MLP (projector).
- ``fourier_vlm``: the folded DCT low-pass, then ``mlp2x_gelu`` on K.
"""

from __future__ import annotations

import math
from typing import Any

from ..baselines.cost import (
    MODULE_FLOPS,
    divprune_flops,
    fourier_vlm_flops,
    mqt_flops,
    prumerge_flops,
    quecc_flops,
    quecc_text_pass_flops,
    tokenpacker_flops,
)
from .flops import projector_flops
from .projectors import CostSetting, ModuleCost

__all__ = ["baseline_module_flops", "BOUNDARIES"]

#: The paper's boundary label per method (``tab:main_compressor_cost``; Fourier-VLM is not in it: pre, like Braco).
BOUNDARIES = {"prumerge": "pre", "divprune": "post", "mqt": "pre", "quecc": "pre", "tokenpacker": "post", "fourier_vlm": "pre"}


def _side(setting: CostSetting, method: str) -> int:
    h, w = setting.grid
    if h != w:
        raise ValueError(f"{method} needs a square patch grid, got {h}x{w}")
    return h


def _mlp(tokens: int, setting: CostSetting) -> dict[str, int]:
    return projector_flops(tokens, setting.mm_hidden, setting.lm.hidden, setting.projector_depth)


def baseline_module_flops(method: str, budget: int, setting: CostSetting, *, projector_type: str | None = None, **options: Any) -> ModuleCost:
    """The cost of baseline ``method`` at ``budget`` visual tokens per view.

    Args:
        method: A key of :data:`braco_patch.baselines.cost.MODULE_FLOPS`.
        budget: K.
        setting: Dimensions (``setting.count_attention`` counts attention scores of MQT/QueCC/TokenPacker).
        projector_type: The type name to report (default: the method name).
        options: Passed to the method's FLOP function (e.g. ``score_source`` for PruMerge, ``level_dim``).

    Raises:
        ValueError: For an unknown method, or a budget the method cannot give on this grid.
    """
    if method not in MODULE_FLOPS:
        raise ValueError(f"unknown baseline {method!r}; expected one of {sorted(MODULE_FLOPS)}")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be a positive integer, got {budget!r}")
    name = projector_type or method
    d, n, llm, att = setting.mm_hidden, setting.tokens, setting.lm.hidden, setting.count_attention
    if budget > n:
        raise ValueError(f"{method} cannot keep {budget} of the {n} tokens of a {setting.grid[0]}x{setting.grid[1]} grid")
    if method == "prumerge":
        module = prumerge_flops(d, n, budget - 1, **options)
        return ModuleCost(name, budget, "pre", module, _mlp(budget, setting), "CLS attention from the tower" if options.get("score_source", "tower") == "tower" else "")
    if method == "divprune":
        return ModuleCost(name, budget, "post", divprune_flops(n, llm, budget), _mlp(n, setting), "projector on all N tokens, then selection")
    if method == "mqt":
        return ModuleCost(name, budget, "pre", mqt_flops(d, llm, n, budget, count_attention=att, **options), {}, "ends in the LLM width")
    if method == "quecc":
        side = _side(setting, method)
        module: dict[str, Any] = dict(quecc_flops(d, side, budget, llm, count_attention=att, **options))
        module["prompt_pass"] = quecc_text_pass_flops(setting.lm, setting.prompt_tokens)
        return ModuleCost(name, budget, "pre", module, _mlp(budget, setting), f"prompt pass over {setting.prompt_tokens} question tokens included")
    if method == "tokenpacker":
        parts = dict(tokenpacker_flops(d, llm, _side(setting, method), budget, count_attention=att, **options))
        own_mlp = {"mlp": parts.pop("mlp")}
        return ModuleCost(name, budget, "post", parts, own_mlp, "its own MLP is the projector part")
    cutoff = math.isqrt(budget)
    if cutoff * cutoff != budget or cutoff > min(setting.grid):
        raise ValueError(f"fourier_vlm gives C² tokens with C at most {min(setting.grid)}, so {budget} is not a budget it can give")
    return ModuleCost(name, budget, "pre", fourier_vlm_flops(d, setting.grid, budget, **options), _mlp(budget, setting))
