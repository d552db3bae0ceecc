"""Outputs of the diagnostics: JSON, CSV and PNG figures in one folder (matplotlib, Agg backend).

Figures follow the paper's diagnostics (Fig. ``exp_compact_vs_learn`` a–b, Fig. ``exp_compressibility_diag``):

- ``energy_curves.png``: retention vs K under structured and magnitude truncation, one line per basis;
- ``energy_maps.png``: per-coefficient energy share on the N x N lattice per basis (log colour scale), with
  the ``C x C`` blocks of (up to three of) the tabulated square budgets outlined;
- ``probe_curves.png``: val and test probe accuracy vs K per basis, plus E, R and C;
- ``crossover.png``: ``Δ_st / K_b²`` against ``β ρ_C`` per resample; ``idct`` is preferred where the first is
  below the second, ``K_b*`` is marked.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch

from llava.outputs import atomic_output, write_text

__all__ = ["write_json", "write_csv", "plot_energy_curves", "plot_energy_maps", "plot_probe_curves", "plot_crossover",
           "energy_summary", "probe_summary", "calibration_summary"]

_LABELS = {"spatial": "Spatial", "dct": "DCT", "haar": "Haar", "random": "RandOrtho", "klt": "KLT (oracle)"}
_STYLE = {"klt": {"linestyle": "--", "color": "black"}}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plain(value):
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def write_json(path: Path, payload: dict) -> Path:
    write_text(path, json.dumps(_plain(payload), indent=2))
    return path


def write_csv(path: Path, rows: Sequence[dict]) -> Path:
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with atomic_output(path) as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows({k: _plain(v) for k, v in row.items()} for row in rows)
    return path


def _save(plt, fig, path: Path, title: str, *, tight: bool = True) -> Path:
    """Title, layout, write the PNG, free the figure."""
    if title:
        fig.suptitle(title, fontsize=10)
    if tight:
        fig.tight_layout()
    with atomic_output(path, "wb") as handle:
        fig.savefig(handle, dpi=110, format="png")
    plt.close(fig)
    return path


def plot_energy_curves(path: Path, structured: dict, magnitude: dict, *, max_k: int, title: str = "") -> Path:
    plt = _pyplot()
    panels = [("Structured truncation", structured)] + ([("Magnitude truncation (per sample)", magnitude)] if magnitude else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False)
    for ax, (name, curves) in zip(axes[0], panels):
        for basis, curve in curves.items():
            k = min(max_k, len(curve))
            ax.plot(range(1, k + 1), curve[:k].tolist(), label=_LABELS.get(basis, basis), **_STYLE.get(basis, {}))
        ax.set_xlabel("budget K (tokens)")
        ax.set_ylabel("energy retention E(K)")
        ax.set_ylim(0, 1.02)
        ax.set_title(name)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    return _save(plt, fig, path, title)


def plot_energy_maps(path: Path, maps: dict, *, blocks: Sequence[int] = (), title: str = "") -> Path:
    plt = _pyplot()
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle

    values = torch.stack([m.clamp_min(0) for m in maps.values()])
    positive = values[values > 0]
    lo = float(positive.min()) if positive.numel() else 1e-12
    norm = LogNorm(vmin=max(lo, float(values.max()) * 1e-6), vmax=float(values.max()))
    fig, axes = plt.subplots(1, len(maps), figsize=(2.4 * len(maps) + 1.0, 2.9), squeeze=False, layout="constrained")
    for ax, (basis, grid) in zip(axes[0], maps.items()):
        image = ax.imshow(grid.clamp_min(norm.vmin).numpy(), norm=norm, cmap="magma")
        for c in blocks:
            ax.add_patch(Rectangle((-0.5, -0.5), c, c, fill=False, edgecolor="cyan", linewidth=0.8))
        ax.set_title("KLT oracle (eigenvalues)" if basis == "klt" else _LABELS.get(basis, basis), fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="energy share")
    return _save(plt, fig, path, title, tight=False)


def plot_probe_curves(path: Path, result, *, title: str = "") -> Path:
    plt = _pyplot()
    keys = [("val_accuracy", "validation accuracy"), ("test_accuracy", "test accuracy"),
            ("compressibility", "C = λE + (1−λ)R  (dotted: R)")]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for ax, (key, label) in zip(axes, keys):
        for basis in result.bases:
            line, = ax.plot(result.budgets, result.curve(basis, key), marker="o", ms=3, label=_LABELS.get(basis, basis),
                            **_STYLE.get(basis, {}))
            if key == "compressibility":
                ax.plot(result.budgets, result.curve(basis, "readability"), linestyle=":", color=line.get_color())
        if key in result.full:
            ax.axhline(result.full[key], color="gray", linewidth=0.8, label="all tokens")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget K (tokens)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return _save(plt, fig, path, title)


def plot_crossover(path: Path, scans: Sequence[list], stars: Sequence[int | None], *, beta: float, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for r, scan in enumerate(scans):
        k = [s.k_b for s in scan]
        ax.plot(k, [max(s.delta_st / s.k_b**2, 1e-16) for s in scan], marker="o", ms=3, color=f"C{r}",
                label=f"Δ_st/K_b², resample {r}")
        if r == 0:  # ρ_C depends on C only
            ax.plot(k, [max(beta * s.rho, 1e-16) for s in scan], linestyle="--", color="black", label=f"β ρ_C (β={beta:g})")
        if stars[r] is not None:
            ax.axvline(stars[r], color=f"C{r}", linewidth=0.8, alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("backbone budget K_b = C²")
    ax.set_ylabel("learnability terms")
    ax.set_title("idct preferred where Δ_st/K_b² < β ρ_C (vertical: K_b*)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return _save(plt, fig, path, title)


# --------------------------------------------------------------------------------------------- printed summaries


def energy_summary(result, budgets: Sequence[int], title: str) -> str:
    """Retention per basis at the tabulated budgets, ``structured/magnitude``."""
    lines = [f"energy retention E(K), {title}; magnitude truncation on {result.magnitude_samples} per-sample grids",
             f"{'K':>4}  " + "  ".join(f"{b:>15}" for b in result.bases) + "   (structured / magnitude)"]
    for k in budgets:
        cells = [f"{float(result.structured[b][k - 1]):.3f}/"
                 + (f"{float(result.magnitude[b][k - 1]):.3f}" if b in result.magnitude else "  -  ") for b in result.bases]
        lines.append(f"{k:>4}  " + "  ".join(f"{c:>15}" for c in cells))
    return "\n".join(lines)


def probe_summary(result, title: str) -> str:
    """E, R, C and probe accuracy per basis and budget."""
    lines = [f"probe diagnostics, {title}",
             f"all tokens: val {result.full['val_accuracy']:.3f}, test {result.full['test_accuracy']:.3f}",
             f"{'basis':<8} {'K':>4} {'E':>6} {'R':>6} {'C':>6} {'val':>6} {'test':>6}"]
    lines += [f"{r['basis']:<8} {r['K']:>4} {r['energy']:>6.3f} {r['readability']:>6.3f} {r['compressibility']:>6.3f} "
              f"{r['val_accuracy']:>6.3f} {r['test_accuracy']:>6.3f}" for r in result.rows]
    return "\n".join(lines)


def calibration_summary(summary: dict) -> str:
    """Per scanned budget: the median criterion, the flip point β_C and the idct votes."""
    lines = [f"{'C':>3} {'K_b':>4} {'Δ_st/K_b² − βρ_C (median)':>27} {'β_C':>10}  choice (idct votes)"]
    for b in summary["per_budget"]:
        thr = "-" if b["beta_threshold_median"] is None else f"{b['beta_threshold_median']:.3g}"
        lines.append(f"{b['cutoff']:>3} {b['k_b']:>4} {b['difference_median']:>27.3e} {thr:>10}  "
                     f"{b['choice']} ({b['idct_votes']}/{b['resamples']})")
    return "\n".join(lines)
