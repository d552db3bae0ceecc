"""Task readability R(B; S), the compressibility score C = λE + (1−λ)R, and the linear-probe protocol
(paper §3.2 eq. ``unified_C``, App. B, App. "Compression diagnostics and operating regime").

**Readability.** For a task direction ``W* ∈ R^{L x d}`` and retained rows ``P_S U_B`` (``V = (P_S U_B)ᵀ``,
``[L, K]``), the ``M``-orthogonal projection of each column ``w`` onto ``span(V)`` is
``Π w = V (Vᵀ M V)⁺ Vᵀ M w``, so ``‖Π w‖²_M = wᵀ M V (Vᵀ M V)⁺ Vᵀ M w`` and ``‖w‖²_M = wᵀ M w``. This is the
share of the readout's second moment that a linear readout of the retained coordinates recovers; it lies
in ``[0, 1]`` and is 1 for the full basis. ``R = Σ_c ‖Π W_c‖²_M / Σ_c ‖W_c‖²_M`` over the task's directions.

**Task direction.** ``W*`` must resolve tokens: a probe on mean-pooled tokens gives ``W* = 1 wᵀ / L``, whose
columns are all the constant field, and then ``R`` is the same for every task. So the probe is a ridge
classifier (least squares on one-hot targets, with an intercept) on the whole frozen token field
``vec(X) ∈ R^{L·d}``, solved in its dual (``n x n`` kernel) form. To bound memory the channels are first
mapped to ``d = --probe-dim`` (default 64) by a fixed seeded random orthonormal projection; because it acts
on the channel axis, ``⟨W, X Q⟩ = ⟨W Qᵀ, X⟩`` and ``‖W Qᵀ‖_M = ‖W‖_M``, so R is that of the lifted direction.
The features kept in memory are ``n · L · d · 4`` bytes (295 MB for 2,000 images of 576 tokens at d = 64).

**Protocol.** A stratified, seeded train/val/test split. ``M`` (for E, R and the KLT) and ``W*`` use the
training split only (the paper: "R uses only the probe-task training split"); ``W*``'s ridge strength is
chosen by closed-form leave-one-out error on the training split (centring held fixed). For the accuracy
curves, each basis and budget gets a ridge probe on the retained coordinates ``P_S U_B X``; its strength is
picked on val, and val and test accuracy are reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .energy import operators, structured_order

__all__ = ["DEFAULT_LAMBDA", "DEFAULT_PROBE_DIM", "RIDGE_GRID", "readability", "readability_curve", "compressibility",
           "channel_projection", "RidgeProbe", "task_direction", "ProbeResult", "probe_diagnostics"]

#: λ of eq. ``unified_C``. Not given in the paper; 0.5 weighs energy and readability equally.
DEFAULT_LAMBDA = 0.5
DEFAULT_PROBE_DIM = 64
#: Ridge strengths, relative to the mean diagonal of the training kernel.
RIDGE_GRID = (10.0, 1.0, 1e-1, 1e-2, 1e-3)


def readability(m: torch.Tensor, rows: torch.Tensor, w: torch.Tensor) -> float:
    """``R`` of the subspace spanned by ``rows`` (``[K, L]``) for directions ``w`` (``[L, d]`` or ``[c, L, d]``)."""
    m, v = m.double(), rows.double().transpose(0, 1)
    w = w.double().reshape(-1, m.shape[0], w.shape[-1]).permute(1, 0, 2).reshape(m.shape[0], -1)  # [L, c·d]
    mw = m @ w
    b = v.transpose(0, 1) @ mw                                       # Vᵀ M W
    inner = torch.linalg.pinv(v.transpose(0, 1) @ m @ v, hermitian=True)
    kept = (b * (inner @ b)).sum()
    total = (w * mw).sum()
    return float(kept / total)


def readability_curve(m: torch.Tensor, u: torch.Tensor, order: torch.Tensor, w: torch.Tensor,
                      budgets: Sequence[int]) -> list[float]:
    """``R`` keeping ``u[order[:K]]`` for each budget ``K``."""
    return [readability(m, u[order[:k]], w) for k in budgets]


def compressibility(energy: float, read: float, lam: float = DEFAULT_LAMBDA) -> float:
    """``C = λ E + (1 − λ) R`` (eq. ``unified_C``)."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must be in [0, 1], got {lam}")
    return lam * energy + (1.0 - lam) * read


def channel_projection(dim: int, target: int, seed: int = 0) -> torch.Tensor | None:
    """Seeded ``[dim, target]`` orthonormal columns, or ``None`` when ``target`` is 0 or at least ``dim``."""
    if target <= 0 or target >= dim:
        return None
    gen = torch.Generator().manual_seed(int(seed))
    q, _ = torch.linalg.qr(torch.randn(dim, target, generator=gen, dtype=torch.float64))
    return q.float()


