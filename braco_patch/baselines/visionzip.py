"""VisionZip (Yang et al., CVPR 2025, arXiv 2412.04467; dvlab-research/VisionZip @ 3151f6d, ``visionzip/``).

Training-free and prompt-independent; it sits between the vision tower and the ``mlp2x_gelu`` projector and
reads one encoder layer: the one that produced the select layer's features (``attentions[-2]``,
``hidden_states[-2]`` and that layer's keys with LLaVA's ``mm_vision_select_layer -2``).

1. **Dominant tokens** (:func:`attention_scores`, :func:`dominant_positions`): the CLS token's attention to
   every patch, summed over heads; the top ``dominant − 1`` patches are kept together with the CLS token
   itself, so the release's ``dominant`` counts the CLS token (``visionzip(model, dominant=54, contextual=10)``
   sends 54 + 10 = 64 tokens). Kept in grid order, the CLS token first, as the release's mask selects them.
2. **Contextual tokens** (:func:`head_mean_keys`, :func:`contextual_tokens`): the remaining patches (grid
   order) are compared by their keys averaged over heads (``[T, head_dim]``, the release's ``metric``),
   normalised; ``contextual`` targets are taken uniformly, every ``max(1, ⌊M/C⌋)``-th of the ``M`` remaining
   tokens (the first ``C``); every other token joins its most similar target, and each contextual token is
   the target's features plus the *mean* of the features that joined it (``target + Σ/count``).

Output ``[B, K, D]``: the dominant tokens (CLS first, then patches in grid order), then the contextual tokens
in grid order of their targets; ``K = dominant + contextual``.

Budget. The paper's LLaVA-1.5 settings are 54 + 10 = 64, 108 + 20 = 128, 162 + 30 = 192 (README, paper
Table 1): ``contextual = K·10/64``. For any K this module keeps that ratio, ``C = max(1, ⌊K·10/64 + ½⌋)``
(:func:`default_contextual`; K = 16: 13 + 3), unless told otherwise; the release needs ``C ≥ 1`` (it divides
by it).

Towers without a CLS token (SigLIP; not in the release): the dominant tokens are ranked by the attention each
patch receives, averaged over queries and summed over heads, and all ``dominant`` of them are patches.

Boundary: pre-projector (``[B, N, D] → [B, K, D]``); no parameters.

One file on the plugin API: the module, its FLOPs, its LLaVA factory (``visionzip_k{K}``: the selection, then
``mlp2x_gelu``, whose weights ``0.*``/``2.*`` load unchanged, so any ``mlp2x_gelu`` checkpoint runs it training-free),
cost, view and :data:`PLUGIN`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
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
    name_count,
    projector_part,
    select_layer_attention,
    view_of,
)

__all__ = [
    "NAME",
    "PLUGIN",
    "VisionZip",
    "attention_scores",
    "contextual_assignment",
    "contextual_tokens",
    "default_contextual",
    "dominant_positions",
    "head_mean_keys",
    "visionzip_flops",
    "visionzip_groups",
]


def default_contextual(budget: int) -> int:
    """The paper's split of K: ``max(1, ⌊K·10/64 + ½⌋)`` contextual tokens (64 → 10, 128 → 20, 192 → 30)."""
    return max(1, (check_count(budget) * 10 + 32) // 64)


def attention_scores(attention: torch.Tensor, num_patches: int) -> torch.Tensor:
    """Per-patch importance ``[B, N]`` (float32) from probabilities ``[B, heads, T, T]``, summed over heads.

    ``T = 1 + N``: the CLS row without its own column (the release). ``T = N`` (no CLS token): the attention
    each patch receives, averaged over the queries (:func:`~._common.per_head_importance`).
    """
    return per_head_importance(attention, num_patches).sum(dim=1)


def head_mean_keys(keys: torch.Tensor, heads: int) -> torch.Tensor:
    """``[B, T, D]`` key projections (all heads concatenated) → ``[B, T, D / heads]``, averaged over heads."""
    b, t, d = keys.shape
    if d % heads:
        raise ValueError(f"keys of width {d} cannot be split into {heads} heads")
    return keys.reshape(b, t, heads, d // heads).mean(dim=2)


def dominant_positions(scores: torch.Tensor, count: int) -> torch.Tensor:
    """``[B, count]`` patch positions with the highest scores, in ascending (grid) order."""
    return scores.topk(count, dim=1).indices.sort(dim=1).values


def _gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def contextual_assignment(metric: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Targets and assignment of step 2 over ``M`` remaining tokens with ``metric [B, M, d]``.

    Targets: positions ``0, s, 2s, …`` (the first ``count``), ``s = max(1, ⌊M / count⌋)``. Each other token goes to
    the target of highest cosine similarity (ties: the first target).

    Returns:
        ``(targets [C], others [M − C], joined [B, M − C])``: positions among the ``M``, and for each other token
        the index (``0..C−1``) of the target it joins.
    """
    m = metric.shape[1]
    step = max(1, m // count)
    chosen = list(range(0, m, step))[:count]  # shapes only: no host sync
    targets = torch.tensor(chosen, dtype=torch.long, device=metric.device)
    others = torch.tensor(sorted(set(range(m)) - set(chosen)), dtype=torch.long, device=metric.device)
    unit = nn.functional.normalize(metric.float(), dim=-1)
    similarity = torch.matmul(unit[:, others], unit[:, targets].transpose(1, 2))  # [B, M - C, C]
    return targets, others, similarity.argmax(dim=2)


def contextual_tokens(features: torch.Tensor, metric: torch.Tensor, count: int) -> torch.Tensor:
    """Step 2 on the ``M`` remaining tokens: ``features [B, M, D]``, ``metric [B, M, d]`` → ``[B, count, D]``.

    A target's token is its features plus the mean of the tokens assigned to it (:func:`contextual_assignment`;
    unchanged when none is).
    """
    targets, others, joined = contextual_assignment(metric, count)
    assign = nn.functional.one_hot(joined, targets.numel()).to(features.dtype)  # [B, M - C, C]
    counts = assign.sum(dim=1).clamp(min=1).unsqueeze(-1)  # [B, C, 1]
    merged = torch.matmul(assign.transpose(1, 2), features[:, others]) / counts
    return features[:, targets] + merged


class VisionZip(nn.Module):
    """Dominant tokens by CLS attention plus contextual tokens merged by key similarity.

    Args:
        dim: Tower feature width D.
        budget: K output tokens (dominant, CLS included, plus contextual).
        contextual: C contextual tokens (default :func:`default_contextual`); at least 1 and below K.
    """

    boundary = "pre"
    needs = frozenset({"attention", "keys", "cls_token"})

    def __init__(self, dim: int, budget: int, *, contextual: int | None = None) -> None:
        super().__init__()
        self.dim = check_count(dim, "dim")
        self.budget = check_count(budget)
        self.contextual = default_contextual(budget) if contextual is None else check_count(contextual, "contextual")
        if self.contextual >= self.budget:
            raise ValueError(
                f"VisionZip splits {budget} tokens into dominant and contextual ones, so contextual must be below {budget}, got {self.contextual}"
            )

    @property
    def dominant(self) -> int:
        """Dominant tokens, the CLS token included on a tower that has one (the release's ``dominant``)."""
        return self.budget - self.contextual

    @property
    def output_tokens(self) -> int:
        return self.budget

    def extra_repr(self) -> str:
        return f"dim={self.dim}, budget={self.budget}, dominant={self.dominant}, contextual={self.contextual}"

    def select(self, scores: torch.Tensor, has_cls: bool) -> torch.Tensor:
        """Dominant patch positions ``[B, dominant − has_cls]`` (grid order) from scores ``[B, N]``."""
        count = self.dominant - int(has_cls)
        n = scores.shape[1]
        if count + self.contextual > n:
            what = f"{n} patches" + (" and a CLS token" if has_cls else "")
            raise ValueError(f"VisionZip cannot keep {self.budget} tokens of {what}; the budget must be at most {n + int(has_cls)}")
        return dominant_positions(scores, count)

    def forward(
        self, features: torch.Tensor, attention: torch.Tensor, keys: torch.Tensor, cls_token: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Compress ``features [B, N, D]`` (the select layer's patches).

        Args:
            attention: ``[B, heads, T, T]`` probabilities of the layer that produced ``features``
                (``T = N + 1`` with a CLS token first, ``N`` without).
            keys: ``[B, T, D_k]`` that layer's key projections, all heads concatenated (CLS first if any).
            cls_token: ``[B, D]`` the CLS token's features at the select layer (towers with one).

        Returns:
            ``[B, K, D]``.
        """
        check_tokens(features, self.dim)
        b, n, _ = features.shape
        scores = attention_scores(attention, n)
        has_cls = attention.shape[-1] == n + 1
        if keys.dim() != 3 or tuple(keys.shape[:2]) != (b, attention.shape[-1]):
            raise ValueError(f"expected keys of shape [{b}, {attention.shape[-1]}, key_dim], got {tuple(keys.shape)}")
        if has_cls and (cls_token is None or tuple(cls_token.shape) != (b, self.dim)):
            got = None if cls_token is None else tuple(cls_token.shape)
            raise ValueError(f"VisionZip keeps the CLS token: expected cls_token of shape [{b}, {self.dim}], got {got}")
        kept, rest_index, metric = self.layout(scores, keys, attention.shape[1], has_cls)
        context = contextual_tokens(_gather(features, rest_index), _gather(metric, rest_index), self.contextual)
        parts = [cls_token.unsqueeze(1).to(features.dtype)] if has_cls else []
        return torch.cat([*parts, _gather(features, kept), context], dim=1)

    def layout(self, scores: torch.Tensor, keys: torch.Tensor, heads: int, has_cls: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(dominant patches [B, d], the other patches [B, M], head-mean patch keys [B, N, D_k / heads])``, both
        position lists in grid order."""
        b, n = scores.shape
        metric = head_mean_keys(keys, heads)[:, int(has_cls):]
        kept = self.select(scores, has_cls)
        taken = torch.zeros(b, n, dtype=torch.long, device=scores.device).scatter(1, kept, 1)
        rest_index = taken.argsort(dim=1, stable=True)[:, : n - kept.shape[1]]  # the others, in grid order (no host sync)
        return kept, rest_index, metric


def visionzip_groups(module: VisionZip, attention: torch.Tensor, keys: torch.Tensor, has_cls: bool) -> tuple[list[int], list[int]]:
    """For the demo: one image's dominant patches (grid order) and, for every patch of the grid, the contextual
    token it went into (``0..C−1``; ``−1`` for a dominant patch).

    Args:
        attention: ``[1, heads, T, T]`` and ``keys`` ``[1, T, D_k]`` of the layer VisionZip reads (``T`` counts the
            CLS token when ``has_cls``).
    """
    n = attention.shape[-1] - int(has_cls)
    scores = attention_scores(attention, n)
    kept, rest_index, metric = module.layout(scores, keys, attention.shape[1], has_cls)
    targets, others, joined = contextual_assignment(_gather(metric, rest_index), module.contextual)
    groups = torch.full((n,), -1, dtype=torch.long)
    rest = rest_index[0].cpu()
    groups[rest[targets.cpu()]] = torch.arange(targets.numel())
    groups[rest[others.cpu()]] = joined[0].cpu()
    return kept[0].tolist(), groups.tolist()


def visionzip_flops(
    dim: int, tokens: int, budget: int, *, heads: int, contextual: int | None = None, has_cls: bool = True,
    count_attention: bool = False, batch: int = 1,
) -> dict[str, int]:
    """FLOPs of :class:`VisionZip` at K = ``budget`` on N = ``tokens`` patches (llava's convention).

    ``scores``: the ``[heads, T, T]`` attention probabilities it reads (``2·T²·D``, ``T = N + 1`` with CLS): the
    release gets them from its eager tower; here the tower's ``encode`` recomputes them for that one layer, as the
    tower runs SDPA. Attention-score products, so counted only with ``count_attention``. ``similarity``: the
    ``[M − C, C]`` cosine product on head-mean keys (``2·(M − C)·C·D/heads``, ``M`` patches left after the dominant
    ones); ``merge``: the one-hot assignment product ``2·C·(M − C)·D``; ``add``: each target's own features,
    ``C·D``. Top-k, sorting, norms, head means and the division by the counts are not counted.
    """
    c = default_contextual(budget) if contextual is None else contextual
    t = tokens + int(has_cls)
    m = tokens - (budget - c - int(has_cls))
    parts = {
        "scores": 2 * t * t * dim if count_attention else 0,
        "similarity": 2 * (m - c) * c * (dim // heads),
        "merge": 2 * c * (m - c) * dim,
        "add": c * dim,
    }
    return {key: value * batch for key, value in parts.items()}


# ---------------------------------------------------------------------------------------------- LLaVA

NAME = NameForm("visionzip_k{K}")
#: The tower heads that size the head-mean keys in the cost count (16 on CLIP-L/14 and SigLIP-so400m).
COST_HEADS = 16


def _split(context: BuildContext, has_cls: bool) -> tuple[int, int | None]:
    """``(K, C)`` of a type and its config (``C`` ``None`` when unset: :func:`default_contextual`), refused in one
    sentence when K cannot hold a dominant and a contextual token or C leaves no dominant one."""
    budget = name_count(context.match)
    if budget < 2:
        raise ValueError(f"mm_projector_type {context.projector_type!r} keeps {budget} token, but VisionZip needs at least 2 "
                         "(a dominant and a contextual one)")
    stored = context.setting("mm_visionzip_contextual")
    if stored is not None and int(stored) >= budget:
        raise ValueError(
            f"mm_projector_type {context.projector_type!r} keeps {budget} tokens, so mm_visionzip_contextual must be below {budget} "
            f"(the rest are the dominant tokens), got {stored}"
        )
    if context.tower is not None:  # without a tower (a bare config) the forward pass checks K
        grid = context.tower.grid
        check_selection_budget(budget, grid, context.projector_type, grid[0] * grid[1] + int(has_cls), least=2)
    return budget, None if stored is None else int(stored)


def _read(projector: Any, features: torch.Tensor, inputs: Any) -> tuple[Any, ...]:
    return inputs.attention, inputs.keys, inputs.cls_token


def _factory(context: BuildContext) -> BuiltProjector:
    check_patch_features(context)
    budget, _ = _split(context, context.tower.has_cls if context.tower is not None else True)
    contextual = Resolved(context).get("mm_visionzip_contextual", default_contextual(budget))
    module = VisionZip(context.mm_hidden, budget, contextual=contextual)
    return BuiltProjector(CompressThenProject(module, context.mm_hidden, context.hidden, _read), {"mm_visionzip_contextual": contextual})


def _cost(context: BuildContext, setting: CostSetting) -> ModuleCost:
    """The selection and merge (with the one tower layer's attention the tower recomputes), then ``mlp2x_gelu`` on K."""
    budget, contextual = _split(context, setting.tower_cls)
    if budget > setting.tokens + int(setting.tower_cls):
        raise ValueError(f"visionzip cannot keep {budget} of the {setting.tokens} patches of a {setting.grid[0]}x{setting.grid[1]} grid"
                         + (" and its CLS token" if setting.tower_cls else ""))
    module = visionzip_flops(setting.mm_hidden, setting.tokens, budget, heads=COST_HEADS, contextual=contextual, has_cls=setting.tower_cls,
                             count_attention=setting.count_attention)
    return ModuleCost(context.projector_type, budget, "pre", module, projector_part(budget, setting), SCORES_NOTE)


def _view(projector: Any, inputs: ViewInputs) -> Any:
    """Dominant patches (``details["kept"]``, grid order) and contextual groups (``details["groups"]``: per patch the
    contextual token it went into, ``-1`` for a dominant patch)."""
    from llava.serve.panels import kept_positions_picture, regions_picture

    module = projector.compressor
    tower, out = select_layer_attention(inputs)
    with torch.no_grad():
        kept, groups = visionzip_groups(module, out.attention.float(), out.keys.float(), bool(tower.has_cls_token))
    labels = (np.asarray(groups) + 1).reshape(inputs.grid)
    cls = " plus the CLS token" if tower.has_cls_token else ""
    pictures = [
        kept_positions_picture(f"{len(kept)} dominant patches{cls}", inputs.image, inputs.grid, kept),
        regions_picture(f"{module.contextual} contextual groups", inputs.image, labels),
    ]
    help_text = (f"VisionZip keeps the patches the CLS token attends to most{cls} (left), then merges every other patch into one of "
                 f"{module.contextual} evenly spaced targets by key similarity (right: one colour per contextual token; the dominant "
                 "patches share the first colour).")
    return view_of(inputs, pictures, help_text, f"{module.dominant} dominant + {module.contextual} contextual", kept=kept, groups=groups)


PLUGIN = CompressorPlugin(
    name="visionzip",
    projectors=(ProjectorType.named(NAME, _factory, "VisionZip: CLS-attention dominant tokens (CLS kept) + key-similarity contextual merges, "
                                    "then mlp2x_gelu", examples=("visionzip_k9",)),),
    settings=(Setting("mm_visionzip_contextual", int, "C of the K tokens are contextual merges, the rest dominant "
                      "(default: the paper's 10 in 64, max(1, round(K*10/64)))", minimum=1),),
    key_prefixes=("mm_visionzip_",),
    needs=ModelNeeds(attention=0),  # the layer that produced the select layer's features (the release's attentions[-2])
    boundary=VisionZip.boundary,
    view=_view,
    cost=CostModel(module_flops=_cost),
)
