"""Coordinate organisation (paper App. I) and its invariances (App. A)."""

import math

import pytest
import torch

from braco_patch.basis import dct_matrix, lattice_transform
from braco_patch.coordinates import coordinate_matrix, resolve_coordinates


@pytest.mark.parametrize("mode", ["coef", "idct", "randrot"])
@pytest.mark.parametrize("c", [1, 2, 3, 4, 5])
def test_orthogonal_and_energy_preserving(mode, c):
    a = coordinate_matrix(mode, c, seed=7)
    assert torch.allclose(a @ a.T, torch.eye(c * c, dtype=torch.float64), atol=1e-12)
    y = torch.randn(c * c, 11, dtype=torch.float64)
    assert torch.allclose((a @ y).pow(2).sum(), y.pow(2).sum(), rtol=1e-12)


def test_auto_rule_and_aliases():
    assert [resolve_coordinates("auto", c) for c in (1, 2, 3, 4, 5)] == ["coef", "coef", "coef", "idct", "idct"]
    assert resolve_coordinates("vanilla", 4) == "coef"
    with pytest.raises(ValueError, match="unknown coordinate mode 'dct'"):
        resolve_coordinates("dct", 3)


def _lowpass(x, c):
    # Low-pass reconstruction P(X) = D_Nᵀ P_Cᵀ P_C D_N X D_Nᵀ ... on an N x N grid (paper App. J.1).
    d = dct_matrix(x.shape[-1])
    y = lattice_transform(x, d, d)
    y[..., c:, :] = 0
    y[..., :, c:] = 0
    return d.T @ y @ d


def test_idct_block_is_coarse_grid_sample_of_lowpass_image():
    # Derivation: with a_k^C / a_k^N = √(N/C) for every k, Z[p, q] = (N/C) · X̃(t_p, t_q) where X̃ is the
    # cosine interpolant of the low-passed image and t_p = (N/C)(p + ½) - ½. For N/C odd, t_p is the grid
    # point (N/C)p + (N/C - 1)/2, so Z[p, q] = (N/C) · P(X)[t_p, t_q] exactly.
    n, c = 9, 3
    x = torch.randn(n, n, dtype=torch.float64)
    d = dct_matrix(n)
    y = lattice_transform(x, d, d)[:c, :c].reshape(c * c)
    z = (coordinate_matrix("idct", c) @ y).reshape(c, c)
    p = _lowpass(x, c)
    idx = torch.arange(c) * 3 + 1
    assert torch.allclose(z, 3.0 * p[idx][:, idx], atol=1e-12)


def test_idct_block_matches_cosine_interpolation_at_cell_centres():
    n, c = 24, 4
    x = torch.randn(n, n, dtype=torch.float64)
    d = dct_matrix(n)
    y = lattice_transform(x, d, d)[:c, :c]
    z = (coordinate_matrix("idct", c) @ y.reshape(-1)).reshape(c, c)

    def basis_at(k, t):  # N-point DCT basis function k evaluated at continuous position t
        a = math.sqrt(1 / n) if k == 0 else math.sqrt(2 / n)
        return a * math.cos(math.pi / n * (t + 0.5) * k)

    for p in range(c):
        for q in range(c):
            tp, tq = n / c * (p + 0.5) - 0.5, n / c * (q + 0.5) - 0.5
            interp = sum(float(y[u, v]) * basis_at(u, tp) * basis_at(v, tq) for u in range(c) for v in range(c))
            assert math.isclose(float(z[p, q]), n / c * interp, rel_tol=1e-10, abs_tol=1e-10)
