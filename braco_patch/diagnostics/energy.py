"""Energy retention E(B; S) of a basis under a truncation rule (paper §3.2 eq. ``unified_energy_retention``, App. A, G).

Every basis acts on the token axis of a flattened ``N x N`` lattice (``L = N²``, row-major) as an ``[L, L]``
float64 operator ``U`` whose rows are basis vectors: ``Y = U X``. For separable bases ``U = B ⊗ B``
(spatial, DCT, Haar, random orthonormal ``Q ⊗ Q``); the KLT oracle takes the eigenvectors of ``M`` itself.

Two truncation rules:

- **structured** (deployable, input independent): keep the first ``K`` coordinates of a fixed lattice order.
  The order is "growing square shells" (:func:`structured_order`): its first ``C²`` entries are exactly the
  ``C x C`` low-index block ``S_C`` of App. E, so ``E`` at ``K = C²`` is the paper's ``E(B; S_C)``; between
  squares it adds the next shell row-major, which gives curves at every ``K`` (the paper quotes ``K = 32``).
  For the KLT the order is by eigenvalue, i.e. the oracle's best ``K``-dimensional subspace.
- **magnitude** (adaptive, per sample): for each sample keep the ``K`` coefficient tokens (rows of ``Y``)
  with the largest energy ``‖Y_k‖²``; the retention is ``Σ_i kept_i / Σ_i ‖X_i‖²``, the same ratio of
  expectations as ``E``. It needs per-sample statistics: the per-sample Gram ``X_i X_iᵀ`` is enough for
  every token-axis basis, so callers pass a bounded stack of Grams (see :mod:`.stats`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..basis import make_basis

__all__ = [
    "FIXED_BASES",
    "ALL_BASES",
    "structured_order",
    "basis_operator",
    "klt_operator",
    "energy_retention",
    "coefficient_energy",
    "structured_curve",
    "magnitude_curve",
    "energy_map",
    "coherence",
    "EnergyResult",
    "energy_diagnostics",
]

#: Fixed (data-independent) separable bases compared in the paper (App. G).
FIXED_BASES = ("spatial", "dct", "haar", "random")
#: ... plus the KLT oracle fitted to ``M``.
ALL_BASES = FIXED_BASES + ("klt",)


def structured_order(n: int) -> torch.Tensor:
    """Indices of the ``N x N`` lattice (row-major ``u·N + v``) in growing square shells.

    Sorted by ``(max(u, v), u, v)``, so for every ``C`` the first ``C²`` indices are the block
    ``{(u, v): u < C, v < C}``.

    Returns:
        ``[N²]`` int64.
    """
    u, v = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    u, v = u.reshape(-1), v.reshape(-1)
    key = torch.maximum(u, v) * n * n + u * n + v
    return torch.argsort(key)


def basis_operator(name: str, n: int, seed: int = 0) -> torch.Tensor:
    """``U_B = B ⊗ B`` for a fixed basis name (``spatial``, ``dct``, ``haar``, ``random``).

    ``random`` is the paper's separable ``randortho``: ``Q_N ⊗ Q_N`` with one seeded Haar-random ``Q_N``.

    Returns:
        ``[N², N²]`` float64, rows are basis vectors in row-major ``(u, v)`` order.
    """
    if name not in FIXED_BASES:
        raise ValueError(f"unknown fixed basis {name!r}; expected one of {list(FIXED_BASES)} (the KLT needs M: klt_operator)")
    b = make_basis(name, n, seed=seed)
    return torch.kron(b, b)


def klt_operator(m: torch.Tensor) -> torch.Tensor:
    """The KLT oracle: eigenvectors of ``M`` as rows, by decreasing eigenvalue.

    Returns:
        ``[L, L]`` float64.
    """
    evals, evecs = torch.linalg.eigh(m.double())
    return evecs.flip(-1).transpose(0, 1).contiguous()


def energy_retention(m: torch.Tensor, rows: torch.Tensor) -> float:
    """``E = tr(P U M Uᵀ Pᵀ) / tr(M)`` for the retained basis rows ``P U`` (eq. ``unified_energy_retention``).

    Args:
        m: ``[L, L]`` token-axis second moment.
        rows: ``[K, L]`` retained rows of ``U`` (``P_S U_B``), or ``A P_S U_B`` for any orthogonal ``A``.
    """
    m = m.double()
    rows = rows.double()
    return float(torch.einsum("kl,lm,km->", rows, m, rows) / torch.trace(m))


def coefficient_energy(m: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Expected energy of every coefficient, ``diag(U M Uᵀ) / tr(M)``: ``[L]`` float64, sums to 1."""
    m = m.double()
    return torch.einsum("kl,lm,km->k", u.double(), m, u.double()) / torch.trace(m)


