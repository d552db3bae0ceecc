"""Spatial residual tokens (paper §3.3 "Spatial residual tokens", §3.4 eq. ``coder_pool``, App. J.2).

A TokenLearner-style scorer gives ``S`` logit maps over the ``H x W`` token grid. An optional standardised
gradient-energy prior biases them towards detailed regions. Sparsemax turns each map into a sparse
weight vector on the simplex (eq. ``coder_sparsemax``), and each residual token is the weighted sum of
spatial tokens. Layer normalisation and a learnable scale of the pooled tokens live in the coder, which
owns the parameters under their checkpoint names.
"""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = [
    "SELECTIONS",
    "build_scorer",
    "gradient_energy",
    "standardise",
    "check_selection",
    "select",
    "pool",
    "sparsemax_traceable",
]

#: Selection functions; ``entmax:<alpha>`` (alpha > 1, bisection) is accepted as well.
SELECTIONS = ("sparsemax", "softmax", "entmax15")


def build_scorer(dim: int, residual_tokens: int, hidden_mult: float = 1) -> nn.Sequential:
    """``LayerNorm(d) → Linear(d, d·m) → GELU → Linear(d·m, S)``; ``m ≤ 0`` gives ``LayerNorm → Linear(d, S)``.

    The indices (0 norm, 1 and 3 linear) are the official checkpoint layout.
    """
    if hidden_mult <= 0:
        return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, residual_tokens))
    hidden = max(int(round(dim * hidden_mult)), 1)
    return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, residual_tokens))


def gradient_energy(grid: torch.Tensor) -> torch.Tensor:
    """Sum of squared feature differences to the existing 4-neighbours, in float32.

    Border tokens have fewer neighbours and are not renormalised (as in the official code).

    Args:
        grid: ``[B, H, W, d]`` tokens.
    Returns:
        ``[B, H·W]`` float32.
    """
    g = grid.float()
    vertical = (g[:, 1:] - g[:, :-1]).pow(2).sum(-1)  # [B, H-1, W]
    horizontal = (g[:, :, 1:] - g[:, :, :-1]).pow(2).sum(-1)  # [B, H, W-1]
    energy = g.new_zeros(g.shape[:3])
    energy[:, 1:] += vertical
    energy[:, :-1] += vertical
    energy[:, :, 1:] += horizontal
    energy[:, :, :-1] += horizontal
    return energy.flatten(1)


def standardise(energy: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Per-image ``(e - mean) / (unbiased std + eps)`` over the last axis."""
    mean = energy.mean(dim=-1, keepdim=True)
    std = energy.std(dim=-1, keepdim=True, unbiased=True)
    return (energy - mean) / (std + eps)


def check_selection(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is a known selection function."""
    if name in SELECTIONS:
        return
    if name.startswith("entmax:"):
        try:
            alpha = float(name.split(":", 1)[1])
        except ValueError:
            alpha = float("nan")
        if alpha > 1:
            return
    raise ValueError(f"unknown selection function {name!r}; expected one of {list(SELECTIONS)} or 'entmax:<alpha>' with alpha > 1")


def select(logits: torch.Tensor, temperature: torch.Tensor, name: str = "sparsemax") -> torch.Tensor:
    """Selection weights over the last axis of ``logits / temperature``.

    The division happens in the logits' dtype, the selection in float32 (sparsemax's sort and threshold
    are precision-sensitive), and the weights come back in the logits' dtype.

    Args:
        logits: ``[B, S, L]``.
        temperature: 0-dim tensor (kept on device: no host sync).
    Returns:
        ``[B, S, L]``; every row sums to 1, except rows whose logits hold a NaN or an infinity, which are NaN.
    """
    z = (logits / temperature.to(logits.dtype)).float()
    # A row with a NaN or an infinity has no support: sort-based selections would index position -1 and
    # crash. Such rows are computed on zeros and then set to NaN, so a bad input propagates as NaN (as
    # softmax does) instead of failing. Done with masks on the device: forward must not sync with the host.
    bad = ~torch.isfinite(z).all(dim=-1, keepdim=True)
    z = torch.where(bad, torch.zeros_like(z), z)
    w = _select(z, name)
    return torch.where(bad, torch.full_like(w, float("nan")), w).to(logits.dtype)


def _select(z: torch.Tensor, name: str) -> torch.Tensor:
    """The selection function ``name`` over the last axis of finite float32 scores ``z``."""
    if name == "sparsemax":
        return sparsemax_traceable(z) if torch.compiler.is_compiling() else _entmax().sparsemax(z, dim=-1)
    if name == "softmax":
        return torch.softmax(z, dim=-1)
    if name == "entmax15":
        return _entmax().entmax15(z, dim=-1)
    check_selection(name)
    return _entmax().entmax_bisect(z, alpha=float(name.split(":", 1)[1]), dim=-1)


def sparsemax_traceable(z: torch.Tensor) -> torch.Tensor:
    """Sparsemax over the last axis from plain tensor ops, for ``torch.compile`` graphs.

    ``entmax.sparsemax`` is a custom autograd Function that the compiler cannot trace; this twin performs
    the same operations in the same order (shift by the max, sort, cumulative sum, support size,
    threshold, clamp), so its forward is identical, and autograd through it yields the sparsemax Jacobian
    (the support size is piecewise constant).
    """
    z = z - z.max(dim=-1, keepdim=True).values
    sorted_z = torch.sort(z, dim=-1, descending=True).values
    cumsum = sorted_z.cumsum(dim=-1) - 1
    rank = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)
    support = (rank * sorted_z > cumsum).sum(dim=-1, keepdim=True)
    tau = cumsum.gather(-1, support - 1) / support.to(z.dtype)
    return torch.clamp(z - tau, min=0)


def _entmax():
    import entmax

    return entmax


def pool(weights: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Residual tokens ``z_s = w_sᵀ X`` (eq. ``coder_pool``): ``[B, S, L] x [B, L, d] → [B, S, d]``."""
    return torch.bmm(weights.to(tokens.dtype), tokens)
