"""Analytic FLOPs of a LLaVA-style prefill, from configs alone: the FLOP convention every count follows.

Convention (one for every number this module returns):

- **1 multiply-add = 2 FLOPs.** Every matrix product is counted: linear layers (their bias additions are not),
  the patch-embedding convolution, batched matmuls and einsums. Attention-score products (``QKᵀ`` and ``A·V``,
  over the full ``T x T`` matrix, per query head) are counted only with ``count_attention=True``.
- **Elementwise additions and multiplications, 1 FLOP per output element, are counted inside a compressor
  only**, where they are part of its formulas (a gate, an added embedding, a prior, a selection test, a scale;
  a compressor's count names such parts with a key of :data:`ELEMENTWISE_PARTS`). In the vision tower and the
  LLM the elementwise work (residual adds, norms, RoPE, the SwiGLU product) is < 0.1 % of a layer and is not
  counted.
- **Not counted anywhere:** normalisation, activations, subtraction, division, powers, reductions, sorting,
  softmax/sparsemax thresholds and transcendental functions.

This is the op set of ``torch.profiler(with_flops=True)`` (``mm``/``addmm``/``bmm``/``conv2d`` at 2 FLOPs
per multiply-add, ``add``/``mul`` at one per element); :mod:`.measure` prints the profiler's count next to these
numbers. Every function returns an ordered ``{part: FLOPs}`` dict (a compressor's count may nest them,
``{step: {part: FLOPs}}``); :func:`total` sums either.

The counts a plugin counts its own module with (linear layers, attention scores, an ``mlp{N}x_gelu``, an LLM
prefill, :class:`LMDims`, :func:`total`, :func:`elementwise`) are the plugin API's (:mod:`llava.plugin_api`, the one
module a plugin file builds on) and are re-exported here; the vision tower's, which only the engine counts, live here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from llava.plugin_api import (
    ELEMENTWISE_PARTS,
    LMDims,
    LMHead,
    attention_score_flops,
    elementwise,
    linear_flops,
    llm_prefill_flops,
    projector_flops,
    total,
)

__all__ = [
    "CONVENTION",
    "LMHead",
    "VisionDims",
    "LMDims",
    "linear_flops",
    "attention_score_flops",
    "vision_tower_flops",
    "vision_layers_run",
    "projector_flops",
    "llm_prefill_flops",
    "total",
    "elementwise",
    "ELEMENTWISE_PARTS",
]

#: One-line statement of the convention above, printed with every cost table and stored in its JSON.
CONVENTION = (
    "1 multiply-add = 2 FLOPs; every matrix product (linear layers without bias adds, patch convolution, batched "
    "matmuls; attention scores only with --count-attention); elementwise add/mul (1 per element) inside the "
    "compressor only; norms, activations, reductions, sorting not counted"
)

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
