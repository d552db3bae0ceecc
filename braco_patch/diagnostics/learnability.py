"""Learnability of coordinate organisations and the label-free ``coef``/``idct`` calibration (paper §3.2, App. C, D, I).

With the DCT basis and the ``C x C`` block fixed, ``Ḡ = E[Z̄ Z̄ᵀ] = P_C U_D M U_Dᵀ P_Cᵀ`` (``K_b = C²``) and for an
orthogonal ``A``, ``G(A) = A Ḡ Aᵀ``:

- ``L_st(A) = ‖OffDiag G(A)‖_F² + γ ‖diag G(A) − tr(Ḡ)/K_b · 1‖²``   (eq. ``app_unified_stat_obj``)
- ``L_geo(A) = 1 − ⟨A, U_C⟩_F / K_b``                                (eq. ``unified_geom_obj``, ``A_0 = U_C``)
- ``L_learn(A) = L_st(A) / K_b² + β L_geo(A)``                        (eq. ``unified_learn_obj``)
- ``Δ_st = L_st(U_C) − L_st(I)``, ``ρ_C = L_geo(I)``, and ``L_learn(U_C) − L_learn(I) = Δ_st/K_b² − β ρ_C``
  (eq. ``specialize_compare``): ``idct`` is preferred where it is negative. ``K_b*`` is the first scanned
  budget that prefers ``idct`` (App. "Functional rankings and cross-encoder calibration").

Scale. ``L_st`` is quartic in the features while ``L_geo`` is dimensionless, so ``β`` only means something for
a stated feature scale, which the paper does not give. By default (``scale="energy"``) ``Ḡ`` is computed
from ``M / tr(M)``, the normalisation ``E`` already uses: then ``tr(Ḡ) = E(D_N; S_C)``, ``β`` and ``γ`` are
dimensionless, and the criterion does not change when an encoder's features are rescaled. ``scale="raw"``
uses ``M`` as is.

On ``γ``. ``‖OffDiag G‖_F² + ‖diag G − c1‖² = ‖G − cI‖_F² = ‖Ḡ − cI‖_F²`` for every orthogonal ``A``, so
``L_st(A) = ‖Ḡ − cI‖_F² + (γ − 1)‖diag G(A) − c1‖²`` and ``Δ_st = (1 − γ)(‖OffDiag G(U_C)‖² − ‖OffDiag Ḡ‖²)``.
At ``γ = 1`` the statistical term cannot tell organisations apart; for ``γ > 1`` it rewards densifying
mixes. The criterion depends on ``β`` and ``γ`` only through ``β / (1 − γ)``.

Defaults (the paper states no values for β, γ): ``γ = 0.5`` (inside the meaningful range ``0 < γ < 1``) and
``β = 5e-4`` (see :data:`DEFAULT_BETA`). Every scan row also reports ``β_C = Δ_st / (K_b² ρ_C)``, the ``β``
above which ``idct`` wins at that budget, so the table can be re-read for any ``β`` without rerunning.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

import torch

from ..basis import dct_matrix, retained_block_operator
from ..coordinates import coordinate_matrix

__all__ = [
    "DEFAULT_BETA",
    "DEFAULT_GAMMA",
    "DEFAULT_CUTOFFS",
    "GRAM_SCALES",
    "block_gram",
    "stat_penalty",
    "geo_penalty",
    "learn_objective",
    "CoordinateScores",
    "coordinate_scores",
    "crossover_scan",
    "crossover_budget",
    "summarize_calibration",
    "format_calibration_table",
]

#: β of eq. ``unified_learn_obj``. Not given in the paper; with ``scale="energy"`` and γ = 0.5 it puts the
#: crossover at the deployed K_b* = 16 (C = 4) for the 24 x 24 patch grids of scikit-image's photographs
#: (see ``tests/braco_patch/diagnostics``) — a stand-in for the paper's CLIP setting, which needs the weights.
DEFAULT_BETA = 5e-4
#: γ of eq. ``app_unified_stat_obj``. Not given in the paper; any 0 < γ < 1 orders organisations the same way.
DEFAULT_GAMMA = 0.5
#: The paper's scan, C = 2..16 (bounded by the grid side N).
DEFAULT_CUTOFFS = tuple(range(2, 17))
GRAM_SCALES = ("energy", "raw")
ORGANISATIONS = ("coef", "idct", "randrot")


def block_gram(m: torch.Tensor, cutoff: int, *, scale: str = "energy") -> torch.Tensor:
    """``Ḡ = P_C U_D M U_Dᵀ P_Cᵀ`` (``/ tr M`` for ``scale="energy"``): ``[C², C²]`` float64, row-major (u, v)."""
    if scale not in GRAM_SCALES:
        raise ValueError(f"unknown Gram scale {scale!r}; expected one of {list(GRAM_SCALES)}")
    m = m.double()
    n = math.isqrt(m.shape[0])
    d = dct_matrix(n)
    rows = retained_block_operator(d, d, cutoff)
    g = rows @ m @ rows.transpose(0, 1)
    return g / torch.trace(m) if scale == "energy" else g


def stat_penalty(g_bar: torch.Tensor, a: torch.Tensor, gamma: float = DEFAULT_GAMMA) -> float:
    """``L_st(A) = ‖OffDiag(A Ḡ Aᵀ)‖_F² + γ ‖diag(A Ḡ Aᵀ) − tr(Ḡ)/K · 1‖²``."""
    g = a.double() @ g_bar.double() @ a.double().transpose(0, 1)
    diag = torch.diagonal(g)
    off = g - torch.diag(diag)
    target = torch.trace(g_bar.double()) / g.shape[0]
    return float(off.pow(2).sum() + gamma * (diag - target).pow(2).sum())


def geo_penalty(a: torch.Tensor, a0: torch.Tensor) -> float:
    """``L_geo(A) = 1 − ⟨A, A_0⟩_F / K``."""
    return float(1.0 - (a.double() * a0.double()).sum() / a.shape[0])


def learn_objective(g_bar: torch.Tensor, a: torch.Tensor, a0: torch.Tensor, *, beta: float = DEFAULT_BETA,
                    gamma: float = DEFAULT_GAMMA) -> float:
    """``L_learn(A; K) = L_st(A) / K² + β L_geo(A)``."""
    k = a.shape[0]
    return stat_penalty(g_bar, a, gamma) / k**2 + beta * geo_penalty(a, a0)


@dataclass
class CoordinateScores:
    """Scores of ``coef`` (A = I), ``idct`` (A = U_C) and ``randrot`` (A = R) at one cutoff."""

    cutoff: int
    k_b: int
    energy: float
    l_st: dict[str, float]
    l_geo: dict[str, float]
    l_learn: dict[str, float]
    delta_st: float
    rho: float
    difference: float
    beta_threshold: float | None
    choice: str

    def as_row(self) -> dict:
        row = {k: v for k, v in asdict(self).items() if not isinstance(v, dict)}
        for key in ("l_st", "l_geo", "l_learn"):
            row.update({f"{key}_{org}": value for org, value in getattr(self, key).items()})
        return row


def coordinate_scores(m: torch.Tensor, cutoff: int, *, beta: float = DEFAULT_BETA, gamma: float = DEFAULT_GAMMA,
                      scale: str = "energy", seed: int = 0) -> CoordinateScores:
    """``L_st``, ``L_geo``, ``L_learn`` of the three organisations, ``Δ_st``, ``ρ_C`` and the preferred one."""
    g_bar = block_gram(m, cutoff, scale=scale)
    k = cutoff * cutoff
    mats = {org: coordinate_matrix(org, cutoff, seed=seed) for org in ORGANISATIONS}
    u_c = mats["idct"]
    l_st = {org: stat_penalty(g_bar, a, gamma) for org, a in mats.items()}
    l_geo = {org: geo_penalty(a, u_c) for org, a in mats.items()}
    l_learn = {org: l_st[org] / k**2 + beta * l_geo[org] for org in ORGANISATIONS}
    delta, rho = l_st["idct"] - l_st["coef"], l_geo["coef"]
    difference = delta / k**2 - beta * rho
    threshold = delta / (k**2 * rho) if delta > 0 and rho > 0 else None
    energy = float(torch.trace(g_bar) / (1.0 if scale == "energy" else torch.trace(m.double())))
    return CoordinateScores(cutoff, k, energy, l_st, l_geo, l_learn, delta, rho, difference, threshold,
                            "idct" if difference < 0 else "coef")


def crossover_scan(m: torch.Tensor, cutoffs=DEFAULT_CUTOFFS, **kwargs) -> list[CoordinateScores]:
    """:func:`coordinate_scores` for every cutoff (each must be at most the grid side)."""
    n = math.isqrt(m.shape[0])
    bad = [c for c in cutoffs if not 1 <= c <= n]
    if bad:
        raise ValueError(f"cutoff C={bad[0]} does not fit the {n}x{n} token grid; C must be between 1 and {n}")
    return [coordinate_scores(m, c, **kwargs) for c in cutoffs]


def crossover_budget(scan: list[CoordinateScores]) -> int | None:
    """``K_b*``: the first scanned ``K_b`` whose criterion prefers ``idct`` (``None`` if none does)."""
    return next((s.k_b for s in scan if s.choice == "idct"), None)


def summarize_calibration(scans: list[list[CoordinateScores]]) -> dict:
    """Median and range of ``K_b*`` over resamples, and per-budget ``idct`` votes.

    The median is the lower median, so it is always a scanned budget; a resample with no crossover counts
    as larger than every scanned budget.
    """
    stars = [crossover_budget(scan) for scan in scans]
    big = math.inf
    ordered = sorted(stars, key=lambda s: big if s is None else s)
    per_budget = []
    for rows in zip(*scans):
        votes = sum(r.choice == "idct" for r in rows)
        per_budget.append({
            "cutoff": rows[0].cutoff, "k_b": rows[0].k_b,
            "idct_votes": votes, "resamples": len(rows),
            "choice": "idct" if 2 * votes > len(rows) else "coef",
            "difference_median": statistics.median(r.difference for r in rows),
            "difference_min": min(r.difference for r in rows), "difference_max": max(r.difference for r in rows),
            "beta_threshold_median": _median_or_none([r.beta_threshold for r in rows]),
        })
    return {"k_b_star": stars, "k_b_star_median": ordered[(len(ordered) - 1) // 2],
            "k_b_star_min": ordered[0], "k_b_star_max": ordered[-1],
            "max_scanned_k_b": scans[0][-1].k_b if scans and scans[0] else None, "per_budget": per_budget}


def _median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _star(value, largest) -> str:
    return f">{largest}" if value is None else str(value)


def format_calibration_table(rows: list[tuple[str, str, dict]]) -> str:
    """The paper's Table ``app_coordinate_calibration``: ``K_b*`` median (min–max) per encoder and data set.

    Args:
        rows: ``(encoder, dataset, summary)`` with ``summary`` from :func:`summarize_calibration`.
    """
    datasets = list(dict.fromkeys(d for _, d, _ in rows))
    encoders = list(dict.fromkeys(e for e, _, _ in rows))
    cells = {(e, d): s for e, d, s in rows}
    header = ["Vision encoder / resolution"] + [f"{d} K_b*" for d in datasets]
    body = []
    for e in encoders:
        line = [e]
        for d in datasets:
            s = cells.get((e, d))
            if s is None:
                line.append("-")
                continue
            top = s["max_scanned_k_b"]
            line.append(f"{_star(s['k_b_star_median'], top)} ({_star(s['k_b_star_min'], top)}–{_star(s['k_b_star_max'], top)})")
        body.append(line)
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    fmt = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [fmt(r) for r in body])
