"""VisPruner (Zhang et al., ICCV 2025, arXiv 2412.01818; Theia-4869/VisPruner @ aefa01a, ``llava/model/llava_arch.py``).

Training-free and prompt-independent; it selects tower features before the ``mlp2x_gelu`` projector (the
release projects all tokens and then masks them, which is the same for a per-token MLP). It reads the
attention of the layer that produced the select layer's features (``attentions[select_layer]``).

1. **Important tokens** (:func:`cls_attention`): the CLS token's attention to every patch, averaged over
   heads; the ``⌊K·r⌋`` highest (``r`` the important ratio, the release's ``--important_ratio``, default 0.5).
2. **Diverse tokens** (:func:`remove_duplicates`): the other patches, in descending score order, are thinned
   by repeated bipartite matching on their normalised features: the sequence is split into even (``a``) and
   odd (``b``) positions, each ``a`` token is scored by its highest cosine similarity to a ``b`` token, and the
   ``r = min(8, R − (K − ⌊K·r⌋))`` most duplicated ``a`` tokens are dropped; the kept ``a`` tokens (in
   descending score order) followed by all ``b`` tokens form the next sequence, until ``K − ⌊K·r⌋`` remain.
3. The kept tokens are sent in grid order (the release's boolean mask).

Budget: K, the release's ``--visual_token_num``; the important ratio splits it. Odd sequences: the release
sizes an index by ``⌊R/2⌋ − r`` where ``⌈R/2⌉ − r`` rows exist, so it fails whenever ``N − ⌊K·r⌋`` is odd
(e.g. K = 4 at r = 0.75 on 576 patches); here the extra ``a`` token takes part like the others. Similarities
are computed in float32 (the release: the tower's dtype).

Towers without a CLS token (SigLIP; not in the release): the attention each patch receives, averaged over
queries and heads, ranks the important tokens.

Boundary: pre-projector (``[B, N, D] → [B, K, D]``); no parameters.

One file on the plugin API: the module, its FLOPs, its LLaVA factory (``vispruner_k{K}``: the selection, then
``mlp2x_gelu``, whose weights ``0.*``/``2.*`` load unchanged, so any ``mlp2x_gelu`` checkpoint runs it training-free),
cost, view and :data:`PLUGIN`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from llava.plugin_api import (
    BuildContext,
    BuiltProjector,
    CompressorPlugin,
    CostModel,
    CostSetting,
    ModelNeeds,
    ModuleCost,
    NameForm,
    ProjectorType,
    Setting,
    ViewInputs,
)

from ._common import check_count, check_tokens, per_head_importance
from ._plugin import (
    SCORES_NOTE,
    CompressThenProject,
    Resolved,
    check_patch_features,
    check_selection_budget,
    cost_budget,
    name_count,
    projector_part,
    select_layer_attention,
    view_of,
)

__all__ = [
    "NAME", "PLUGIN", "VisPruner", "cls_attention", "important_count", "remove_duplicates", "vispruner_flops", "vispruner_parts", "vispruner_select",
]

#: At most this many tokens are dropped per matching round (the release's constant).
DROP_PER_ROUND = 8


def important_count(budget: int, ratio: float) -> int:
    """``⌊K·r⌋`` important tokens (the release's ``int(visual_token_num * important_ratio)``)."""
    return int(budget * ratio)


def cls_attention(attention: torch.Tensor, num_patches: int) -> torch.Tensor:
    """``[B, heads, T, T]`` probabilities → ``[B, N]`` float32: the CLS row (``T = N + 1``) averaged over heads, or
    without a CLS token (``T = N``) the attention each patch receives averaged over queries and heads."""
    return per_head_importance(attention, num_patches).mean(dim=1)


def _rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def remove_duplicates(unit: torch.Tensor, residual: torch.Tensor, keep: int) -> torch.Tensor:
    """Step 2: thin ``residual [B, R]`` (positions into ``unit [B, N, D]``, unit-norm features) down to ``keep``.

    Returns the surviving positions ``[B, keep]`` in the order the rounds leave them (kept ``a`` tokens, then
    ``b``). The number of rounds depends on the shapes only, so nothing waits for the device.
    """
    while keep > 0:
        count = residual.shape[1]
        drop = min(DROP_PER_ROUND, count - keep)
        if drop <= 0:
            break
        tokens = _rows(unit, residual)
        best = torch.matmul(tokens[:, ::2], tokens[:, 1::2].transpose(1, 2)).amax(dim=-1)  # [B, ⌈R/2⌉]
        distinct = best.argsort(dim=-1, descending=True, stable=True)[:, drop:]
        residual = torch.cat([torch.gather(residual[:, ::2], 1, distinct), residual[:, 1::2]], dim=1)
    return residual


def vispruner_parts(features: torch.Tensor, scores: torch.Tensor, budget: int, important: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(important [B, ⌊K·r⌋], diverse [B, K − ⌊K·r⌋])`` positions from features ``[B, N, D]`` and importance
    ``[B, N]`` (important by descending score, diverse in the order the rounds leave them)."""
    order = scores.argsort(dim=-1, descending=True, stable=True)
    diverse = budget - important
    unit = nn.functional.normalize(features.float(), dim=-1)
    rest = remove_duplicates(unit, order[:, important:], diverse) if diverse > 0 else order[:, :0]
    return order[:, :important], rest


def vispruner_select(features: torch.Tensor, scores: torch.Tensor, budget: int, important: int) -> torch.Tensor:
    """Kept positions ``[B, K]`` in grid order (:func:`vispruner_parts`, joined)."""
    return torch.cat(vispruner_parts(features, scores, budget, important), dim=1).sort(dim=1).values


class VisPruner(nn.Module):
    """Important tokens by CLS attention plus diverse tokens left by duplicate removal.

    Args:
        dim: Tower feature width D.
        budget: K tokens kept per image.
        important_ratio: r, the share of K taken by attention (``⌊K·r⌋`` tokens); the release's default 0.5.
    """

    boundary = "pre"
    needs = frozenset({"attention"})

    def __init__(self, dim: int, budget: int, *, important_ratio: float = 0.5) -> None:
        super().__init__()
        self.dim = check_count(dim, "dim")
        self.budget = check_count(budget)
        ratio = float(important_ratio)
        if not (math.isfinite(ratio) and 0.0 <= ratio <= 1.0):
            raise ValueError(f"VisPruner's important ratio must be between 0 and 1, got {important_ratio!r}")
        self.important_ratio = ratio

    @property
    def important(self) -> int:
        """``⌊K·r⌋`` tokens chosen by attention; the rest of K are the diverse ones."""
        return important_count(self.budget, self.important_ratio)

    @property
    def output_tokens(self) -> int:
        return self.budget

    def extra_repr(self) -> str:
        return f"dim={self.dim}, budget={self.budget}, important={self.important}, diverse={self.budget - self.important}"

    def select(self, features: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """Kept positions ``[B, K]`` in grid order."""
        check_tokens(features, self.dim)
        n = features.shape[1]
        if self.budget > n:
            raise ValueError(f"VisPruner cannot keep {self.budget} of {n} tokens; the budget must be at most {n}")
        with torch.no_grad():
            return vispruner_select(features, cls_attention(attention, n), self.budget, self.important)

    def forward(self, features: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """``[B, N, D]`` → ``[B, K, D]``; ``attention`` ``[B, heads, T, T]`` of the layer that produced ``features``."""
        return _rows(features, self.select(features, attention))


def vispruner_flops(
    dim: int, tokens: int, budget: int, *, important_ratio: float = 0.5, has_cls: bool = True, count_attention: bool = False, batch: int = 1
) -> dict[str, int]:
    """FLOPs of :class:`VisPruner` at K = ``budget`` on N = ``tokens`` patches (llava's convention).

    ``scores``: the ``[heads, T, T]`` probabilities it reads (``2·T²·D``; the tower's ``encode`` recomputes them for
    one layer), attention-score products counted only with ``count_attention``; ``matching``: every round's
    ``[⌈R/2⌉, ⌊R/2⌋]`` cosine product (``2·⌈R/2⌉·⌊R/2⌋·D``), summed over the rounds the shapes give. Sorting, norms
    and maxima are not counted.
    """
    t = tokens + int(has_cls)
    important = important_count(budget, important_ratio)
    diverse, count, matching = budget - important, tokens - important, 0
    while diverse > 0 and count - diverse > 0:
        matching += 2 * math.ceil(count / 2) * (count // 2) * dim
        count -= min(DROP_PER_ROUND, count - diverse)
    return {"scores": (2 * t * t * dim if count_attention else 0) * batch, "matching": matching * batch}


# ---------------------------------------------------------------------------------------------- LLaVA

NAME = NameForm("vispruner_k{K}")
#: The release's ``--important_ratio`` default.
IMPORTANT_RATIO = 0.5


def _read(projector: Any, features: torch.Tensor, inputs: Any) -> tuple[Any, ...]:
    return (inputs.attention,)


def _factory(context: BuildContext) -> BuiltProjector:
    budget = name_count(context.match)
    check_patch_features(context)
    if context.tower is not None:  # without a tower (a bare config) the forward pass checks K
        grid = context.tower.grid
        check_selection_budget(budget, grid, context.projector_type, grid[0] * grid[1])
    settings = Resolved(context)
    module = VisPruner(context.mm_hidden, budget, important_ratio=float(settings.get("mm_vispruner_important_ratio", IMPORTANT_RATIO)))
    return BuiltProjector(CompressThenProject(module, context.mm_hidden, context.hidden, _read), settings.keys)


def _cost(context: BuildContext, setting: CostSetting) -> ModuleCost:
    """The selection (with the one tower layer's attention the tower recomputes), then ``mlp2x_gelu`` on K."""
    budget = cost_budget("vispruner", name_count(context.match), setting)
    ratio = float(context.setting("mm_vispruner_important_ratio", IMPORTANT_RATIO))
    module = vispruner_flops(setting.mm_hidden, setting.tokens, budget, important_ratio=ratio, has_cls=setting.tower_cls,
                             count_attention=setting.count_attention)
    return ModuleCost(context.projector_type, budget, "pre", module, projector_part(budget, setting), SCORES_NOTE)


def _view(projector: Any, inputs: ViewInputs) -> Any:
    """Important (``details["important"]``) and diverse (``details["diverse"]``) patch positions."""
    from llava.serve.panels import kept_positions_picture

    module = projector.compressor
    _, out = select_layer_attention(inputs)
    with torch.no_grad():
        scores = cls_attention(out.attention.float(), out.features.shape[1])
        important, diverse = (part[0].tolist() for part in vispruner_parts(out.features, scores, module.budget, module.important))
    pictures = [
        kept_positions_picture(f"{len(important)} important", inputs.image, inputs.grid, important),
        kept_positions_picture(f"{len(diverse)} diverse", inputs.image, inputs.grid, diverse),
    ]
    help_text = ("VisPruner keeps the patches the CLS token attends to most (left), then thins the rest by removing the most "
                 "similar ones in rounds of bipartite matching until the diverse patches remain (right).")
    return view_of(inputs, pictures, help_text, f"{len(important)} important + {len(diverse)} diverse",
                   kept=sorted(important + diverse), important=important, diverse=diverse)


PLUGIN = CompressorPlugin(
    name="vispruner",
    projectors=(ProjectorType.named(NAME, _factory, "VisPruner: CLS-attention important tokens + duplicate-free diverse tokens, then mlp2x_gelu",
                                    examples=("vispruner_k9",)),),
    settings=(Setting("mm_vispruner_important_ratio", float, "r, the share of K chosen by attention (the release's --important_ratio)",
                      default=IMPORTANT_RATIO, minimum=0.0, maximum=1.0),),
    key_prefixes=("mm_vispruner_",),
    needs=ModelNeeds(attention=0),  # attentions[select_layer], as the release reads them
    boundary=VisPruner.boundary,
    view=_view,
    cost=CostModel(module_flops=_cost),
)
