"""Analytic FLOPs of the baseline modules, in llava's FLOP convention (:mod:`llava.cost.flops`), and their module costs.

Convention (the same as Braco's): 1 multiply-add = 2 FLOPs for every matrix product (linear layers without
their bias adds, convolutions, batched matmuls); attention-score products (``QKᵀ`` and ``A·V``) only with
``count_attention=True``; elementwise additions/multiplications inside the module at 1 FLOP per element,
under the part names ``add``/``scale`` (so :func:`llava.cost.flops.elementwise` separates them);
normalisation, activations, softmax, reductions, sorting/top-k, gathers, interpolation and masking are not
counted. Each function counts what this package's module computes, for one call on ``batch`` images, and
returns an ordered ``{part: FLOPs}`` dict (sum with :func:`llava.cost.flops.total`).

Where a count is not the module's matmul work alone, the function says so: PruMerge's attention scores come
from the tower (``score_source``), QueCC's prompt pass is the LLM's (:func:`quecc_text_pass_flops`), and
"post-projector" figures add the ``mlp2x_gelu`` projector (:func:`boundary_flops`).

Paper setting (CLIP-L/336: D = 1024, 24 x 24, layers 12/16/22/23; Vicuna-7B: d_llm = 4096; K = 16),
``tab:main_compressor_cost`` vs :func:`paper_setting_flops` (GFLOP, attention scores not counted):

- TokenPacker (post) 15.271 vs 15.267 (−0.03 %): the paper's figure is the module's linear layers.
- MQT-LLaVA (pre) 2.674 vs 2.617 (−2.1 %); with attention scores 2.655 (−0.7 %).
- DivPrune (post) 29.603 vs 26.877 (−9.2 %): projector on 576 tokens (24.159) + one 576² x 4096 similarity
  product (2.718); the paper's figure is ours plus a second such product (29.595, −0.03 %).
- PruMerge (pre) 0.724 vs 0.718 (−0.8 %) with the repository's full ``T x T`` single-head scores (0.682) and
  15 kept tokens + the extra one; our merge is a dense ``[M, N]`` product where the repository gathers 32
  neighbours, so the remaining gap is not attributable to one term.
- QueCC (pre) 109.504 vs 16.988 for the module alone; with the prompt pass through Vicuna-7B (logits at every
  position, as the repository's ``forward`` computes them) at 7 prompt tokens, 109.488 (−0.02 %). The paper
  does not state its prompt length.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Literal

from llava.cost.flops import LMDims, linear_flops, llm_prefill_flops, projector_flops, total
from llava.cost.module import CostSetting, ModuleCost

from ._common import region_scale
from .cdpruner import CLIP_L_TEXT, cdpruner_flops, clip_text_flops
from .visionzip import visionzip_flops
from .vispruner import vispruner_flops

__all__ = [
    "prumerge_flops",
    "divprune_flops",
    "mqt_flops",
    "quecc_flops",
    "quecc_text_pass_flops",
    "tokenpacker_flops",
    "fourier_vlm_flops",
    "MODULE_FLOPS",
    "BOUNDARIES",
    "baseline_module_flops",
    "boundary_flops",
    "paper_setting_flops",
]

ScoreSource = Literal["tower", "cls_row", "full_matrix"]


def _scale(parts: dict[str, int], batch: int) -> dict[str, int]:
    return {k: int(v) * batch for k, v in parts.items()}


def prumerge_flops(
    dim: int, tokens: int, kept: int, *, key_dim: int | None = None, extra_token: bool = True,
    score_source: ScoreSource = "tower", batch: int = 1,
) -> dict[str, int]:
    """:class:`~.prumerge.PruMerge` keeping ``kept`` tokens of ``tokens`` = N.

    ``key_similarity`` ``2·M·N·Dk`` (kept keys against all keys), ``merge`` ``2·M·N·D`` (the sparse kNN
    weights applied as one dense product), ``add`` ``M·D`` (centre + merged), ``extra_token`` ``2·N·D`` and its
    ``scale`` mask ``N``. ``score_source``: ``tower`` (the tower's attention probabilities are reused: 0),
    ``cls_row`` (:func:`~.prumerge.single_head_cls_attention`: ``2·T·Dk``) or ``full_matrix`` (the
    repository's ``T x T`` product ``2·T²·Dk``), with ``T = N + 1``.
    """
    dk = dim if key_dim is None else key_dim
    t = tokens + 1
    scores = {"tower": 0, "cls_row": 2 * t * dk, "full_matrix": 2 * t * t * dk}
    if score_source not in scores:
        raise ValueError(f"unknown PruMerge score source {score_source!r}; expected one of {sorted(scores)}")
    parts = {"scores": scores[score_source], "key_similarity": 2 * kept * tokens * dk, "merge": 2 * kept * tokens * dim, "add": kept * dim}
    if extra_token:
        parts.update(extra_token=2 * tokens * dim, scale=tokens)
    return _scale(parts, batch)


def divprune_flops(tokens: int, dim: int, budget: int, *, batch: int = 1) -> dict[str, int]:
    """:class:`~.divprune.DivPrune`: the ``N x N`` cosine similarity, ``2·N²·d``; the greedy steps are reductions."""
    del budget  # the K greedy steps are min/argmax reductions: not counted
    return _scale({"similarity": 2 * tokens * tokens * dim}, batch)


def _attention(q_tokens: int, kv_tokens: int, dim: int, count_attention: bool, kv_per_query: int | None = None) -> dict[str, int]:
    """:class:`~._common.CrossAttention`: q/k/v/out projections (+ scores over ``kv_per_query`` keys per query)."""
    keys = kv_tokens if kv_per_query is None else kv_per_query
    return {
        "attn_q": linear_flops(q_tokens, dim, dim),
        "attn_k": linear_flops(kv_tokens, dim, dim),
        "attn_v": linear_flops(kv_tokens, dim, dim),
        "attention_scores": 4 * q_tokens * keys * dim if count_attention else 0,
        "attn_out": linear_flops(q_tokens, dim, dim),
    }


def mqt_flops(
    dim: int, out_dim: int, tokens: int, num_tokens: int, *, keys: str = "position", count_attention: bool = False, batch: int = 1
) -> dict[str, int]:
    """:class:`~.mqt.MQTAbstractor` with ``m = num_tokens`` queries over N = ``tokens`` features.

    ``add``: query + position once per call (``m·D``), plus ``N·D`` per image for content keys ``x + p``. The
    (shared) queries and position keys are projected per image, as the module computes them.
    """
    parts = _scale({"add": tokens * dim if keys == "features" else 0}, batch)
    parts["add"] += num_tokens * dim
    parts.update(_scale(_attention(num_tokens, tokens, dim, count_attention), batch))
    parts["proj"] = batch * linear_flops(num_tokens, dim, out_dim)
    return parts


def _mlp2(tokens: int, d_in: int, d: int) -> int:
    return linear_flops(tokens, d_in, d) + linear_flops(tokens, d, d)


def quecc_flops(
    dim: int, grid_side: int, budget: int, text_dim: int, *, level_dim: int | None = None, count_attention: bool = False, batch: int = 1
) -> dict[str, int]:
    """:class:`~.quecc.QueCC` without the prompt pass (see :func:`quecc_text_pass_flops`).

    Text projection ``2·d_text·D``, its ``add`` to the N features, the query MLP on N tokens, the depthwise
    conv ``2·K·D·s²``, key/value MLPs on the multi-level features, attention over ``s²`` keys per query.
    """
    n, s = grid_side**2, region_scale(budget, grid_side, "QueCC")
    width = 4 * dim if level_dim is None else level_dim
    parts = {
        "text_projection": linear_flops(1, text_dim, dim),
        "add": n * dim,
        "q_mlp": _mlp2(n, dim, dim),
        "q_downsample": 2 * budget * dim * s * s,
        "k_mlp": _mlp2(n, width, dim),
        "v_mlp": _mlp2(n, width, dim),
    }
    parts.update(_attention(budget, n, dim, count_attention, kv_per_query=s * s))
    return _scale(parts, batch)


def quecc_text_pass_flops(lm: LMDims, prompt_tokens: int, *, lm_head: Literal["all", "last"] = "all", batch: int = 1) -> dict[str, int]:
    """QueCC's extra pass of the prompt through the LLM (the repository runs the causal-LM forward: logits at
    every position, ``lm_head="all"``)."""
    return _scale(llm_prefill_flops(lm, prompt_tokens, lm_head=lm_head), batch)


def tokenpacker_flops(
    dim: int, out_dim: int, grid_side: int, budget: int, *, level_dim: int | None = None, count_attention: bool = False, batch: int = 1
) -> dict[str, int]:
    """:class:`~.tokenpacker.TokenPacker` including its MLP (it ends in d_llm). Bilinear downsampling is not counted."""
    n, s = grid_side**2, region_scale(budget, grid_side, "TokenPacker")
    width = 4 * dim if level_dim is None else level_dim
    parts = {"q_proj": linear_flops(budget, dim, dim), "k_mlp": _mlp2(n, width, dim), "v_mlp": _mlp2(n, width, dim)}
    parts.update(_attention(budget, n, dim, count_attention, kv_per_query=s * s))
    parts["mlp"] = linear_flops(budget, dim, out_dim) + linear_flops(budget, out_dim, out_dim)
    return _scale(parts, batch)


def fourier_vlm_flops(dim: int, grid: tuple[int, int], budget: int, *, batch: int = 1) -> dict[str, int]:
    """:class:`~.fourier_vlm.FourierVLM`: one ``[C², H·W] x [H·W, D]`` product (DCT, crop and inverse DCT folded)."""
    return _scale({"low_pass": 2 * budget * grid[0] * grid[1] * dim}, batch)


#: Method name (as :data:`braco_patch.baselines.BASELINES`) → FLOP function.
MODULE_FLOPS: dict[str, Callable[..., dict[str, int]]] = {
    "prumerge": prumerge_flops,
    "divprune": divprune_flops,
    "mqt": mqt_flops,
    "quecc": quecc_flops,
    "tokenpacker": tokenpacker_flops,
    "fourier_vlm": fourier_vlm_flops,
    "visionzip": visionzip_flops,
    "vispruner": vispruner_flops,
    "cdpruner": cdpruner_flops,
}


def boundary_flops(module: dict[str, int], *, projector_tokens: int, mm_hidden: int, llm_hidden: int, depth: int = 2) -> dict[str, Any]:
    """``{"module": ..., "projector": ...}``: a module's parts plus ``mlp{depth}x_gelu`` on ``projector_tokens``
    (K for pre-projector modules, N for DivPrune, which runs after the projector on all tokens)."""
    return {"module": dict(module), "projector": projector_flops(projector_tokens, mm_hidden, llm_hidden, depth)}


def paper_setting_flops(budget: int = 16, *, prompt_tokens: int = 7, count_attention: bool = False) -> dict[str, int]:
    """Each method's figure in ``tab:main_compressor_cost``'s setting (see the module docstring), in FLOPs."""
    d, g, llm = 1024, 24, 4096
    n = g * g
    vicuna = LMDims(hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32, head_dim=128, vocab=32000)
    return {
        "quecc": total(quecc_flops(d, g, budget, llm, count_attention=count_attention)) + total(quecc_text_pass_flops(vicuna, prompt_tokens)),
        "mqt": total(mqt_flops(d, llm, n, budget, count_attention=count_attention)),
        "prumerge": total(prumerge_flops(d, n, budget - 1, score_source="full_matrix")),
        "tokenpacker": total(tokenpacker_flops(d, llm, g, budget, count_attention=count_attention)),
        "divprune": total(boundary_flops(divprune_flops(n, llm, budget), projector_tokens=n, mm_hidden=d, llm_hidden=llm)),
        "fourier_vlm": total(boundary_flops(fourier_vlm_flops(d, (g, g), budget), projector_tokens=budget, mm_hidden=d, llm_hidden=llm)),
    }


#: The paper's boundary label per method (``tab:main_compressor_cost``; Fourier-VLM is not in it: pre, like Braco).
BOUNDARIES = {"prumerge": "pre", "divprune": "post", "mqt": "pre", "quecc": "pre", "tokenpacker": "post", "fourier_vlm": "pre",
              "visionzip": "pre", "vispruner": "pre", "cdpruner": "post"}


def _side(setting: CostSetting, method: str) -> int:
    h, w = setting.grid
    if h != w:
        raise ValueError(f"{method} needs a square patch grid, got {h}x{w}")
    return h


def _mlp(tokens: int, setting: CostSetting) -> dict[str, int]:
    return projector_flops(tokens, setting.mm_hidden, setting.lm.hidden, setting.projector_depth)


#: What the PruMerge row's score part counts, by ``score_source``.
_PRUMERGE_NOTES = {
    "cls_row": "CLS row of the next layer's full-width q·Kᵀ",
    "full_matrix": "the release's full T x T score matrix",
    "tower": "scores reused from the tower (not counted)",
}


def baseline_module_flops(method: str, budget: int, setting: CostSetting, *, projector_type: str | None = None, **options: Any) -> ModuleCost:
    """The cost of baseline ``method`` at ``budget`` visual tokens per view (the plugins' ``CostModel.module_flops``).

    What each method's parts are (``module`` = the pre-projector figure, ``module + projector`` = post):

    - ``prumerge`` / PruMerge+: K - 1 kept tokens merged by key similarity plus the extra token, then
      ``mlp2x_gelu`` on K. The score is the CLS row of the next encoder layer's single full-width product, as
      the model path computes it (``score_source="cls_row"``: ``2·T·D``); ``score_source="full_matrix"`` counts
      the release's whole ``T x T`` product, ``"tower"`` none.
    - ``divprune``: runs after ``mlp2x_gelu`` on all N tokens (the projector part), then the ``N x N`` cosine
      similarity in the LLM width (the module).
    - ``mqt``: the query abstractor ends in the LLM width itself (projector part empty).
    - ``quecc``: the module plus its extra prompt pass through the LLM (``setting.prompt_tokens`` question tokens,
      logits at every position as the repository's ``forward`` computes them), then ``mlp2x_gelu`` on K.
    - ``tokenpacker``: the packer's attention and key/value MLPs (module), its own 2-layer MLP (projector).
    - ``fourier_vlm``: the folded DCT low-pass, then ``mlp2x_gelu`` on K.
    - ``visionzip`` / ``vispruner``: the selection (and VisionZip's merge), with the attention probabilities the
      tower's ``encode`` recomputes for one layer (``2·T²·D``), then ``mlp2x_gelu`` on K (``_pre_llm_cost``).
    - ``cdpruner``: ``mlp2x_gelu`` on all N tokens (projector part), then the similarity, the relevance (the
      visual projection and CLIP's text tower over the instruction's 77-token segments) and the greedy DPP.

    Args:
        method: A key of :data:`MODULE_FLOPS`.
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
        options = {"score_source": "cls_row", **options}  # the model path: the CLS row of the next layer's q·Kᵀ
        module = prumerge_flops(d, n, budget - 1, **options)
        return ModuleCost(name, budget, "pre", module, _mlp(budget, setting), _PRUMERGE_NOTES[options.get("score_source", "cls_row")])
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
    if method in _PRE_LLM:
        return _PRE_LLM[method](name, budget, setting, **options)
    cutoff = math.isqrt(budget)
    if cutoff * cutoff != budget or cutoff > min(setting.grid):
        raise ValueError(f"fourier_vlm gives C² tokens with C at most {min(setting.grid)}, so {budget} is not a budget it can give")
    return ModuleCost(name, budget, "pre", fourier_vlm_flops(d, setting.grid, budget, **options), _mlp(budget, setting))


# ------------------------------------------------------------------ VisionZip, VisPruner, CDPruner (issue 32)
#: What every pre-LLM row says about its accounting (the LLM then sees K visual tokens in every layer).
_PRE_LLM_NOTE = "the LLM sees K visual tokens in every layer"
#: VisionZip's and VisPruner's rows: where their attention comes from.
_SCORES_NOTE = f"scores: one tower layer's attention, recomputed (counted with attention scores); {_PRE_LLM_NOTE}"


def _visionzip_cost(name: str, budget: int, setting: CostSetting, *, contextual: int | None = None, heads: int = 16, has_cls: bool = True) -> ModuleCost:
    """VisionZip: ``heads`` of the tower (16 on CLIP-L/14 and SigLIP-so400m) size the head-mean keys."""
    parts = visionzip_flops(setting.mm_hidden, setting.tokens, budget, heads=heads, contextual=contextual, has_cls=has_cls,
                            count_attention=setting.count_attention)
    return ModuleCost(name, budget, "pre", parts, _mlp(budget, setting), _SCORES_NOTE)


def _vispruner_cost(name: str, budget: int, setting: CostSetting, *, important_ratio: float = 0.5, has_cls: bool = True) -> ModuleCost:
    parts = vispruner_flops(setting.mm_hidden, setting.tokens, budget, important_ratio=important_ratio, has_cls=has_cls,
                            count_attention=setting.count_attention)
    return ModuleCost(name, budget, "pre", parts, _mlp(budget, setting), _SCORES_NOTE)


def _cdpruner_cost(name: str, budget: int, setting: CostSetting, *, text: dict[str, int] | None = None) -> ModuleCost:
    """CDPruner with CLIP-L/14's text tower (``text``: its dimensions, :data:`~.cdpruner.CLIP_L_TEXT` by default) over
    ``⌈(prompt_tokens + 2) / context⌉`` segments (the question and CLIP's BOS/EOS)."""
    text = dict(CLIP_L_TEXT if text is None else text)
    segments = max(1, -(-(setting.prompt_tokens + 2) // text["context"]))
    module: dict[str, Any] = dict(cdpruner_flops(setting.tokens, setting.lm.hidden, budget, tower_dim=setting.mm_hidden,
                                                 joint_dim=text["projection"], segments=segments))
    module["text_tower"] = clip_text_flops(segments, **text)
    note = f"projector on all N tokens, then selection; CLIP text tower over {segments} x {text['context']} tokens; {_PRE_LLM_NOTE}"
    return ModuleCost(name, budget, "post", module, _mlp(setting.tokens, setting), note)


_PRE_LLM: dict[str, Callable[..., ModuleCost]] = {"visionzip": _visionzip_cost, "vispruner": _vispruner_cost, "cdpruner": _cdpruner_cost}
