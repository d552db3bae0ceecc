"""SparseVLM (Zhang et al., ICML 2025, "SparseVLM: Visual Token Sparsification for Efficient VLM Inference";
Gumpest/SparseVLMs): text-guided pruning of the image tokens inside the LLM, at three layers, with the
dropped tokens partly recycled into merged tokens.

The steps, as the repository's LLaVA code runs them (``LlamaDynamicvitModel.forward`` in
``llava/model/language_model/modelling_sparse_llama.py``, ``score.py`` and ``utils.py`` at 26a5f48, default
``USE_VERSION=1_0``; the paper's §3):

1. **Text raters** (§3.2), once, on the LLM's input embeddings: ``p = softmax_text(V Tᵀ)`` averaged over the
   image tokens; the instruction tokens (everything after the image) whose ``p`` exceeds the mean of ``p`` rate
   the image (:func:`select_raters`).
2. **Relevance** (§3.3), after each sparsification layer ``ℓ ∈ {2, 6, 15}`` has run: layer ``ℓ``'s softmaxed
   attention, averaged over heads and over the raters' rows, scores every image token
   (:func:`visual_relevance`).
3. **Deletion** (§3.3): the top ``k`` image tokens by relevance stay (:func:`keep_top_visual`), ``k`` from a
   fixed per-budget schedule (:data:`SCHEDULES`, :func:`stage_keep_count`).
4. **Recycling** (§3.4): of the dropped tokens, the ``⌊0.3·n⌋ + 1`` most relevant are clustered by density
   peaks (DPC-kNN) into ``⌊m/10⌋ + 1`` clusters whose means come back as new image tokens
   (:func:`recycle_candidates`, :func:`density_peak_centers`, :func:`merge_clusters`).

Where the code and the paper disagree, this file follows the code:

- the paper sets the deletion count adaptively from the rank of the text–image attention matrix; the code
  reads a fixed table (``sparse_token_dict``) of image tokens kept after layers 2, 6, 15, chosen so that
  ``(2·576 + 4·k₁ + 10·k₂ + 16·k₃) / 32`` is the budget (its comment); the layers really run 3, 4, 9 and 16
  layers at 576, k₁, k₂, k₃ (a stage prunes its own layer's output), recycled tokens come on top, so the true
  layer average is higher (≈ 79 before recycling for "64"); :func:`kept_per_stage` gives the per-layer
  counts, which is what this project reports;
- DPC-kNN's neighbourhood size is the cluster count (the code passes ``cluster_num`` as both);
- the code adds ``1e-6 · U(0, 1)`` noise to the densities to break ties, which are common (with two
  neighbours every mutual-nearest pair ties); here the lower index wins a tie, reproducibly, unless the
  caller passes the noise (:func:`density_peak_centers`);
- the code places the recycled tokens right after the kept image tokens and renumbers every position id
  contiguously from 0 (v1.0); here each recycled token takes the position of its cluster's centre (a dropped
  image token) and every token keeps its original position id, as the in-LLM seam does for every reducer
  (v2.0 of the code keeps position ids too);
- a prompt whose rater scores are all equal (a one-token instruction) has no rater in the code (NaN scores);
  here all its instruction tokens rate;
- the code reads batch row 0 only (``mask[0][indices] = 1``); here every row runs its own selection.

Names: ``sparsevlm_k{K}`` (``K`` one of :data:`SCHEDULES`), ``sparsevlm_k{K}_l{A}_{B}_{C}`` with other
sparsification layers. Steps on the seam: layer 0 picks the raters and keeps every row; the step at layer
``ℓ + 1`` reads layer ``ℓ``'s attention and prunes ``ℓ``'s output.
"""

from __future__ import annotations

import torch

from llava.plugin_api import CostModel, NameForm, Reducer, ReducerBuild, ReducerContext, ReducerPlugin, ReducerType, Reduction

from ._common import image_count, kept_view

