"""LLaVA-PruMerge and PruMerge+ (Shang et al., ICCV 2025; 42Shawn/LLaVA-PruMerge).

Training-free and prompt-independent; it sits between the vision tower and the ``mlp2x_gelu`` projector.

1. **Importance**: the CLS token's attention to every patch, in the encoder layer *after* the select layer
   (the one that reads the selected features: with ``mm_vision_select_layer -2`` on CLIP-L, the last layer,
   index 23 of 24, whose ``q_proj``/``k_proj`` the repository hooks). The repository scores with one
   full-width product, ``softmax(q_CLS · Kᵀ / √D)`` over all ``1 + N`` tokens, then drops the CLS column
   (:func:`single_head_cls_attention`; ``D`` is the full width, 1024 on CLIP-L, not a head's). Per-head
   probabilities ``[B, heads, T, T]`` are also accepted (CLS row averaged over heads, :func:`importance_scores`).
   **Towers without CLS** (SigLIP): the substitute is the mean attention each patch *receives* in the same
   full-width product, averaged over all query positions (:func:`single_head_attention_received`).
2. **Selection**: adaptive (the paper) keeps the IQR outliers, scores above ``Q3 + 1.5·(Q3 − Q1)``
   (quartiles with linear interpolation, numpy's default); fixed-K (for matched budgets) keeps the top
   scores. PruMerge+ adds spatially uniform samples (below).
3. **Merging**: each kept token ``i`` finds its ``k`` (32) most similar other tokens by key cosine
   similarity (kept or pruned, as in the repository) and absorbs them weighted by their attention scores:
   ``y_i = x_i + Σ_{j∈kNN(i)} a_j x_j`` (an unnormalised sum, as the repository computes it).
4. **Extra token**: the attention-weighted sum of all pruned tokens, ``Σ_{j pruned} a_j x_j``, appended last.

Output order: kept tokens by descending score (then PruMerge+'s uniform samples), then the extra token.

Budget rule. Fixed-K mode returns exactly ``K`` tokens: ``K − 1`` kept + the extra token (``K`` kept without
it); PruMerge+ splits the kept ones into ``⌊kept/2⌋`` uniform samples at flattened positions
``⌊(i + ½)·N / n⌋`` (the repository's fixed-ratio sequence) and the top scores among the other tokens.
Adaptive mode (``budget=None``) keeps a data-dependent count per image and returns a list of ``[K_b, D]``
tensors; it reads the count on the host (one sync per image), so it is for evaluation, not CUDA graphs. An image
without outliers sends the extra token alone, as the release does (without the extra token: its top token; PruMerge+,
where the release divides by zero: the uniform samples of one outlier).
The repository pools the IQR over the whole batch; here every image has its own quartiles, so batching
never changes an image's tokens. Adaptive PruMerge+ adds positions ``0, s, 2s, …`` with
``s = ⌊⌊1/ratio⌋ / 3⌋`` not already kept, as the repository does.

Boundary: pre-projector (``[B, N, D] → [B, K, D]``); no parameters (the original also fine-tunes the LLM with
LoRA, which is a training choice, not part of this module).

One file on the plugin API: the module, its FLOPs, its LLaVA factory (``prumerge[_k{K}]``, ``prumerge_plus[_k{K}]``:
PruMerge then ``mlp2x_gelu``, keys ``0.*``/``2.*`` as ``mlp2x_gelu``'s; it reads the q/k projections of the layer
after the select layer), cost, view and :data:`PLUGIN`.
"""

from __future__ import annotations

from typing import Any, Literal

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

from ._common import check_count, check_tokens
from ._plugin import (
    CompressThenProject,
    Resolved,
    check_patch_features,
    check_selection_budget,
    cost_budget,
    name_count,
    projector_part,
    scale_parts,
    select_layer_attention,
    view_of,
)

__all__ = [
    "NAME", "PLUGIN", "PLUS_NAME", "PruMerge", "importance_scores", "projection_scores", "prumerge_flops",
    "single_head_attention_received", "single_head_cls_attention", "iqr_outliers", "merge_tokens", "uniform_positions",
]


