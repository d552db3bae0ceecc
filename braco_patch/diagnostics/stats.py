"""Token-axis second moment ``M = E[X Xᵀ]`` (paper §3.2, App. A), streamed through a vision tower.

Images go through the tower in batches (tqdm progress); each batch adds ``Σ_i X_i X_iᵀ`` (summed over the
``D_v`` channels) to an ``[L, L]`` float64 sum, so memory is ``O(L²)`` whatever the number of images. ``M`` is
the sum divided by the image count.

Magnitude (per-sample top-K) truncation needs per-sample statistics. The per-sample Gram ``X_i X_iᵀ`` holds
everything any token-axis basis needs (``‖(U X_i)_k‖² = (U X_i X_iᵀ Uᵀ)_kk``), and is smaller than ``X_i``
when ``L < D_v`` (CLIP-L/336: 576 vs 1024). The first ``keep_grams`` images' Grams are kept in float32:
``keep_grams · L² · 4`` bytes, 170 MB for 128 grids of 576 tokens.

Calibration resamples (paper: three seeded resamples of 1,024 images without replacement) share one pass:
each image is encoded once and added to the sum of every resample that drew it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .data import open_image

__all__ = ["TokenStats", "MomentAccumulator", "feature_batches", "token_moments", "resampled_moments"]

#: Default cap on per-sample Grams kept for magnitude truncation.
DEFAULT_KEEP_GRAMS = 128


@dataclass
class TokenStats:
    """``m``: ``[L, L]`` float64 ``E[X Xᵀ]``; ``grams``: ``[S, L, L]`` float32 per-sample Grams (``S`` may be 0)."""

    m: torch.Tensor
    count: int
    grid: int
    dim: int
    grams: torch.Tensor | None = None


class MomentAccumulator:
    """Running ``Σ X_i X_iᵀ`` in float64 (and the first ``keep_grams`` per-sample Grams)."""

    def __init__(self, keep_grams: int = 0):
        self.keep_grams = int(keep_grams)
        self._sum: torch.Tensor | None = None
        self._grams: list[torch.Tensor] = []
        self.count = 0
        self.dim = 0

    def update(self, x: torch.Tensor) -> None:
        """Add a batch ``[batch, L, D_v]``."""
        x = x.double()
        batch, tokens, self.dim = x.shape
        flat = x.permute(1, 0, 2).reshape(tokens, batch * self.dim)
        part = flat @ flat.transpose(0, 1)
        self._sum = part if self._sum is None else self._sum + part
        self.count += batch
        room = self.keep_grams - sum(g.shape[0] for g in self._grams)
        if room > 0:
            kept = x[:room]
            self._grams.append((kept @ kept.transpose(1, 2)).float())

    def result(self) -> TokenStats:
        if self._sum is None:
            raise RuntimeError("no features were accumulated")
        tokens = self._sum.shape[0]
        grams = torch.cat(self._grams) if self._grams else None
        return TokenStats(m=self._sum / self.count, count=self.count, grid=math.isqrt(tokens), dim=self.dim, grams=grams)


def feature_batches(tower, paths: Sequence[Path], batch_size: int = 32, *, desc: str = "encoding",
                    progress: bool = True) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start, features [batch, L, D_v])`` for ``paths`` in order, with a tqdm bar."""
    from tqdm.auto import tqdm

    with tqdm(total=len(paths), desc=desc, unit="img", disable=not progress) as bar:
        for start in range(0, len(paths), batch_size):
            images = [open_image(p) for p in paths[start:start + batch_size]]
            yield start, tower.encode(images)
            bar.update(len(images))


def token_moments(tower, paths: Sequence[Path], *, batch_size: int = 32, keep_grams: int = 0,
                  progress: bool = True) -> TokenStats:
    """``M`` over all ``paths`` (and the first ``keep_grams`` per-sample Grams)."""
    acc = MomentAccumulator(keep_grams)
    for _, x in feature_batches(tower, paths, batch_size, desc="token statistics", progress=progress):
        acc.update(x)
    return acc.result()


def resampled_moments(tower, paths: Sequence[Path], index_sets: Sequence[np.ndarray], *, batch_size: int = 32,
                      progress: bool = True) -> list[TokenStats]:
    """One ``M`` per index set, encoding each image of their union once."""
    union = np.unique(np.concatenate([np.asarray(s) for s in index_sets]))
    members = np.stack([np.isin(union, s) for s in index_sets])  # [resamples, len(union)]
    accs = [MomentAccumulator() for _ in index_sets]
    chosen = [paths[i] for i in union]
    for start, x in feature_batches(tower, chosen, batch_size, desc="token statistics", progress=progress):
        for acc, mask in zip(accs, members[:, start:start + x.shape[0]]):
            if mask.any():
                acc.update(x[torch.from_numpy(mask)])
    return [acc.result() for acc in accs]
