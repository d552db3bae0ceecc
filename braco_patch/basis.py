"""Orthonormal 1-D bases and separable lattice transforms (paper §3.3, App. F–G).

Every basis is an ``[n, n]`` float64 matrix whose rows are the basis vectors (row ``k`` is frequency or
scale ``k``), so ``B @ x`` gives coefficients and ``B.T @ y`` inverts. Callers cast once, at the seam
where the basis meets features.

A 2-D transform of an ``H x W`` token lattice is separable: ``Y = B_h X B_wᵀ``. Flattened row-major it is
the Kronecker product ``B_h ⊗ B_w`` acting on the ``H·W`` token axis, which is how the coder applies
only the retained rows in one matrix product.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "dct_matrix",
    "dct_rows",
    "haar_matrix",
    "random_orthogonal",
    "identity_matrix",
    "make_basis",
    "BASES",
    "lattice_transform",
    "lattice_inverse",
    "retained_block_operator",
]


def dct_matrix(n: int) -> torch.Tensor:
    """Orthonormal DCT-II: ``D[k, j] = a_k cos(π (j + ½) k / n)``, ``a_0 = √(1/n)``, ``a_k = √(2/n)``.

    Returns:
        ``[n, n]`` float64, rows are frequencies.
    """
    return dct_rows(n, n)


def dct_rows(n: int, rows: int, positions: torch.Tensor | None = None) -> torch.Tensor:
    """The first ``rows`` DCT-II basis functions of length ``n``, evaluated at ``positions``.

    At the integer positions ``0 .. n-1`` (the default) these are the rows of :func:`dct_matrix`; at
    fractional positions they are the smooth cosines between lattice points (used to draw a low-pass surface).

    Returns:
        ``[rows, len(positions)]`` float64.
    """
    _check_size(n)
    if not 1 <= rows <= n:
        raise ValueError(f"rows must be between 1 and n={n}, got {rows}")
    k = torch.arange(rows, dtype=torch.float64).unsqueeze(1)
    j = torch.arange(n, dtype=torch.float64) if positions is None else torch.as_tensor(positions, dtype=torch.float64)
    d = torch.cos(math.pi / n * (j.unsqueeze(0) + 0.5) * k)
    d[0] *= math.sqrt(1.0 / n)
    d[1:] *= math.sqrt(2.0 / n)
    return d


def haar_matrix(n: int) -> torch.Tensor:
    """Orthonormal Haar basis, ordered coarse to fine.

    Row 0 is the constant vector. Every later row is a Haar wavelet on an interval ``[a, b)``: constant
    positive on the left half ``[a, m)``, constant negative on the right half ``[m, b)``, zero elsewhere,
    with zero mean and unit norm. Intervals are split breadth first, starting from ``[0, n)``, which gives
    the standard Haar matrix when ``n`` is a power of two.

    For other ``n`` (the 24×24 or 27×27 grids of CLIP/SigLIP towers) the split point is
    ``m = a + ceil((b - a) / 2)``, so halves differ by at most one token (the unbalanced Haar basis); the
    rows are still orthonormal and still nested by scale.
    """
    _check_size(n)
    rows = [torch.full((n,), 1.0 / math.sqrt(n), dtype=torch.float64)]
    queue = [(0, n)]
    while queue:
        a, b = queue.pop(0)
        if b - a < 2:
            continue
        m = a + (b - a + 1) // 2
        left, right = m - a, b - m
        row = torch.zeros(n, dtype=torch.float64)
        # Weights chosen so the row has zero mean and unit norm: +c_l on the left, -c_r on the right.
        row[a:m] = math.sqrt(right / (left * (left + right)))
        row[m:b] = -math.sqrt(left / (right * (left + right)))
        rows.append(row)
        queue += [(a, m), (m, b)]
    return torch.stack(rows)


def random_orthogonal(n: int, seed: int = 0) -> torch.Tensor:
    """Haar-distributed random orthogonal matrix (QR of a Gaussian with the sign fix), seeded."""
    _check_size(n)
    gen = torch.Generator().manual_seed(int(seed))
    g = torch.randn(n, n, generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(g)
    # Multiplying column j by sign(R_jj) makes the distribution exactly Haar (Mezzadri 2007).
    return q * torch.sign(torch.diagonal(r)).unsqueeze(0)


def identity_matrix(n: int) -> torch.Tensor:
    """The spatial basis: tokens are their own coordinates."""
    _check_size(n)
    return torch.eye(n, dtype=torch.float64)


BASES = {
    "dct": dct_matrix,
    "haar": haar_matrix,
    "random": random_orthogonal,
    "spatial": identity_matrix,
}


def make_basis(name: str, n: int, seed: int = 0) -> torch.Tensor:
    """Build a named 1-D basis (``dct``, ``haar``, ``random``, ``spatial``) of size ``n`` in float64."""
    if name not in BASES:
        raise ValueError(f"unknown basis {name!r}; expected one of {sorted(BASES)}")
    if name == "random":
        return random_orthogonal(n, seed)
    return BASES[name](n)


def lattice_transform(x: torch.Tensor, basis_h: torch.Tensor, basis_w: torch.Tensor) -> torch.Tensor:
    """Separable forward transform ``Y = B_h X B_wᵀ`` over the last two axes.

    Args:
        x: ``[..., H, W]``.
        basis_h: ``[H', H]`` (all ``H`` rows, or only the retained ones).
        basis_w: ``[W', W]``.
    Returns:
        ``[..., H', W']``.
    """
    return basis_h.to(x) @ x @ basis_w.to(x).transpose(0, 1)


def lattice_inverse(y: torch.Tensor, basis_h: torch.Tensor, basis_w: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`lattice_transform` for square orthonormal bases: ``X = B_hᵀ Y B_w``."""
    return basis_h.to(y).transpose(0, 1) @ y @ basis_w.to(y)


def retained_block_operator(basis_h: torch.Tensor, basis_w: torch.Tensor, cutoff: int) -> torch.Tensor:
    """The rows of ``B_h ⊗ B_w`` that produce the ``cutoff x cutoff`` low-index block, row-major over (u, v).

    Applied to tokens flattened row-major over the ``H x W`` lattice (``[..., H·W, d]``), it returns the
    retained coefficients ``[..., cutoff², d]`` without computing the discarded ones.

    Returns:
        ``[cutoff², H·W]`` in the bases' dtype.
    """
    if cutoff > min(basis_h.shape[0], basis_w.shape[0]):
        raise ValueError(
            f"cutoff C={cutoff} exceeds the token grid {basis_h.shape[1]}x{basis_w.shape[1]}; C must be at most "
            f"{min(basis_h.shape[0], basis_w.shape[0])}"
        )
    return torch.kron(basis_h[:cutoff], basis_w[:cutoff])


def _check_size(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"basis size must be a positive integer, got {n!r}")
