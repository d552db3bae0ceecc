"""Analytic FLOPs of a LLaVA-style prefill, from configs alone (paper Table 1, App. "Compression-module cost").

Convention (one for every number this module returns):

- **1 multiply-add = 2 FLOPs.** Every matrix product is counted: linear layers (their bias additions are not),
  the patch-embedding convolution, batched matmuls and einsums. Attention-score products (``QKᵀ`` and ``A·V``,
  over the full ``T x T`` matrix, per query head) are counted only with ``count_attention=True``.
- **Elementwise additions and multiplications, 1 FLOP per output element, are counted inside the compressor
  only**, where they are part of Braco's formulas (embedding gate and add, prior, sparsemax support test,
  residual scale). The paper's stage table counts them: step 2 = 37.749 (projection) + 0.590 (gate) + 0.590
  (add) = 38.928 MFLOP. In the vision tower and the LLM the elementwise work (residual adds, norms, RoPE,
  the SwiGLU product) is < 0.1 % of a layer and is not counted.
- **Not counted anywhere:** normalisation, activations, subtraction, division, powers, reductions, sorting,
  softmax/sparsemax thresholds and transcendental functions.

This is the op set of ``torch.profiler(with_flops=True)`` (``mm``/``addmm``/``bmm``/``conv2d`` at 2 FLOPs
per multiply-add, ``add``/``mul`` at one per element), which the paper used; :mod:`.measure` prints the
profiler's count next to these numbers. Every function returns an ordered ``{part: FLOPs}`` dict (or, for
the compressor, ``{step: {part: FLOPs}}``); :func:`total` sums either.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping

from ..config import BracoConfig
from ..embedding import feature_width

__all__ = [
    "CONVENTION",
    "VisionDims",
    "LMDims",
    "linear_flops",
    "attention_score_flops",
    "vision_tower_flops",
    "vision_layers_run",
    "projector_flops",
    "llm_prefill_flops",
    "official_compressor_flops",
    "ours_compressor_flops",
    "compressor_flops",
    "check_allocation",
    "total",
    "elementwise",
    "ELEMENTWISE_PARTS",
]

#: One-line statement of the convention above, printed by ``braco cost`` and stored in its JSON.
CONVENTION = (
    "1 multiply-add = 2 FLOPs; every matrix product (linear layers without bias adds, patch convolution, batched "
    "matmuls; attention scores only with --count-attention); elementwise add/mul (1 per element) inside the "
    "compressor only; norms, activations, reductions, sorting not counted"
)

LMHead = Literal["all", "last"]
VisionLayers = Literal["all", "selected"]


# -- dimensions --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VisionDims:
    """What the FLOPs of a ViT tower (CLIP or SigLIP) depend on."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    image_size: int
    patch_size: int
    channels: int = 3
    cls_token: bool = True  # CLIP prepends a CLS token; SigLIP has none

    @classmethod
    def from_config(cls, cfg: Any) -> "VisionDims":
        """From a ``CLIPVisionConfig`` or ``SiglipVisionConfig`` (or anything with the same fields)."""
        model_type = getattr(cfg, "model_type", "")
        if model_type not in ("clip_vision_model", "siglip_vision_model"):
            raise ValueError(f"unsupported vision config model_type {model_type!r}; expected 'clip_vision_model' or 'siglip_vision_model'")
        return cls(
            hidden=cfg.hidden_size, intermediate=cfg.intermediate_size, layers=cfg.num_hidden_layers,
            heads=cfg.num_attention_heads, image_size=cfg.image_size, patch_size=cfg.patch_size,
            channels=getattr(cfg, "num_channels", 3), cls_token=model_type == "clip_vision_model",
        )

    def grid(self, image_size: int | None = None) -> int:
        """Patches per side for ``image_size`` (default: the config's)."""
        return (image_size or self.image_size) // self.patch_size

    def tokens(self, image_size: int | None = None) -> int:
        """Tokens the tower runs on: ``grid²`` (+1 CLS for CLIP)."""
        return self.grid(image_size) ** 2 + int(self.cls_token)


