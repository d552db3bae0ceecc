"""DART (Wen et al., EMNLP 2025, "Stop Looking for Important Tokens…"; ZichenWen1/DART): duplication-aware
pruning of the image tokens inside the LLM, once, before decoder layer ``K = 2``.

The steps, as the repository's LLaVA code runs them (``DART.get_retained_image_token`` in
``llava/model/language_model/modeling_llama_self.py`` at 5a19452; the paper's §3):

1. **Pivots.** The L1 norm of each token's key in the layer *before* ``K`` (post-RoPE, heads concatenated)
   ranks the tokens; the 4 image tokens and the 4 instruction tokens (everything after the image) with the
   largest norms are the pivots (:func:`key_norms`, :func:`pivots`).
2. **Duplication.** Each pivot in turn claims the ``budget // 8`` remaining image tokens *least* similar to it
   (cosine similarity of the final-normed states, i.e. the LLM's ``norm`` applied to layer ``K``'s input);
   a claimed token leaves the candidate pool (:func:`least_similar`, :func:`select_row`).
3. **Keep.** The image pivots and every claimed token stay, in their original order; the text pivots are
   text and stay anyway (:func:`dart_keep`). Original position ids are kept (the repository passes
   ``keep_indexs`` as the position ids).

Where the code and the paper disagree, this file follows the code:

- the paper speaks of keeping ``budget`` tokens; the code keeps ``pivot_image + 8 · (budget // 8)`` image
  tokens, because the image pivots are kept on top of the claims — 132 for the paper's "128", 196 for 192,
  68 for 64 (:attr:`DartConfig.kept`);
- the paper ranks pivots by the K-norm of "the layer"; the code takes the keys of layer ``K − 1`` (the last
  layer that ran on the full sequence) and the states that layer produced;
- pivots are visited in the iteration order of a Python ``set`` of their positions (CPython's order for small
  ints: by value modulo the table size), which decides who claims a token first; :func:`pivot_order`
  reproduces that order so the greedy claims match.

Budget grammar: the repository's ``max_num_trunction`` (``bash scripts/v1_5/eval/textvqa.sh 0.778 128``);
``reduction_ratio`` only matters when ``max_num_trunction`` is ``None``, which none of its scripts do. The
original asserts batch size 1; here every row runs its own selection (same visual count per row).

Names: ``dart_k{K}`` (``K`` the release's ``max_num_trunction``, e.g. ``dart_k128``), ``dart_k{K}_l{L}`` to prune
before another layer (the release's ``--pruned_layer``). One step on the seam, at layer ``K`` of the release
(:attr:`DartConfig.layer`): it reads the keys of the layer before (``attention_layer = layer − 1``) and the final
norm of its own input, and drops image tokens before that layer runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from llava.plugin_api import CostModel, NameForm, Reducer, ReducerBuild, ReducerContext, ReducerPlugin, ReducerType, Reduction

from ._common import image_count, kept_view

__all__ = [
    "DART_BUDGETS",
    "NAME",
    "PLUGIN",
    "Dart",
    "DartConfig",
    "dart_keep",
    "dart_layer_tokens",
    "key_norms",
    "least_similar",
    "pivot_order",
    "pivots",
    "select_row",
    "visual_tokens_per_layer",
]

#: Budgets the paper reports for LLaVA-1.5 (``max_num_trunction``: 192, 128, 64 of 576).
DART_BUDGETS = (192, 128, 64)


@dataclass(frozen=True)
class DartConfig:
    """DART's settings; defaults are every LLaVA-1.5 script's (``--pruned_layer 2 --pivot_image_token 4
    --pivot_text_token 4``).

    Args:
        budget: ``max_num_trunction``, the claims shared among the pivots (the paper's "kept tokens").
        layer: ``K``, the first decoder layer that runs on the reduced sequence.
        pivot_image: image pivots (kept).
        pivot_text: instruction pivots (claim tokens, are text).
    """

    budget: int
    layer: int = 2
    pivot_image: int = 4
    pivot_text: int = 4

    def __post_init__(self) -> None:
        for name in ("budget", "layer", "pivot_image", "pivot_text"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"DART {name} must be a positive integer, got {value!r}.")
        if self.per_pivot < 1:
            raise ValueError(f"DART budget {self.budget} gives no claim per pivot; use at least {self.pivot_image + self.pivot_text} (one per pivot).")

    @property
    def per_pivot(self) -> int:
        """Tokens each pivot claims: ``budget // (pivot_image + pivot_text)`` (the code's ``TOKEN_TOPK``)."""
        return self.budget // (self.pivot_image + self.pivot_text)

    @property
    def kept(self) -> int:
        """Image tokens kept: the image pivots plus every claim."""
        return self.pivot_image + self.per_pivot * (self.pivot_image + self.pivot_text)

    def check_fits(self, n_visual: int) -> None:
        """Refuse a budget the image cannot hold (the original's ``topk`` would fail)."""
        if self.kept > n_visual:
            raise ValueError(
                f"DART budget {self.budget} keeps {self.kept} image tokens but the image has {n_visual}; use a budget below {n_visual - self.pivot_image}."
            )


def key_norms(keys: torch.Tensor) -> torch.Tensor:
    """``[B, T, H·d]`` post-RoPE keys (heads concatenated) → ``[B, T]`` L1 norms."""
    return keys.norm(p=1, dim=-1)


def pivots(norms: torch.Tensor, region: torch.Tensor, count: int, what: str) -> list[int]:
    """Positions of the ``count`` largest ``norms`` [T] inside the bool ``region`` [T] (``what`` it holds, for the
    error), largest first."""
    positions = region.nonzero().squeeze(-1)
    if positions.numel() < count:
        raise ValueError(f"DART takes {count} pivots from the {what} but it has {positions.numel()} tokens.")
    top = norms[positions].topk(count).indices
    return positions[top].tolist()


def pivot_order(image_pivots: list[int], text_pivots: list[int]) -> list[int]:
    """The order the pivots claim tokens in: the iteration order of a Python set of their positions."""
    return list(set(image_pivots + text_pivots))


def least_similar(states: torch.Tensor, pivot: int, candidates: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` positions among ``candidates`` [N] whose states [T, D] have the lowest cosine similarity
    with the pivot's state."""
    similarity = F.cosine_similarity(states[pivot], states[candidates], dim=-1)
    return candidates[(-similarity).topk(count).indices]


def select_row(keys: torch.Tensor, states: torch.Tensor, visual: torch.Tensor, text: torch.Tensor, config: DartConfig) -> torch.Tensor:
    """One sample: ``keys`` [T, H·d], final-normed ``states`` [T, D], bool ``visual``/``text`` [T] → sorted
    kept image positions, ``[config.kept]``."""
    norms = key_norms(keys)
    image_pivots = pivots(norms, visual, config.pivot_image, "image")
    text_pivots = pivots(norms, text, config.pivot_text, "instruction after the image")
    pool = visual.clone()
    pool[image_pivots] = False
    kept = list(image_pivots)
    for pivot in pivot_order(image_pivots, text_pivots):
        claimed = least_similar(states, pivot, pool.nonzero().squeeze(-1), config.per_pivot)
        pool[claimed] = False
        kept.extend(claimed.tolist())
    return torch.tensor(sorted(kept), dtype=torch.long, device=keys.device)


def dart_keep(keys: torch.Tensor, states: torch.Tensor, visual: torch.Tensor, text: torch.Tensor, config: DartConfig) -> torch.Tensor:
    """The positions every row keeps: all non-image tokens and DART's image tokens, sorted, ``[B, T']``.

    Args:
        keys: ``[B, T, H·d]`` keys of layer ``K − 1`` after RoPE.
        states: ``[B, T, D]`` layer ``K``'s input after the LLM's final norm.
        visual: ``[B, T]`` bool, image positions (the same count in every row).
        text: ``[B, T]`` bool, the instruction after the image (the text pivots' pool).
    """
    counts = visual.sum(dim=1)
    if bool((counts != counts[0]).any()):
        raise ValueError(f"DART needs the same image-token count in every row, got {counts.tolist()}.")
    config.check_fits(int(counts[0]))
    rows = []
    for b in range(visual.shape[0]):
        keep = ~visual[b]
        keep[select_row(keys[b], states[b], visual[b], text[b], config)] = True
        rows.append(keep.nonzero().squeeze(-1))
    return torch.stack(rows)


def visual_tokens_per_layer(config: DartConfig, n_layers: int, n_visual: int = 576) -> tuple[int, ...]:
    """Image tokens each decoder layer runs on: ``n_visual`` before layer ``K``, ``config.kept`` from it on."""
    if not 0 < config.layer < n_layers:
        raise ValueError(f"DART layer {config.layer} is not inside a {n_layers}-layer LLM; use 1 … {n_layers - 1}.")
    config.check_fits(n_visual)
    return tuple(n_visual if i < config.layer else config.kept for i in range(n_layers))


# ---------------------------------------------------------------------------------------------- the plugin

NAME = "dart"
#: ``K`` the release's ``max_num_trunction``; ``_l{L}`` its ``--pruned_layer`` (default 2).
FORM = NameForm("dart_k{K}[_l{L}]")


class Dart(Reducer):
    """DART before layer ``config.layer``: pivots from the keys of the layer before, claims by the final-normed input."""

    query_rows = 0

    def __init__(self, config: DartConfig) -> None:
        self.config = config
        self.layer = config.layer

    @property
    def attention_layer(self) -> int:
        return self.layer - 1

    def __call__(self, ctx: ReducerContext) -> Reduction:
        image_count(ctx.visual, NAME)
        keys = ctx.keys(layer=self.attention_layer)
        states = ctx.final_norm(ctx.hidden_states)
        return Reduction(keep=dart_keep(keys, states, ctx.visual, ctx.text, self.config))


def _config(build: ReducerBuild) -> DartConfig:
    values = build.values
    try:
        config = DartConfig(budget=values["K"], layer=values.get("L", DartConfig.layer))
    except ValueError as error:
        raise build.refuse(f"cannot run: {str(error).rstrip('.')}") from None
    if config.layer >= build.lm.layers:
        raise build.refuse(f"prunes before layer {config.layer}; the LLM has layers 0..{build.lm.layers - 1}")
    return config


def dart_layer_tokens(build: ReducerBuild, visual: int) -> list[int]:
    """Image tokens per decoder layer (:func:`visual_tokens_per_layer`)."""
    return list(visual_tokens_per_layer(_config(build), build.lm.layers, visual))


PLUGIN = ReducerPlugin(
    name=NAME,
    reducers=(
        ReducerType(
            FORM,
            lambda build: [Dart(_config(build))],
            "DART: keep the image tokens least duplicated by 4 image + 4 text pivots (key norms), before layer 2; "
            "K the release's max_num_trunction (keeps 4 + 8·⌊K/8⌋)",
            examples=("dart_k128", "dart_k16_l1"),
        ),
    ),
    cost=CostModel(layer_tokens=dart_layer_tokens),
    view=kept_view(NAME),
    showcase=("dart_k128",),
)
