"""Orthonormal bases: exact properties in float64."""

import math

import pytest
import torch

from braco_patch.basis import (
    dct_matrix,
    haar_matrix,
    lattice_inverse,
    lattice_transform,
    make_basis,
    random_orthogonal,
    retained_block_operator,
)

SIZES = [1, 2, 3, 4, 7, 8, 16, 24, 27, 32]


@pytest.mark.parametrize("name", ["dct", "haar", "random", "spatial"])
@pytest.mark.parametrize("n", SIZES)
def test_orthonormal(name, n):
    b = make_basis(name, n, seed=3)
    assert b.dtype == torch.float64 and b.shape == (n, n)
    eye = torch.eye(n, dtype=torch.float64)
    assert torch.allclose(b @ b.T, eye, atol=1e-12, rtol=0)
    assert torch.allclose(b.T @ b, eye, atol=1e-12, rtol=0)


@pytest.mark.parametrize("n", [2, 5, 24])
def test_dct_diagonalises_neumann_laplacian(n):
    # DCT-II vectors are the eigenvectors of the second-difference matrix with reflecting boundaries,
    # with eigenvalues 2 - 2cos(πk/n): an independent characterisation of the basis.
    t = 2 * torch.eye(n, dtype=torch.float64) - torch.diag(torch.ones(n - 1, dtype=torch.float64), 1)
    t = t - torch.diag(torch.ones(n - 1, dtype=torch.float64), -1)
    t[0, 0] = t[-1, -1] = 1.0
    d = dct_matrix(n)
    lam = torch.tensor([2 - 2 * math.cos(math.pi * k / n) for k in range(n)], dtype=torch.float64)
    assert torch.allclose(d @ t @ d.T, torch.diag(lam), atol=1e-12)
    assert d[0, 0] > 0 and torch.allclose(d[0], torch.full((n,), 1 / math.sqrt(n), dtype=torch.float64))


def _recursive_haar(n):
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        m = h.shape[0]
        top = torch.kron(h, torch.tensor([[1.0, 1.0]], dtype=torch.float64))
        bottom = torch.kron(torch.eye(m, dtype=torch.float64), torch.tensor([[1.0, -1.0]], dtype=torch.float64))
        h = torch.cat([top, bottom]) / math.sqrt(2)
    return h


@pytest.mark.parametrize("n", [2, 4, 8, 32])
def test_haar_power_of_two_is_standard(n):
    assert torch.allclose(haar_matrix(n), _recursive_haar(n), atol=1e-12)


@pytest.mark.parametrize("n", [24, 27])
def test_haar_extension_rows_are_piecewise_constant_wavelets(n):
    h = haar_matrix(n)
    for row in h[1:]:
        support = row.nonzero().flatten()
        assert (support[1:] - support[:-1] == 1).all()  # one contiguous interval
        values = row[support]
        assert len(set(values.sign().tolist())) == 2 and abs(float(values.sum())) < 1e-12
        pos, neg = values[values > 0], values[values < 0]
        assert abs(len(pos) - len(neg)) <= 1  # halves differ by at most one token


def test_random_orthogonal_seeded_and_haar_distributed():
    assert torch.equal(random_orthogonal(6, seed=1), random_orthogonal(6, seed=1))
    assert not torch.equal(random_orthogonal(6, seed=1), random_orthogonal(6, seed=2))
    # Haar measure: E[Q_ij²] = 1/n and E[Q_ij] = 0 (Monte Carlo).
    qs = torch.stack([random_orthogonal(4, seed=s) for s in range(2000)])
    assert torch.allclose(qs.pow(2).mean(0), torch.full((4, 4), 0.25, dtype=torch.float64), atol=0.03)
    assert qs.mean(0).abs().max() < 0.05


@pytest.mark.parametrize("name", ["dct", "haar", "random"])
def test_parseval_on_lattice(name):
    x = torch.randn(3, 5, 24, 16, dtype=torch.float64)
    bh, bw = make_basis(name, 24, seed=0), make_basis(name, 16, seed=1)
    y = lattice_transform(x, bh, bw)
    assert torch.allclose(y.pow(2).sum((-1, -2)), x.pow(2).sum((-1, -2)), rtol=1e-12)
    assert torch.allclose(lattice_inverse(y, bh, bw), x, atol=1e-12)


def test_retained_block_operator_equals_truncated_transform():
    x = torch.randn(2, 12, 10, dtype=torch.float64)
    bh, bw = dct_matrix(12), dct_matrix(10)
    full = lattice_transform(x, bh, bw)[:, :4, :4].reshape(2, 16)
    op = retained_block_operator(bh, bw, 4)
    assert op.shape == (16, 120)
    assert torch.allclose(op @ x.reshape(2, 120).T, full.T, atol=1e-12)
    with pytest.raises(ValueError, match="C=11 exceeds"):
        retained_block_operator(bh, bw, 11)


def test_bad_basis_arguments():
    with pytest.raises(ValueError, match="unknown basis 'fourier'"):
        make_basis("fourier", 4)
    with pytest.raises(ValueError, match="positive integer"):
        dct_matrix(0)