__all__ = [
    "NAME",
    "PLUGIN",
    "RECYCLE_FRACTION",
    "SCHEDULES",
    "SPARSE_LAYERS",
    "density_peak_centers",
    "keep_top_visual",
    "kept_per_stage",
    "merge_clusters",
    "recycle",
    "recycle_candidates",
    "select_raters",
    "sparsevlm_stage",
    "sparsify",
    "stage_keep_count",
    "text_queries",
    "visual_relevance",
    "visual_tokens_per_layer",
]

#: Layers after which the image tokens are sparsified (``pruning_loc``).
SPARSE_LAYERS = (2, 6, 15)

#: Budget (the paper's "tokens", a 32-layer average) → image tokens kept at each of :data:`SPARSE_LAYERS`
#: before recycling (``score.py``, v1.0).
SCHEDULES: dict[int, tuple[int, int, int]] = {
    192: (300, 200, 110),
    128: (303, 110, 36),
    96: (238, 48, 26),
    64: (66, 30, 17),
}

#: Share of the dropped tokens that are recycled (the ``+ 1`` is the code's).
RECYCLE_FRACTION = 0.3
#: Recycled tokens per cluster (``⌊m / 10⌋ + 1`` clusters).
TOKENS_PER_CLUSTER = 10
#: The merge's denominator guard (``all_weight + 1e-6``).
MERGE_EPS = 1e-6