@dataclass(frozen=True)
class LMDims:
    """What the FLOPs of a decoder-only LLM (Llama, Qwen2) depend on."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_config(cls, cfg: Any) -> "LMDims":
        """From a ``LlamaConfig`` or ``Qwen2Config`` (grouped-query attention via ``num_key_value_heads``)."""
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        return cls(
            hidden=cfg.hidden_size, intermediate=cfg.intermediate_size, layers=cfg.num_hidden_layers, heads=heads,
            kv_heads=getattr(cfg, "num_key_value_heads", None) or heads, head_dim=head_dim, vocab=cfg.vocab_size,
        )

    def capped(self, layers: int | None) -> "LMDims":
        return self if layers is None else replace(self, layers=min(layers, self.layers))


# -- primitives --------------------------------------------------------------------------------------
def linear_flops(tokens: int, d_in: int, d_out: int) -> int:
    """``Linear(d_in, d_out)`` on ``tokens`` rows: ``2·T·d_in·d_out`` (bias add not counted)."""
    return 2 * tokens * d_in * d_out


def attention_score_flops(q_tokens: int, k_tokens: int, heads: int, head_dim: int) -> int:
    """``QKᵀ`` and ``A·V`` over the full ``Tq x Tk`` matrix: ``2 · 2·Tq·Tk·heads·head_dim``."""
    return 4 * q_tokens * k_tokens * heads * head_dim


def total(costs: Mapping[str, Any]) -> int:
    """Sum of a flat or nested ``{name: FLOPs}`` mapping."""
    return sum(total(v) if isinstance(v, Mapping) else int(v) for v in costs.values())


#: Compressor parts that are elementwise arithmetic (every other part is a matrix product).
ELEMENTWISE_PARTS = frozenset({"gate", "add", "prior", "selection", "scale"})


def elementwise(costs: Mapping[str, Any]) -> int:
    """The elementwise share of a (nested) cost mapping; ``total(costs) - elementwise(costs)`` is matrix products."""
    return sum(elementwise(v) if isinstance(v, Mapping) else (int(v) if k in ELEMENTWISE_PARTS else 0) for k, v in costs.items())


# -- vision tower ------------------------------------------------------------------------------------
def vision_layers_run(dims: VisionDims, select_layer: int, policy: VisionLayers = "all") -> int:
    """Encoder layers that run: ``all`` (an HF tower runs every layer even when LLaVA reads
    ``hidden_states[select_layer]``) or ``selected`` (only up to the selected layer)."""
    if policy == "all":
        return dims.layers
    if policy != "selected":
        raise ValueError(f"unknown vision-layer policy {policy!r}; expected 'all' or 'selected'")
    run = dims.layers + 1 + select_layer if select_layer < 0 else select_layer
    if not 0 <= run <= dims.layers:
        raise ValueError(f"select layer {select_layer} is outside a tower of {dims.layers} layers")
    return run


def vision_tower_flops(
    dims: VisionDims, *, image_size: int | None = None, layers: int | None = None, count_attention: bool = False
) -> dict[str, int]:
    """One image (one view) through the ViT: patch embedding and ``layers`` encoder layers (default: all).

    Per layer on ``T`` tokens of width ``d``: q/k/v/o ``4·2·T·d²``, MLP ``2·2·T·d·m``, and with
    ``count_attention`` the scores ``4·T²·d``. Position-embedding adds and norms are not counted.
    """
    layers = dims.layers if layers is None else layers
    grid, tokens, d = dims.grid(image_size), dims.tokens(image_size), dims.hidden
    patch_in = dims.channels * dims.patch_size**2
    return {
        "patch_embed": linear_flops(grid * grid, patch_in, d),
        "attention_proj": layers * 4 * linear_flops(tokens, d, d),
        "attention_scores": layers * attention_score_flops(tokens, tokens, dims.heads, d // dims.heads) if count_attention else 0,
        "mlp": layers * 2 * linear_flops(tokens, d, dims.intermediate),
    }


# -- projector and LLM -------------------------------------------------------------------------------
def projector_flops(tokens: int, d_in: int, d_hidden: int, depth: int = 2) -> dict[str, int]:
    """``mlp{depth}x_gelu`` on ``tokens`` tokens: ``Linear(d_in, h)`` then ``depth-1`` x ``Linear(h, h)``."""
    out = {"linear_1": linear_flops(tokens, d_in, d_hidden)}
    for i in range(2, depth + 1):
        out[f"linear_{i}"] = linear_flops(tokens, d_hidden, d_hidden)
    return out


def llm_prefill_flops(dims: LMDims, tokens: int, *, count_attention: bool = False, lm_head: LMHead = "all") -> dict[str, int]:
    """One prefill forward over ``tokens`` positions.

    Per layer: q and o ``2·T·h·(heads·hd)``, k and v ``2·T·h·(kv_heads·hd)`` (grouped-query attention),
    SwiGLU gate/up/down ``3·2·T·h·m``; with ``count_attention`` the scores over all query heads
    ``4·T²·heads·hd`` (full matrix, as dense kernels compute it). ``lm_head``: logits for ``all`` positions
    (what transformers 4.37's prefill computed, and so what the paper's profiler saw) or the ``last`` one.
    """
    if lm_head not in ("all", "last"):
        raise ValueError(f"unknown lm_head accounting {lm_head!r}; expected 'all' or 'last'")
    h, q_width, kv_width = dims.hidden, dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
    per_layer_proj = 2 * linear_flops(tokens, h, q_width) + 2 * linear_flops(tokens, h, kv_width)
    return {
        "attention_proj": dims.layers * per_layer_proj,
        "attention_scores": dims.layers * attention_score_flops(tokens, tokens, dims.heads, dims.head_dim) if count_attention else 0,
        "mlp": dims.layers * 3 * linear_flops(tokens, h, dims.intermediate),
        "lm_head": linear_flops(tokens if lm_head == "all" else 1, h, dims.vocab),
    }


# -- Braco compressor --------------------------------------------------------------------------------
def _residual_step(cfg: BracoConfig, dim: int, grid: tuple[int, int], batch: int) -> dict[str, int]:
    """Step 4 (identical in both computations): scorer, prior, selection, pooling, scale."""
    s = cfg.residual_tokens
    if s == 0:
        return {}
    h, w = grid
    length = h * w
    out: dict[str, int] = {}
    if cfg.scorer_hidden_mult > 0:
        hidden = max(int(round(dim * cfg.scorer_hidden_mult)), 1)
        out["scorer_linear_1"] = linear_flops(length, dim, hidden)
        out["scorer_linear_2"] = linear_flops(length, hidden, s)
    else:
        out["scorer_linear"] = linear_flops(length, dim, s)
    if cfg.prior == "grad":
        # neighbour-energy accumulation adds, prior gate (weight · E) and its add to the S logit maps
        out["prior"] = 2 * (h - 1) * w + 2 * h * (w - 1) + length + s * length
    out["selection"] = s * length if cfg.selection == "sparsemax" else 0  # k·z_(k) support test
    out["pool"] = 2 * s * length * dim
    out["scale"] = s * dim
    return {k: v * batch for k, v in out.items()}


def official_compressor_flops(cfg: BracoConfig, dim: int, grid: tuple[int, int], batch: int = 1) -> dict[str, dict[str, int]]:
    """The official computation (braco-official §1) per paper step, for one call on ``batch`` images.

    Step 1: full two-sided DCT ``(D_H X) D_Wᵀ`` of every channel; step 2: polar embedding projected at all
    ``H·W`` lattice positions and gated (once per call: it does not depend on the input), then added to
    every image before truncation; step 3: ``C x C`` inverse DCT (idct only); step 4: residual tokens.
    """
    if cfg.embedding not in ("polar", "none"):
        raise ValueError(f"the official computation has embedding 'polar' or 'none', got {cfg.embedding!r}")
    coords = cfg.resolved_coordinates
    if coords not in ("coef", "idct"):
        raise ValueError(f"the official computation has coordinates 'coef' or 'idct', got {coords!r}")
    h, w = grid
    c = cfg.cutoff
    length = h * w
    step2: dict[str, int] = {}
    if cfg.embedding == "polar":
        width = feature_width("polar", cfg.num_freqs, cfg.include_raw)
        step2 = {"projection": linear_flops(length, width, dim), "gate": length * dim, "add": batch * length * dim}
    return {
        "step1": {"dct_left": batch * 2 * dim * h * h * w, "dct_right": batch * 2 * dim * h * w * w},
        "step2": step2,
        "step3": {"idct": batch * 2 * 2 * dim * c**3} if coords == "idct" else {},
        "step4": _residual_step(cfg, dim, grid, batch),
    }


def ours_compressor_flops(
    cfg: BracoConfig, dim: int, grid: tuple[int, int], batch: int = 1, *, training: bool = False
) -> dict[str, dict[str, int]]:
    """:class:`~braco_patch.coder.BracoCoder` per paper step, for one call on ``batch`` images.

    Steps 1+3 are one ``[C², H·W] x [H·W, d]`` product (the coordinate matrix is folded into the retained
    DCT rows, so step 3 is free). In eval the gated embedding is a cached ``[C², d]`` constant: step 2 is
    its add; in training it is recomputed (once per call) on the ``C²`` retained coordinates only.
    """
    c2, length = cfg.cutoff**2, grid[0] * grid[1]
    step2: dict[str, int] = {}
    if cfg.cutoff > 0 and cfg.embedding != "none":
        if training:
            if cfg.embedding == "learned":
                step2["projection"] = linear_flops(c2, c2, dim)  # A @ table
            else:
                step2["projection"] = linear_flops(c2, feature_width(cfg.embedding, cfg.num_freqs, cfg.include_raw), dim)
            step2["gate"] = c2 * dim
        step2["add"] = batch * c2 * dim
    return {
        "step1": {"retained_rows": batch * linear_flops(c2, length, dim)} if c2 else {},
        "step2": step2,
        "step3": {},
        "step4": _residual_step(cfg, dim, grid, batch),
    }


def compressor_flops(
    cfg: BracoConfig, dim: int, grid: tuple[int, int], computation: Literal["official", "ours"] = "official", batch: int = 1
) -> dict[str, dict[str, int]]:
    """Dispatch to :func:`official_compressor_flops` or :func:`ours_compressor_flops` (eval)."""
    if computation == "official":
        return official_compressor_flops(cfg, dim, grid, batch)
    if computation == "ours":
        return ours_compressor_flops(cfg, dim, grid, batch)
    raise ValueError(f"unknown compressor computation {computation!r}; expected 'official' or 'ours'")


def check_allocation(cfg: BracoConfig, grid: tuple[int, int], label: str) -> None:
    """Raise ``ValueError`` when the allocation's C exceeds the token grid, or C² + S its token count."""
    if cfg.cutoff > min(grid):
        raise ValueError(
            f"{label} needs C={cfg.cutoff} but the {grid[0]}x{grid[1]} token grid allows at most C={min(grid)}"
        )
    tokens = grid[0] * grid[1]
    if cfg.output_tokens > tokens:
        raise ValueError(
            f"{label} outputs {cfg.output_tokens} tokens but the {grid[0]}x{grid[1]} grid has only {tokens}; "
            f"with C={cfg.cutoff}, S must be at most {tokens - cfg.backbone_tokens}"
        )