def structured_curve(m: torch.Tensor, u: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Structured retention at every budget: entry ``K-1`` is ``E`` keeping ``u[order[:K]]``. ``[L]`` float64."""
    return torch.cumsum(coefficient_energy(m, u)[order], 0)


def magnitude_curve(grams: torch.Tensor, u: torch.Tensor, chunk: int = 32) -> torch.Tensor:
    """Per-sample top-K retention at every budget ``K = 1..L`` (ratio of expectations).

    Args:
        grams: ``[S, L, L]`` per-sample Grams ``X_i X_iᵀ``.
        u: ``[L, L]`` basis rows.
    Returns:
        ``[L]`` float64.
    """
    u = u.double()
    kept = torch.zeros(u.shape[0], dtype=torch.float64)
    total = torch.zeros((), dtype=torch.float64)
    for start in range(0, grams.shape[0], chunk):
        g = grams[start:start + chunk].double()
        rows = torch.einsum("kl,slm,km->sk", u, g, u)  # ‖(U X_i)_k‖² for every sample and coefficient
        kept += torch.cumsum(rows.sort(dim=1, descending=True).values, dim=1).sum(0)
        total += torch.diagonal(g, dim1=1, dim2=2).sum()
    return kept / total


def energy_map(m: torch.Tensor, u: torch.Tensor, n: int, *, klt: bool = False) -> torch.Tensor:
    """Per-coefficient expected energy share on the ``N x N`` lattice, ``[N, N]``.

    For the KLT there is no lattice: eigenvalue ``k`` is drawn at the ``k``-th position of
    :func:`structured_order`, so its map reads like the fixed bases' maps (mass near the origin = compact).
    """
    energy = coefficient_energy(m, u)
    if klt:
        placed = torch.empty_like(energy)
        placed[structured_order(n)] = energy
        energy = placed
    return energy.reshape(n, n)


def coherence(u: torch.Tensor) -> float:
    """Mutual coherence with the spatial basis, ``μ = √L · max |U_ij|`` (paper §3.3, App. J.1)."""
    return math.sqrt(u.shape[-1]) * float(u.abs().max())


@dataclass
class EnergyResult:
    """Energy diagnostics of one token-statistics run.

    ``structured[b]`` / ``magnitude[b]``: retention at every ``K = 1..L`` (index ``K-1``); ``maps[b]``: ``[N, N]``;
    ``coherence[b]``: μ of the basis.
    """

    grid: int
    bases: list[str]
    structured: dict[str, torch.Tensor] = field(default_factory=dict)
    magnitude: dict[str, torch.Tensor] = field(default_factory=dict)
    maps: dict[str, torch.Tensor] = field(default_factory=dict)
    coherence: dict[str, float] = field(default_factory=dict)
    magnitude_samples: int = 0

    def at(self, budgets: list[int]) -> list[dict]:
        """Rows ``{basis, truncation, K, energy}`` at the given budgets."""
        rows = []
        for name in self.bases:
            for rule, curves in (("structured", self.structured), ("magnitude", self.magnitude)):
                if name in curves:
                    rows += [{"basis": name, "truncation": rule, "K": k, "energy": float(curves[name][k - 1])} for k in budgets]
        return rows


def operators(m: torch.Tensor, n: int, bases: list[str], seed: int = 0) -> dict[str, torch.Tensor]:
    """``{name: U}`` for the requested bases (``klt`` from ``M``)."""
    return {b: klt_operator(m) if b == "klt" else basis_operator(b, n, seed=seed) for b in bases}


def energy_diagnostics(m: torch.Tensor, n: int, *, bases: list[str] | None = None, grams: torch.Tensor | None = None,
                       seed: int = 0) -> EnergyResult:
    """Structured (and, given per-sample Grams, magnitude) retention curves, maps and coherence per basis.

    Args:
        m: ``[L, L]`` second moment, ``L = n²``.
        n: grid side.
        bases: subset of :data:`ALL_BASES` (default all).
        grams: optional ``[S, L, L]`` per-sample Grams for magnitude truncation.
        seed: seed of the random orthonormal basis.
    """
    bases = list(ALL_BASES if bases is None else bases)
    if m.shape != (n * n, n * n):
        raise ValueError(f"second moment has shape {tuple(m.shape)}; expected ({n * n}, {n * n}) for a {n}x{n} grid")
    result = EnergyResult(grid=n, bases=bases, magnitude_samples=0 if grams is None else int(grams.shape[0]))
    order = structured_order(n)
    for name, u in operators(m, n, bases, seed).items():
        klt = name == "klt"
        result.structured[name] = structured_curve(m, u, torch.arange(n * n) if klt else order)
        result.maps[name] = energy_map(m, u, n, klt=klt)
        result.coherence[name] = coherence(u)
        if grams is not None and grams.shape[0] > 0:
            result.magnitude[name] = magnitude_curve(grams, u)
    return result