def select_raters(embeds: torch.Tensor, visual: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
    """Text raters from the LLM's input embeddings ``[B, T, D]``; bool ``visual``/``text`` ``[B, T]`` →
    bool ``[B, T]``, true at the instruction tokens whose mean image attention exceeds the mean."""
    raters = torch.zeros_like(text)
    for b in range(embeds.shape[0]):
        scores = (embeds[b, visual[b]] @ embeds[b, text[b]].T).softmax(dim=-1).mean(dim=0)
        raters[b, text[b].nonzero().squeeze(-1)] = scores > scores.mean()
    return raters


def visual_relevance(rows: torch.Tensor, raters: torch.Tensor, queries: torch.Tensor | None = None) -> torch.Tensor:
    """Softmaxed attention ``rows`` ``[B, H, Q, T]`` of Q query positions and bool ``raters`` ``[B, Q]`` (which
    of those queries rate) → ``[B, T]``, the attention averaged over heads, then over the raters.

    A row without raters (all rater scores equal, e.g. a one-token instruction) is rated by all its real queries
    (bool ``queries`` ``[B, Q]``, default all); the release would average over nothing and rank NaNs.
    """
    if rows.shape[2] == 0:
        raise ValueError("SparseVLM needs instruction tokens after the image to rate it; the prompt has none.")
    per_query = rows.mean(dim=1)
    real = torch.ones_like(raters) if queries is None else queries
    raters = torch.where(raters.any(dim=1, keepdim=True), raters, real)
    weights = raters.to(per_query.dtype)
    return (weights.unsqueeze(-1) * per_query).sum(dim=1) / weights.sum(dim=1, keepdim=True)


def text_queries(text: torch.Tensor, visual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The query rows to ask attention for: bool ``[B, T]``, every instruction token, topped up in shorter rows
    with their first image tokens so every row asks for the same count Q; and bool ``[B, Q]``, true at the rows
    (in position order) that are instruction tokens. The top-up rows are finite (never padding) and rate nothing.
    """
    counts = text.sum(dim=1, keepdim=True)
    missing = counts.max() - counts
    queries = text | (visual & (visual.long().cumsum(dim=1) <= missing))
    return queries, text[queries].view(text.shape[0], -1)


def stage_keep_count(budget: int, stage: int, n_visual: int) -> int:
    """Image tokens the schedule keeps at ``stage`` (0, 1, 2) out of ``n_visual``; at least one is dropped."""
    if budget not in SCHEDULES:
        raise ValueError(f"SparseVLM budget {budget} is not one of {sorted(SCHEDULES)}.")
    return min(SCHEDULES[budget][stage], n_visual - 1)


def keep_top_visual(relevance: torch.Tensor, visual: torch.Tensor, k: int) -> torch.Tensor:
    """Bool ``[B, T]``: the ``k`` image positions of highest ``relevance`` ``[B, T]`` in every row."""
    scores = relevance.masked_fill(~visual, float("-inf"))
    kept = torch.zeros_like(visual)
    return kept.scatter(1, scores.topk(k, dim=1).indices, True)


def recycle_candidates(relevance: torch.Tensor, dropped: torch.Tensor) -> torch.Tensor:
    """One row: ``relevance`` ``[T]``, bool ``dropped`` ``[T]`` → the ``⌊0.3·n⌋ + 1`` most relevant dropped
    positions, most relevant first."""
    positions = dropped.nonzero().squeeze(-1)
    count = int(positions.numel() * RECYCLE_FRACTION) + 1
    return positions[relevance[positions].topk(count).indices]


def density_peak_centers(x: torch.Tensor, clusters: int, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """DPC-kNN on ``x`` ``[M, D]`` with ``clusters`` centres and neighbours → (centre indices ``[clusters]``,
    best first; the cluster ``[M]`` each row joins, numbered in centre order).

    Distances are Euclidean over ``√D``; a row's density is ``exp(−mean d²)`` over its ``clusters`` nearest
    rows (itself included); its separation is the distance to the nearest denser row (the largest distance of
    all for the densest); centres have the largest ``density · separation``; every row joins its nearest
    centre and every centre its own cluster. Equal densities are common (with two neighbours, every mutual
    nearest pair ties): ``noise`` ``[M]`` is added to the densities as the code adds ``1e-6 · U(0, 1)``, and a
    tie that survives it leaves neither row denser, as in the code; without noise the lower index is denser.
    """
    dist = (x.unsqueeze(1) - x.unsqueeze(0)).norm(dim=-1) / x.shape[-1] ** 0.5
    density = (-(dist.topk(clusters, dim=-1, largest=False).values ** 2).mean(dim=-1)).exp()
    if noise is not None:
        density = density + noise
    denser = _denser(density, by_index=noise is None)
    separation = dist.masked_fill(~denser, float(dist.max())).min(dim=-1).values
    centers = (separation * density).topk(clusters).indices
    assignment = dist[centers].argmin(dim=0)
    assignment[centers] = torch.arange(clusters, device=x.device)
    return centers, assignment


def _denser(density: torch.Tensor, by_index: bool) -> torch.Tensor:
    """Bool ``[M, M]``: row ``j`` is denser than row ``i`` at ``[i, j]``; ``by_index`` gives ties to the lower index."""
    denser = density.unsqueeze(0) > density.unsqueeze(1)
    if not by_index:
        return denser
    index = torch.arange(density.shape[0], device=density.device)
    return denser | ((density.unsqueeze(0) == density.unsqueeze(1)) & (index.unsqueeze(0) < index.unsqueeze(1)))


def merge_clusters(x: torch.Tensor, assignment: torch.Tensor, clusters: int) -> torch.Tensor:
    """Cluster means ``[clusters, D]`` of ``x`` ``[M, D]``: each row is scaled by ``1 / (count + 1e-6)`` of its
    cluster, then the rows are summed (the code's order of operations)."""
    counts = x.new_zeros(clusters).index_add_(0, assignment, x.new_ones(x.shape[0]))
    scaled = x / (counts + MERGE_EPS)[assignment].unsqueeze(-1)
    return x.new_zeros(clusters, x.shape[-1]).index_add_(0, assignment, scaled)


def recycle(states: torch.Tensor, relevance: torch.Tensor, dropped: torch.Tensor, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One row: ``states`` ``[T, D]`` → (positions of the cluster centres ``[C]``, merged states ``[C, D]``);
    ``noise`` as in :func:`density_peak_centers`, one value per recycled candidate."""
    candidates = recycle_candidates(relevance, dropped)
    clusters = candidates.numel() // TOKENS_PER_CLUSTER + 1
    centers, assignment = density_peak_centers(states[candidates], clusters, noise)
    return candidates[centers], merge_clusters(states[candidates], assignment, clusters)


def kept_per_stage(budget: int, n_visual: int = 576) -> tuple[int, int, int]:
    """Image tokens after each sparsification layer, recycled tokens included (what the layers after it see)."""
    counts = []
    for stage in range(len(SCHEDULES[budget])):
        k = stage_keep_count(budget, stage, n_visual)
        candidates = int((n_visual - k) * RECYCLE_FRACTION) + 1
        n_visual = k + candidates // TOKENS_PER_CLUSTER + 1
        counts.append(n_visual)
    return tuple(counts)


def sparsevlm_stage(states: torch.Tensor, relevance: torch.Tensor, visual: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One sparsification: ``states`` ``[B, T, D]`` (the sparsification layer's output), ``relevance`` and
    bool ``visual`` ``[B, T]``, ``k`` kept → (sorted kept positions ``[B, T']``, their states ``[B, T', D]``,
    merged tokens at their centres' positions)."""
    counts = visual.sum(dim=1)
    if bool((counts != counts[0]).any()):
        raise ValueError(f"SparseVLM needs the same image-token count in every row, got {counts.tolist()}.")
    top = keep_top_visual(relevance, visual, k)
    keeps, rows = [], []
    for b in range(states.shape[0]):
        centers, merged = recycle(states[b], relevance[b], visual[b] & ~top[b])
        keep_mask = ~visual[b] | top[b]
        keep_mask[centers] = True
        row = states[b].clone()
        row[centers] = merged.to(row.dtype)
        keep = keep_mask.nonzero().squeeze(-1)
        keeps.append(keep)
        rows.append(row[keep])
    return torch.stack(keeps), torch.stack(rows)


def visual_tokens_per_layer(budget: int, n_layers: int, n_visual: int = 576, layers: tuple[int, ...] = SPARSE_LAYERS) -> tuple[int, ...]:
    """Image tokens each decoder layer runs on (recycled tokens included): a sparsification layer (``layers``)
    runs on what it received and prunes its output, so layers ``0 … 2`` see ``n_visual``, ``3 … 6`` the first
    stage's count, …"""
    if n_layers <= layers[-1] + 1:
        raise ValueError(f"SparseVLM prunes after layer {layers[-1]}; a {n_layers}-layer LLM is too shallow.")
    counts, current = [], n_visual
    stages = dict(zip(layers, kept_per_stage(budget, n_visual)))
    for layer in range(n_layers):
        counts.append(current)
        current = stages.get(layer, current)
    return tuple(counts)


def sparsify(context, budget: int, raters: torch.Tensor, stage: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One stage on the reducer context of the layer right after a sparsification layer ``ℓ`` (``layer`` is
    ``ℓ + 1``, ``hidden_states`` ``[B, T, D]`` its input, i.e. ``ℓ``'s output, bool ``visual``/``text`` ``[B, T]``,
    ``attention(bool queries [B, T], layer=ℓ) -> [B, H, Q, T]``) with the ``raters`` ``[B, T]`` of
    :func:`select_raters`, ``stage`` 0, 1, 2 → (kept positions ``[B, T']``, their states ``[B, T', D]``).

    This is the release's order: layer ``ℓ`` runs on every token, its attention scores the image, its output is
    pruned and recycled before layer ``ℓ + 1``.
    """
    scored = context.layer - 1
    queries, real = text_queries(context.text, context.visual)
    rows = context.attention(queries, layer=scored)
    relevance = visual_relevance(rows, raters[queries].view_as(real) & real, real)
    k = stage_keep_count(budget, stage, int(context.visual[0].sum()))
    return sparsevlm_stage(context.hidden_states, relevance, context.visual, k)


# ---------------------------------------------------------------------------------------------- the plugin

NAME = "sparsevlm"
#: ``K`` the release's budget (:data:`SCHEDULES`); ``_l{A}_{B}_{C}`` its ``pruning_loc`` (default 2, 6, 15).
FORM = NameForm("sparsevlm_k{K}[_l{A}_{B}_{C}]")


class _Raters:
    """The text raters of the prompt being prefilled, one bool row per sample in instruction order: written by the
    layer-0 step, read by the stages (instruction tokens are never dropped, so their order maps them)."""

    def __init__(self) -> None:
        self.rows: list[torch.Tensor] = []

    def at(self, text: torch.Tensor) -> torch.Tensor:
        """The raters as bool ``[B, T]`` over the rows of a later layer (its ``text`` ``[B, T]``)."""
        raters = torch.zeros_like(text)
        for b, row in enumerate(self.rows):
            raters[b, text[b].nonzero().squeeze(-1)] = row
        return raters


class RateText(Reducer):
    """Layer 0: choose the text raters from the LLM's input embeddings (§3.2); every row stays."""

    layer = 0
    query_rows = 0

    def __init__(self, raters: _Raters) -> None:
        self.raters = raters

    def __call__(self, ctx: ReducerContext) -> Reduction:
        chosen = select_raters(ctx.hidden_states, ctx.visual, ctx.text)
        self.raters.rows = [chosen[b][ctx.text[b]] for b in range(chosen.shape[0])]
        batch, length = ctx.visual.shape
        return Reduction(keep=torch.arange(length, device=ctx.visual.device).expand(batch, length).contiguous())


class Sparsify(Reducer):
    """The stage after sparsification layer ``scored``: prune and recycle its output, ranked by its attention."""

    query_rows = None

    def __init__(self, scored: int, stage: int, budget: int, raters: _Raters) -> None:
        self.layer = scored + 1
        self.stage = stage
        self.budget = budget
        self.raters = raters

    @property
    def attention_layer(self) -> int:
        return self.layer - 1

    def __call__(self, ctx: ReducerContext) -> Reduction:
        image_count(ctx.visual, NAME)
        keep, states = sparsify(ctx, self.budget, self.raters.at(ctx.text), self.stage)
        return Reduction(keep=keep, hidden_states=states)


def _layers(build: ReducerBuild) -> tuple[int, ...]:
    values = build.values
    return (values["A"], values["B"], values["C"]) if "A" in values else SPARSE_LAYERS


def _build(build: ReducerBuild) -> list[Reducer]:
    budget, layers = build.values["K"], _layers(build)
    if budget not in SCHEDULES:
        raise build.refuse(f"keeps K={budget}; SparseVLM's schedules are K = {sorted(SCHEDULES)}")
    if list(layers) != sorted(set(layers)):
        raise build.refuse(f"sparsifies after layers {list(layers)}; give three increasing layers")
    if layers[-1] + 1 >= build.lm.layers:
        raise build.refuse(f"sparsifies after layer {layers[-1]}; the LLM has layers 0..{build.lm.layers - 1}")
    raters = _Raters()
    return [RateText(raters), *(Sparsify(layer, stage, budget, raters) for stage, layer in enumerate(layers))]


def sparsevlm_layer_tokens(build: ReducerBuild, visual: int) -> list[int]:
    """Image tokens per decoder layer (:func:`visual_tokens_per_layer`)."""
    return list(visual_tokens_per_layer(build.values["K"], build.lm.layers, visual, _layers(build)))


PLUGIN = ReducerPlugin(
    name=NAME,
    reducers=(
        ReducerType(
            FORM,
            _build,
            "SparseVLM: text-rated pruning with recycling after layers 2, 6, 15; K the release's budget (192/128/96/64)",
            examples=("sparsevlm_k64_l0_1_2",),
        ),
    ),
    cost=CostModel(layer_tokens=sparsevlm_layer_tokens),
    view=kept_view(NAME),
    showcase=("sparsevlm_k192",),
)
