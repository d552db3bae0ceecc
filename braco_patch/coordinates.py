"""Coordinate organisation of the retained backbone subspace (paper §3.3, App. I).

With the basis and the retained ``C x C`` block fixed, the backbone tokens are ``Z = A Y`` for an
orthogonal ``A`` acting on the ``K_b = C²`` retained coefficients (row-major over (u, v)):

- ``coef`` (the paper's ``vanilla``): ``A = I``, coefficient tokens;
- ``idct``: ``A = U_C``, the size-C inverse DCT, giving a ``C x C`` coarse spatial grid (row-major (p, q));
- ``randrot``: a fixed seeded Haar-random rotation (ablation);
- ``auto``: ``coef`` when ``C² < 16`` and ``idct`` from ``C² ≥ 16`` on (App. I, "Outcome").

All organisations are orthogonal, so the retained energy is unchanged (App. A, eq. ``app_A_invariance``).
"""

from __future__ import annotations

import torch

from .basis import dct_matrix, random_orthogonal

__all__ = ["COORDINATE_ALIASES", "COORDINATE_MODES", "IDCT_MIN_BACKBONE", "canonical_coordinates", "resolve_coordinates",
           "coordinate_matrix"]

COORDINATE_MODES = ("auto", "coef", "idct", "randrot")
#: Other spellings of a mode: the paper calls coefficient tokens ``vanilla``.
COORDINATE_ALIASES = {"vanilla": "coef"}

#: Smallest backbone size K_b = C² at which ``auto`` switches from coefficients to the coarse grid.
IDCT_MIN_BACKBONE = 16


def canonical_coordinates(mode: str) -> str:
    """``mode`` with its alias resolved (``vanilla`` → ``coef``); one of :data:`COORDINATE_MODES`.

    Raises:
        ValueError: If ``mode`` is neither a mode nor an alias.
    """
    mode = COORDINATE_ALIASES.get(mode, mode)
    if mode not in COORDINATE_MODES:
        raise ValueError(
            f"unknown coordinate mode {mode!r}; expected one of {list(COORDINATE_MODES)} (or 'vanilla' for 'coef')"
        )
    return mode


def resolve_coordinates(mode: str, cutoff: int) -> str:
    """Map ``mode`` (incl. ``auto`` and the alias ``vanilla``) to ``coef``, ``idct`` or ``randrot``."""
    mode = canonical_coordinates(mode)
    if mode == "auto":
        return "idct" if cutoff * cutoff >= IDCT_MIN_BACKBONE else "coef"
    return mode


def coordinate_matrix(mode: str, cutoff: int, seed: int = 0) -> torch.Tensor:
    """The orthogonal ``A`` of ``mode`` for a ``C x C`` block.

    Returns:
        ``[C², C²]`` float64 such that ``Z = A @ Y`` for ``Y`` flattened row-major over (u, v).
    """
    mode = resolve_coordinates(mode, cutoff)
    k_b = cutoff * cutoff
    if mode == "coef":
        return torch.eye(k_b, dtype=torch.float64)
    if mode == "idct":
        # Z[p, q] = Σ_{u,v} D_C[u, p] Y[u, v] D_C[v, q]  ->  A[(p,q), (u,v)] = D_C[u, p] D_C[v, q].
        d_t = dct_matrix(cutoff).transpose(0, 1)
        return torch.kron(d_t, d_t)
    return random_orthogonal(k_b, seed)