def single_head_cls_attention(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """The repository's score: ``softmax(q_0 Kᵀ / √D)[1:]`` from full-width q/k projections ``[B, 1 + N, D]`` → ``[B, N]``."""
    logits = torch.matmul(queries[:, :1].float(), keys.float().transpose(1, 2)) * queries.shape[-1] ** -0.5
    return torch.softmax(logits, dim=-1)[:, 0, 1:]


def single_head_attention_received(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Without a CLS token: the column mean of ``softmax(Q Kᵀ / √D)``, ``[B, N, D]`` q/k → ``[B, N]`` (float32)."""
    logits = torch.matmul(queries.float(), keys.float().transpose(1, 2)) * queries.shape[-1] ** -0.5
    return torch.softmax(logits, dim=-1).mean(dim=1)


def projection_scores(queries: torch.Tensor, keys: torch.Tensor, has_cls_token: bool) -> torch.Tensor:
    """Per-patch importance ``[B, N]`` from one layer's full-width q/k projections ``[B, T, D]`` (CLS first if any)."""
    if queries.shape != keys.shape or queries.dim() != 3:
        raise ValueError(f"expected queries and keys of one shape [batch, tokens, dim], got {tuple(queries.shape)} and {tuple(keys.shape)}")
    return single_head_cls_attention(queries, keys) if has_cls_token else single_head_attention_received(queries, keys)


def importance_scores(attention: torch.Tensor, num_patches: int) -> torch.Tensor:
    """Per-patch importance ``[B, N]`` (float32) from attention probabilities.

    ``attention``: ``[B, heads, T, T]`` or ``[B, T, T]`` with ``T = 1 + N`` (CLS row, heads averaged) or
    ``T = N`` (no CLS: attention received, averaged over heads and queries); or ``[B, N]`` scores as they are.
    """
    if attention.dim() == 2 and attention.shape[1] == num_patches:
        return attention.float()
    if attention.dim() == 3:
        attention = attention.unsqueeze(1)
    if attention.dim() != 4 or attention.shape[-1] != attention.shape[-2] or attention.shape[-1] not in (num_patches, num_patches + 1):
        raise ValueError(
            f"expected attention [batch, heads, T, T] with T = {num_patches + 1} (CLS) or {num_patches} (no CLS), "
            f"or scores [batch, {num_patches}], got {tuple(attention.shape)}"
        )
    attention = attention.float()
    if attention.shape[-1] == num_patches + 1:
        return attention[:, :, 0, 1:].mean(dim=1)
    return attention.mean(dim=(1, 2))


def iqr_outliers(scores: torch.Tensor) -> torch.Tensor:
    """``[B, N]`` → boolean ``[B, N]``: scores above ``Q3 + 1.5·IQR`` of their own row."""
    q = torch.quantile(scores.float(), torch.tensor([0.25, 0.75], device=scores.device), dim=1)  # [2, B]
    upper = q[1] + 1.5 * (q[1] - q[0])
    return scores > upper.unsqueeze(1)


def uniform_positions(num_patches: int, count: int, device: torch.device | None = None) -> torch.Tensor:
    """``count`` evenly spread flattened positions ``⌊(i + ½)·N / count⌋`` (PruMerge+'s fixed-budget samples)."""
    i = torch.arange(count, device=device, dtype=torch.float64)
    return torch.floor((i + 0.5) * num_patches / count).long()


def merge_tokens(
    features: torch.Tensor, keys: torch.Tensor, scores: torch.Tensor, kept: torch.Tensor, neighbours: int, extra_token: bool
) -> torch.Tensor:
    """Steps 3–4 for kept positions ``kept [B, M]``: ``[B, M (+1), D]``.

    ``features [B, N, D]``, ``keys [B, N, Dk]``, ``scores [B, N]``. The neighbour weights form a sparse
    ``[B, M, N]`` matrix (score at each kNN position, 0 elsewhere), applied as one matmul.
    """
    b, n, d = features.shape
    unit = nn.functional.normalize(keys.float(), dim=-1)
    kept_unit = torch.gather(unit, 1, kept.unsqueeze(-1).expand(-1, -1, unit.shape[-1]))
    sim = torch.matmul(kept_unit, unit.transpose(1, 2))  # [B, M, N]
    sim = sim.scatter(2, kept.unsqueeze(-1), float("-inf"))  # a token is not its own neighbour
    nn_idx = sim.topk(min(neighbours, n - 1), dim=2).indices
    a = scores.to(features.dtype)
    weights = torch.zeros(b, kept.shape[1], n, dtype=features.dtype, device=features.device)
    weights = weights.scatter(2, nn_idx, torch.gather(a.unsqueeze(1).expand(-1, kept.shape[1], -1), 2, nn_idx))
    centres = torch.gather(features, 1, kept.unsqueeze(-1).expand(-1, -1, d))
    out = centres + torch.matmul(weights, features)
    if not extra_token:
        return out
    pruned = torch.ones(b, n, dtype=torch.bool, device=features.device).scatter(1, kept, False)
    extra = torch.matmul((a * pruned).unsqueeze(1), features)  # [B, 1, D]
    return torch.cat([out, extra], dim=1)


class PruMerge(nn.Module):
    """CLS-attention pruning with key-similarity merging (``plus=True``: PruMerge+).

    Args:
        dim: tower feature width D.
        budget: K output tokens (fixed-K mode), or ``None`` for the adaptive IQR mode.
        plus: add spatially uniform samples (PruMerge+).
        neighbours: k, tokens each kept token absorbs (32 in the repository's inference path; capped at N − 1).
        extra_token: append the attention-weighted sum of the pruned tokens (the repository does).
    """

    boundary = "pre"
    needs = frozenset({"attention", "keys"})

    def __init__(self, dim: int, budget: int | None = None, *, plus: bool = False, neighbours: int = 32, extra_token: bool = True) -> None:
        super().__init__()
        self.dim = check_count(dim, "dim")
        self.budget = None if budget is None else check_count(budget)
        self.plus = bool(plus)
        self.neighbours = check_count(neighbours, "neighbours")
        self.extra_token = bool(extra_token)
        if self.budget is not None and self.kept_tokens < 1:
            raise ValueError(f"PruMerge needs at least one kept token besides the extra token, so the budget must be at least 2, got {budget}")

    @property
    def kept_tokens(self) -> int | None:
        """Kept (merged) tokens in fixed-K mode: ``K − 1`` with the extra token, else ``K``."""
        return None if self.budget is None else self.budget - int(self.extra_token)

    @property
    def output_tokens(self) -> int | None:
        """K in fixed-K mode; ``None`` (data-dependent) in adaptive mode."""
        return self.budget

    def extra_repr(self) -> str:
        mode = "adaptive" if self.budget is None else f"budget={self.budget}"
        return f"dim={self.dim}, {mode}, plus={self.plus}, neighbours={self.neighbours}, extra_token={self.extra_token}"

    # -- selection -----------------------------------------------------------------------------------
    def select(self, scores: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        """Kept positions: ``[B, M]`` in fixed-K mode, a list of ``[M_b]`` in adaptive mode (output order)."""
        n = scores.shape[1]
        if self.budget is None:
            return [self._select_adaptive(row) for row in scores]
        m = self.kept_tokens
        if m > n:
            raise ValueError(f"PruMerge cannot keep {m} of {n} tokens; the budget must be at most {n + int(self.extra_token)}")
        if not self.plus:
            return scores.topk(m, dim=1).indices
        uniform = uniform_positions(n, m // 2, scores.device)
        top = scores.index_fill(1, uniform, float("-inf")).topk(m - m // 2, dim=1).indices
        return torch.cat([top, uniform.unsqueeze(0).expand(scores.shape[0], -1)], dim=1)

    def _select_adaptive(self, row: torch.Tensor) -> torch.Tensor:
        n = row.shape[0]
        count = int(iqr_outliers(row.unsqueeze(0)).sum())  # host sync: the count is data-dependent
        if count == 0 and not self.plus and not self.extra_token:
            count = 1  # without the extra token an image would send no token at all
        idx = row.topk(count).indices
        if self.plus:
            step = max((n // max(count, 1)) // 3, 1)  # int(1 / ratio) // 3 with ratio = count / N
            extra = torch.arange(0, n - 1, step, device=row.device)
            idx = torch.cat([idx, extra[~torch.isin(extra, idx)]])
        return idx

    # -- forward -------------------------------------------------------------------------------------
    def forward(self, features: torch.Tensor, attention: torch.Tensor, keys: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        """Compress ``features [B, N, D]``.

        Args:
            attention: Per-patch scores ``[B, N]`` (:func:`projection_scores`, as the model path gives them), or
                ``[B, heads, T, T]`` probabilities (``T = N + 1`` with CLS, ``N`` without).
            keys: ``[B, T, Dk]`` key projections of the same layer (a leading CLS key is dropped).
        Returns:
            ``[B, K, D]`` (fixed-K) or a list of ``B`` tensors ``[K_b, D]`` (adaptive).
        """
        check_tokens(features, self.dim)
        b, n, _ = features.shape
        if keys.dim() != 3 or keys.shape[0] != b or keys.shape[1] not in (n, n + 1):
            raise ValueError(f"expected keys of shape [{b}, {n} or {n + 1}, key_dim], got {tuple(keys.shape)}")
        keys = keys[:, keys.shape[1] - n:]
        scores = importance_scores(attention, n)
        kept = self.select(scores)
        if self.budget is not None:
            return merge_tokens(features, keys, scores, kept, self.neighbours, self.extra_token)
        return [
            merge_tokens(features[i : i + 1], keys[i : i + 1], scores[i : i + 1], idx.unsqueeze(0), self.neighbours, self.extra_token)[0]
            for i, idx in enumerate(kept)
        ]


# ---------------------------------------------------------------------------------------------- FLOPs

ScoreSource = Literal["tower", "cls_row", "full_matrix"]


def prumerge_flops(
    dim: int, tokens: int, kept: int, *, key_dim: int | None = None, extra_token: bool = True,
    score_source: ScoreSource = "tower", batch: int = 1,
) -> dict[str, int]:
    """:class:`PruMerge` keeping ``kept`` tokens of ``tokens`` = N.

    ``key_similarity`` ``2·M·N·Dk`` (kept keys against all keys), ``merge`` ``2·M·N·D`` (the sparse kNN
    weights applied as one dense product), ``add`` ``M·D`` (centre + merged), ``extra_token`` ``2·N·D`` and its
    ``scale`` mask ``N``. ``score_source``: ``tower`` (the tower's attention probabilities are reused: 0),
    ``cls_row`` (:func:`single_head_cls_attention`: ``2·T·Dk``) or ``full_matrix`` (the repository's ``T x T``
    product ``2·T²·Dk``), with ``T = N + 1``.
    """
    dk = dim if key_dim is None else key_dim
    t = tokens + 1
    scores = {"tower": 0, "cls_row": 2 * t * dk, "full_matrix": 2 * t * t * dk}
    if score_source not in scores:
        raise ValueError(f"unknown PruMerge score source {score_source!r}; expected one of {sorted(scores)}")
    parts = {"scores": scores[score_source], "key_similarity": 2 * kept * tokens * dk, "merge": 2 * kept * tokens * dim, "add": kept * dim}
    if extra_token:
        parts.update(extra_token=2 * tokens * dim, scale=tokens)
    return scale_parts(parts, batch)


# ---------------------------------------------------------------------------------------------- LLaVA

NAME = NameForm("prumerge[_k{K}]")
PLUS_NAME = NameForm("prumerge_plus[_k{K}]")


def _scores_and_keys(projector: Any, features: torch.Tensor, inputs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``([B, N] scores, keys)``: the release's single full-width product of the q/k projections of the layer the plugin
    asked for (:func:`projection_scores`), and that layer's keys."""
    if inputs.queries is None or inputs.keys is None:
        raise ValueError("PruMerge scores patches with the tower's query and key projections, but CompressorInputs has none; call it through encode_images")
    return projection_scores(inputs.queries, inputs.keys, inputs.has_cls_token), inputs.keys


def _factory(context: BuildContext) -> BuiltProjector:
    name = context.projector_type
    check_patch_features(context)
    budget = name_count(context.match)
    settings = Resolved(context)
    neighbours = int(settings.get("mm_prumerge_neighbours", 32))
    extra = bool(settings.get("mm_prumerge_extra_token", True))
    if budget is not None:
        if budget - int(extra) < 1:
            raise ValueError(f"mm_projector_type {name!r} keeps {budget} token(s), but PruMerge with its extra token needs at least 2")
        if context.tower is not None:  # without a tower (a bare config) the forward pass checks K
            grid = context.tower.grid
            check_selection_budget(budget, grid, name, grid[0] * grid[1] + int(extra), least=1 + int(extra))
    module = PruMerge(context.mm_hidden, budget, plus=PLUS_NAME.parse(name) is not None, neighbours=neighbours, extra_token=extra)
    return BuiltProjector(CompressThenProject(module, context.mm_hidden, context.hidden, read=_scores_and_keys), settings.keys)


def _is_adaptive(config: Any) -> bool:
    """PruMerge without ``_k<K>`` keeps the IQR outliers: how many depends on the image."""
    name = str(config.mm_projector_type)
    for form in (NAME, PLUS_NAME):
        values = form.parse(name)
        if values is not None:
            return "K" not in values
    return False


#: What the score part counts, by ``score_source``.
_SCORE_NOTES = {
    "cls_row": "CLS row of the next layer's full-width q·Kᵀ",
    "full_matrix": "the release's full T x T score matrix",
    "tower": "scores reused from the tower (not counted)",
}


def _cost(context: BuildContext, setting: CostSetting) -> ModuleCost:
    """K − 1 kept tokens merged by key similarity plus the extra token, then ``mlp2x_gelu`` on K. The score is the CLS
    row of the next encoder layer's single full-width product, as the model path computes it (``2·T·D``); the
    ``repository`` variant counts the release's whole ``T x T`` product."""
    name, budget = context.projector_type, name_count(context.match)
    if budget is None:
        raise ValueError(
            f"{name!r} keeps an input-dependent number of tokens (adaptive selection), so it has no fixed cost; cost {name}_k<K> instead"
        )
    budget = cost_budget("prumerge", budget, setting)
    source = "full_matrix" if setting.variant == "repository" else "cls_row"
    module = prumerge_flops(setting.mm_hidden, setting.tokens, budget - 1, score_source=source)
    return ModuleCost(name, budget, "pre", module, projector_part(budget, setting), _SCORE_NOTES[source])


def _view(projector: Any, inputs: ViewInputs) -> Any:
    """Kept positions (``details["kept"]``, row-major, in output order) from the tower's attention for ``inputs.pixels``;
    each kept token also absorbs its key-similar neighbours, which the picture does not show."""
    from llava.serve.panels import kept_positions_picture

    module = projector.compressor
    _, out = select_layer_attention(inputs, PLUGIN.needs.attention)  # the layer the model reads (ModelNeeds(attention=1))
    scores = importance_scores(out.attention.float(), out.features.shape[1])
    kept = module.select(scores)[0].tolist()  # one image; adaptive mode gives a list, fixed-K a [1, M] tensor
    mode = "IQR outliers" if module.budget is None else f"top {module.kept_tokens} by CLS attention"
    help_text = ("Bright patches are the tokens PruMerge keeps (" + mode + "); each also absorbs its most key-similar "
                 "tokens weighted by their attention" + (", and one extra token sums the pruned ones." if module.extra_token else "."))
    picture = kept_positions_picture(f"kept {len(kept)} of {inputs.tokens_uncompressed}", inputs.image, inputs.grid, kept)
    return view_of(inputs, [picture], help_text, kept=kept)


PLUGIN = CompressorPlugin(
    name="prumerge",
    projectors=(
        ProjectorType.named(NAME, _factory, "PruMerge: CLS-attention top-K (or IQR outliers without _k) merged by key similarity, then mlp2x_gelu",
                            examples=("prumerge_k4", "prumerge")),
        ProjectorType.named(PLUS_NAME, _factory, "PruMerge+: PruMerge plus spatially uniform samples, then mlp2x_gelu",
                            examples=("prumerge_plus_k9", "prumerge_plus")),
    ),
    settings=(
        Setting("mm_prumerge_neighbours", int, "k, tokens each kept token absorbs by key similarity", default=32, minimum=1),
        Setting("mm_prumerge_extra_token", bool, "append the attention-weighted sum of the pruned tokens (counts in K)", default=True),
    ),
    key_prefixes=("mm_prumerge_",),
    needs=ModelNeeds(attention=1),  # the layer after the select layer reads its features (the release's layer 23)
    boundary=PruMerge.boundary,
    view=_view,
    cost=CostModel(module_flops=_cost, variants={"repository": _SCORE_NOTES["full_matrix"]}),
    tokens_depend_on_image=_is_adaptive,
)
