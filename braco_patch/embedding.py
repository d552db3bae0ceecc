"""Basis-coordinate embeddings (paper §3.3 "Position embeddings", App. H).

After the DCT, a retained token is a global coefficient indexed by its frequency coordinate (u, v), not a
place in the image. These functions give input-independent features of (u, v); the coder projects them
to the token width, gates them with a learnable scalar and adds them to the retained coefficients
(App. H, eq. ``coder_add_pe``).

Features are built in float64 for the retained ``C x C`` block only, row-major over (u, v); the coder
casts them once to its projection dtype.
"""

from __future__ import annotations

import math

import torch

__all__ = ["EMBEDDINGS", "polar_fourier_features", "sincos2d_features", "embedding_features", "feature_width"]

#: ``polar`` is the paper's; ``learned``, ``sincos2d`` and ``none`` are the PE ablation's alternatives.
EMBEDDINGS = ("polar", "learned", "sincos2d", "none")


def _retained_coordinates(cutoff: int) -> tuple[torch.Tensor, torch.Tensor]:
    u = torch.arange(cutoff, dtype=torch.float64).repeat_interleave(cutoff)
    v = torch.arange(cutoff, dtype=torch.float64).repeat(cutoff)
    return u, v


def polar_fourier_features(
    cutoff: int, grid: tuple[int, int], num_freqs: int = 8, include_raw: bool = False
) -> torch.Tensor:
    """Polar Fourier features φ(u, v) of App. H, eq. ``specialize_polar_pe``.

    ``r = √(u² + v²) / √((H-1)² + (W-1)²)`` (= ``√2 (N-1)`` on an N x N grid, the full-lattice corner, as
    the official code normalises), ``θ = atan2(v, u)`` with θ = 0 at the origin, bands ``ω_k = 2^k``.

    Returns:
        ``[C², 4F]`` ordered ``[sin(πω_k r)]_k, [cos(πω_k r)]_k, [sin(ω_k θ)]_k, [cos(ω_k θ)]_k``; with
        ``include_raw`` the columns ``[r, sin θ, cos θ]`` come first (``[C², 4F + 3]``).
    """
    u, v = _retained_coordinates(cutoff)
    h, w = grid
    norm = max(math.sqrt((h - 1) ** 2 + (w - 1) ** 2), 1.0)
    r = torch.sqrt(u * u + v * v) / norm
    theta = torch.atan2(v, u)  # atan2(0, 0) == 0: the paper's convention at the DC coordinate
    bands = 2.0 ** torch.arange(num_freqs, dtype=torch.float64)
    radial = math.pi * bands * r.unsqueeze(1)
    angular = bands * theta.unsqueeze(1)
    feats = [radial.sin(), radial.cos(), angular.sin(), angular.cos()]
    if include_raw:
        feats.insert(0, torch.stack([r, theta.sin(), theta.cos()], dim=1))
    return torch.cat(feats, dim=1)


def sincos2d_features(cutoff: int, grid: tuple[int, int], num_freqs: int = 8) -> torch.Tensor:
    """Axis-separable sin/cos features of u and v (the PE ablation's "2-D sincos" variant).

    Returns:
        ``[C², 4F]``: ``[sin(πω_k u'), cos(πω_k u'), sin(πω_k v'), cos(πω_k v')]`` with ``u' = u/(H-1)``,
        ``v' = v/(W-1)`` and ``ω_k = 2^k``.
    """
    u, v = _retained_coordinates(cutoff)
    h, w = grid
    bands = math.pi * 2.0 ** torch.arange(num_freqs, dtype=torch.float64)
    pu = bands * (u / max(h - 1, 1)).unsqueeze(1)
    pv = bands * (v / max(w - 1, 1)).unsqueeze(1)
    return torch.cat([pu.sin(), pu.cos(), pv.sin(), pv.cos()], dim=1)


def feature_width(kind: str, num_freqs: int, include_raw: bool = False) -> int:
    """Width of the fixed feature vector for ``polar``/``sincos2d`` (0 for ``learned``/``none``)."""
    if kind == "polar":
        return 4 * num_freqs + (3 if include_raw else 0)
    if kind == "sincos2d":
        return 4 * num_freqs
    return 0


def embedding_features(
    kind: str, cutoff: int, grid: tuple[int, int], num_freqs: int = 8, include_raw: bool = False
) -> torch.Tensor:
    """Fixed features for ``polar`` or ``sincos2d``; ``[C², feature_width]`` float64."""
    if kind == "polar":
        return polar_fourier_features(cutoff, grid, num_freqs, include_raw)
    if kind == "sincos2d":
        return sincos2d_features(cutoff, grid, num_freqs)
    raise ValueError(f"embedding {kind!r} has no fixed features; expected 'polar' or 'sincos2d'")
