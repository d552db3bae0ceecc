"""Fourier-VLM against a float64 DCT → crop → inverse DCT written with explicit cosine sums."""

import math

import numpy as np
import pytest
import torch

from braco_patch.baselines import FourierVLM


def _dct_crop_idct(x: np.ndarray, h: int, w: int, c: int) -> np.ndarray:
    """``[H·W, D]`` → ``[C², D]``: orthonormal DCT-II per axis, keep u, v < C, orthonormal size-C inverse."""
    grid = x.reshape(h, w, -1)

    def a(k, n):
        return math.sqrt((1 if k == 0 else 2) / n)

    coef = np.zeros((c, c, grid.shape[-1]))
    for u in range(c):
        for v in range(c):
            for i in range(h):
                for j in range(w):
                    coef[u, v] += a(u, h) * a(v, w) * math.cos(math.pi * (i + 0.5) * u / h) * math.cos(math.pi * (j + 0.5) * v / w) * grid[i, j]
    out = np.zeros((c, c, grid.shape[-1]))
    for p in range(c):
        for q in range(c):
            for u in range(c):
                for v in range(c):
                    out[p, q] += a(u, c) * a(v, c) * math.cos(math.pi * (p + 0.5) * u / c) * math.cos(math.pi * (q + 0.5) * v / c) * coef[u, v]
    return out.reshape(c * c, -1)


@pytest.mark.parametrize("grid,budget", [((6, 6), 9), ((6, 6), 4), ((4, 6), 16)])
def test_equals_float64_cosine_sums(grid, budget):
    h, w = grid
    x = torch.randn(2, h * w, 3, dtype=torch.float64)
    module = FourierVLM(3, budget, grid=grid if h != w else None)
    out = module(x)
    assert out.shape == (2, budget, 3)
    for b in range(2):
        np.testing.assert_allclose(out[b].numpy(), _dct_crop_idct(x[b].numpy(), h, w, math.isqrt(budget)), rtol=1e-10, atol=1e-12)


def test_rescale_keeps_a_constant_grid():
    x = torch.full((1, 36, 2), 3.0, dtype=torch.float64)
    torch.testing.assert_close(FourierVLM(2, 9, rescale=True)(x), torch.full((1, 9, 2), 3.0, dtype=torch.float64))
    torch.testing.assert_close(FourierVLM(2, 9)(x), torch.full((1, 9, 2), 3.0 * 6 / 3, dtype=torch.float64))  # √(H·W)/C = 2


def test_budget_errors():
    with pytest.raises(ValueError, match="perfect square .* got 5"):
        FourierVLM(4, 5)
    with pytest.raises(ValueError, match=r"K=49 needs C=7 but the 6x6 grid allows at most C=6"):
        FourierVLM(4, 49)(torch.randn(1, 36, 4))