class RidgeProbe:
    """Dual ridge classifier on flattened features; ``fit`` eigendecomposes the kernel once for all strengths."""

    def fit(self, x: torch.Tensor, labels: np.ndarray, classes: int) -> RidgeProbe:
        x = x.reshape(x.shape[0], -1).double()
        y = torch.nn.functional.one_hot(torch.as_tensor(labels), classes).double()
        self.mean, self.y_mean = x.mean(0), y.mean(0)
        self.x = x - self.mean
        kernel = self.x @ self.x.transpose(0, 1)
        self.evals, self.evecs = torch.linalg.eigh(kernel)
        self.evals = self.evals.clamp_min(0)
        self.qty = self.evecs.transpose(0, 1) @ (y - self.y_mean)
        self.scale = float(torch.diagonal(kernel).mean().clamp_min(1e-12))
        return self

    def dual(self, rel_alpha: float) -> torch.Tensor:
        """Dual coefficients ``(K + αI)⁻¹ (Y − ȳ)``, ``α = rel_alpha · mean diag K``: ``[n, classes]``."""
        return self.evecs @ (self.qty / (self.evals + rel_alpha * self.scale).unsqueeze(1))

    def predict(self, x: torch.Tensor, rel_alpha: float) -> np.ndarray:
        x = x.reshape(x.shape[0], -1).double() - self.mean
        scores = (x @ self.x.transpose(0, 1)) @ self.dual(rel_alpha) + self.y_mean
        return scores.argmax(1).numpy()

    def loo_error(self, rel_alpha: float) -> float:
        """Closed-form leave-one-out squared error: residual_i / (1 − H_ii)."""
        shrink = self.evals / (self.evals + rel_alpha * self.scale)
        hat = (self.evecs.pow(2) * shrink).sum(1)
        fitted = self.evecs @ (shrink.unsqueeze(1) * self.qty)
        resid = self.evecs @ self.qty - fitted
        return float((resid / (1 - hat).clamp_min(1e-12).unsqueeze(1)).pow(2).sum())

    def direction(self, rel_alpha: float) -> torch.Tensor:
        """Primal weights ``Xcᵀ A``: ``[classes, features]``."""
        return (self.x.transpose(0, 1) @ self.dual(rel_alpha)).transpose(0, 1)


def task_direction(x: torch.Tensor, labels: np.ndarray, classes: int) -> tuple[torch.Tensor, float]:
    """``W*`` (``[classes, L, d]``) from a token-field ridge probe on the training split, strength by LOO."""
    probe = RidgeProbe().fit(x, labels, classes)
    alpha = min(RIDGE_GRID, key=probe.loo_error)
    return probe.direction(alpha).reshape(classes, *x.shape[1:]), alpha


@dataclass
class ProbeResult:
    """Per basis, at each budget: ``energy``, ``readability``, ``compressibility``, ``val``/``test`` accuracy."""

    budgets: list[int]
    bases: list[str]
    rows: list[dict] = field(default_factory=list)
    full: dict = field(default_factory=dict)
    direction_alpha: float = 0.0

    def curve(self, basis: str, key: str) -> list[float]:
        return [r[key] for r in self.rows if r["basis"] == basis]


def _accuracy(probe: RidgeProbe, feats: torch.Tensor, labels: np.ndarray, splits: dict, classes: int) -> dict:
    probe.fit(feats[splits["train"]], labels[splits["train"]], classes)
    val = {a: float((probe.predict(feats[splits["val"]], a) == labels[splits["val"]]).mean()) for a in RIDGE_GRID}
    best = max(RIDGE_GRID, key=lambda a: val[a])  # the grid runs strong to weak: ties keep the stronger ridge
    test = float((probe.predict(feats[splits["test"]], best) == labels[splits["test"]]).mean())
    return {"val_accuracy": val[best], "test_accuracy": test, "ridge_alpha": best}


def probe_diagnostics(features: torch.Tensor, labels: np.ndarray, splits: dict, m: torch.Tensor, n: int, *,
                      bases: Sequence[str], budgets: Sequence[int], lam: float = DEFAULT_LAMBDA,
                      seed: int = 0) -> ProbeResult:
    """E, R, C and probe accuracy per basis and budget.

    Args:
        features: ``[images, L, d]`` frozen (channel-projected) token fields.
        labels: ``[images]`` ints; ``splits``: ``{"train", "val", "test"}`` index arrays.
        m: ``[L, L]`` second moment of the training split (full channels).
        n: grid side.
    """
    classes = int(labels.max()) + 1
    train = splits["train"]
    w_star, alpha = task_direction(features[train], labels[train], classes)
    result = ProbeResult(list(budgets), list(bases), direction_alpha=alpha)
    probe = RidgeProbe()
    result.full = _accuracy(probe, features, labels, splits, classes)
    trace = torch.trace(m.double())
    order = structured_order(n)
    for name, u in operators(m, n, list(bases), seed).items():
        ordered = u if name == "klt" else u[order]
        energy = torch.cumsum(torch.einsum("kl,lm,km->k", ordered, m.double(), ordered) / trace, 0)
        for k in budgets:
            rows = ordered[:k]
            read = readability(m, rows, w_star)
            coeffs = torch.einsum("kl,nld->nkd", rows.float(), features)
            result.rows.append({"basis": name, "K": k, "energy": float(energy[k - 1]), "readability": read,
                                "compressibility": compressibility(float(energy[k - 1]), read, lam),
                                **_accuracy(probe, coeffs, labels, splits, classes)})
    return result
