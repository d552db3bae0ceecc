"""Braco's compressor FLOPs per paper step, in llava's FLOP convention (:mod:`llava.cost.flops`; the counting
primitives are the plugin API's).

Two computations of the same coder output: ``official`` (braco-official §1: the full two-sided DCT of the
lattice and the embedding at every lattice position, the paper's stage table) and ``ours``
(:class:`~braco_patch.coder.BracoCoder`: only the retained rows, the embedding cached in eval).
The Braco plugin's cost model (:func:`braco_patch.llava_plugin.braco_module_cost`) and ``braco cost``'s own tables
count with these. Elementwise parts (embedding gate and
add, prior, sparsemax support test, residual scale) are counted, as the paper's stage table counts them:
step 2 = 37.749 (projection) + 0.590 (gate) + 0.590 (add) = 38.928 MFLOP.
"""

from __future__ import annotations

from typing import Literal

from llava.plugin_api import linear_flops

from ..config import BracoConfig
from ..embedding import feature_width

__all__ = ["check_allocation", "compressor_flops", "official_compressor_flops", "ours_compressor_flops"]


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
    every image before truncation; step 3: ``C x C`` inverse DCT (idct), or the dense ``C² x C²`` rotation of
    the retained block (``randrot``, the paper's ablation, which the release does not ship); step 4: residual tokens.
    """
    if cfg.embedding not in ("polar", "none"):
        raise ValueError(f"the official computation has embedding 'polar' or 'none', got {cfg.embedding!r}")
    coords = cfg.resolved_coordinates
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
        "step3": _coordinate_step(coords, c, dim, batch),
        "step4": _residual_step(cfg, dim, grid, batch),
    }


def _coordinate_step(coords: str, cutoff: int, dim: int, batch: int) -> dict[str, int]:
    """Step 3 applied to the retained ``C x C`` block: nothing (coef), two size-C products (idct), one dense rotation."""
    if coords == "idct":
        return {"idct": batch * 2 * 2 * dim * cutoff**3}
    if coords == "randrot":
        return {"rotation": batch * linear_flops(cutoff * cutoff, cutoff * cutoff, dim)}
    return {}


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
