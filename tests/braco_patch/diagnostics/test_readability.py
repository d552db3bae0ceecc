"""Readability R (paper App. B), C = λE + (1−λ)R (eq. unified_C) and the ridge probe behind the task direction."""

import numpy as np
import pytest
import torch

from braco_patch.basis import random_orthogonal
from braco_patch.diagnostics.energy import FIXED_BASES, basis_operator, energy_retention, structured_order
from braco_patch.diagnostics.readability import (
    RidgeProbe,
    channel_projection,
    compressibility,
    probe_diagnostics,
    readability,
    readability_curve,
    task_direction,
)

from .conftest import random_moment, second_moment


def _data(n=5, samples=40, dim=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, n * n, dim, generator=gen, dtype=torch.float64).cumsum(1)
    return x, second_moment(x)


@pytest.mark.parametrize("basis", FIXED_BASES)
def test_readability_in_unit_interval_and_one_for_the_full_basis(basis):
    x, m = _data()
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(3, 25, 6, generator=gen, dtype=torch.float64)
    u = basis_operator(basis, 5, seed=2)
    values = readability_curve(m, u, structured_order(5), w, range(1, 26))
    assert all(-1e-12 <= v <= 1 + 1e-12 for v in values)
    assert values[-1] == pytest.approx(1.0, abs=1e-10)
    assert readability(m, random_orthogonal(25, 3), w) == pytest.approx(1.0, abs=1e-10)
    assert all(a <= b + 1e-10 for a, b in zip(values, values[1:]))  # nested subspaces


def test_readability_is_the_explained_share_of_the_readout_by_least_squares():
    # For one task direction w (a token-axis vector), ‖Πw‖²_M / ‖w‖²_M is the share of E[(wᵀx)²] that the best
    # linear readout of the retained coefficients Vᵀx recovers, over all (image, channel) token vectors x.
    x, m = _data(samples=60)
    vectors = x.permute(0, 2, 1).reshape(-1, 25)                # every (image, channel) token-axis vector
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(25, generator=gen, dtype=torch.float64)
    rows = basis_operator("dct", 5)[structured_order(5)[:6]]
    target = vectors @ w
    coeffs = vectors @ rows.T
    fit = coeffs @ torch.linalg.lstsq(coeffs, target.unsqueeze(1)).solution.squeeze(1)
    assert readability(m, rows, w.unsqueeze(1)) == pytest.approx(float(fit.pow(2).sum() / target.pow(2).sum()), rel=1e-8)


def test_readability_depends_on_the_subspace_not_its_coordinates():
    m = random_moment(4, seed=6)
    w = torch.randn(16, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    rows = basis_operator("haar", 4)[structured_order(4)[:4]]
    assert readability(m, random_orthogonal(4, 5) @ rows, w) == pytest.approx(readability(m, rows, w), rel=1e-9)


def test_a_pooled_probe_direction_makes_r_task_independent():
    # Why the task direction is fitted on the token field: W* = 1 wᵀ / L from a pooled probe has constant columns,
    # so R no longer depends on w (documented in readability.py).
    m = random_moment(5, seed=8)
    rows = basis_operator("spatial", 5)[structured_order(5)[:4]]
    gen = torch.Generator().manual_seed(0)
    pooled = [torch.ones(25, 1, dtype=torch.float64) @ torch.randn(1, 7, generator=gen, dtype=torch.float64) / 25 for _ in range(3)]
    values = [readability(m, rows, w) for w in pooled]
    assert max(values) - min(values) < 1e-10


def test_compressibility_weights_energy_and_readability():
    assert compressibility(0.2, 0.8, 1.0) == pytest.approx(0.2)
    assert compressibility(0.2, 0.8, 0.0) == pytest.approx(0.8)
    assert compressibility(0.2, 0.8, 0.25) == pytest.approx(0.25 * 0.2 + 0.75 * 0.8)
    with pytest.raises(ValueError, match="lambda must be in"):
        compressibility(0.2, 0.8, 1.5)


def test_channel_projection_is_orthonormal_or_skipped():
    q = channel_projection(32, 8, seed=1)
    assert torch.allclose(q.T.double() @ q.double(), torch.eye(8, dtype=torch.float64), atol=1e-6)
    assert channel_projection(32, 0) is None and channel_projection(32, 64) is None


def test_ridge_loo_error_matches_refitting_without_each_sample():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(12, 5, generator=gen, dtype=torch.float64)
    labels = np.array([0, 1, 2] * 4)
    probe = RidgeProbe().fit(x, labels, 3)
    xc, yc = probe.x, torch.nn.functional.one_hot(torch.as_tensor(labels), 3).double() - probe.y_mean
    alpha = 0.1 * probe.scale
    err = 0.0
    for i in range(12):  # refit on the centred data without sample i (the centring is held fixed)
        keep = [j for j in range(12) if j != i]
        w = torch.linalg.solve(xc[keep].T @ xc[keep] + alpha * torch.eye(5, dtype=torch.float64), xc[keep].T @ yc[keep])
        err += float((xc[i] @ w - yc[i]).pow(2).sum())
    assert probe.loo_error(0.1) == pytest.approx(err, rel=1e-8)


def test_task_direction_recovers_a_planted_token_field_rule():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(300, 9, 4, generator=gen, dtype=torch.float64)
    planted = torch.zeros(9, 4, dtype=torch.float64)
    planted[2, 1], planted[7, 3] = 1.0, -1.0
    labels = ((x * planted).sum((1, 2)) > 0).long().numpy()
    w, _ = task_direction(x, labels, 2)
    direction = (w[1] - w[0]).reshape(-1)
    cosine = float(direction @ planted.reshape(-1) / direction.norm() / planted.norm())
    assert cosine > 0.9


def test_probe_diagnostics_rows_and_klt_oracle():
    gen = torch.Generator().manual_seed(9)
    n, count = 4, 60
    x = torch.randn(count, n * n, 5, generator=gen, dtype=torch.float64).cumsum(1)
    labels = (x[:, 0, 0] > x[:, 0, 0].median()).long().numpy()
    splits = {"train": np.arange(0, 36), "val": np.arange(36, 48), "test": np.arange(48, 60)}
    m = second_moment(x[splits["train"]])
    result = probe_diagnostics(x.float(), labels, splits, m, n, bases=["spatial", "dct", "klt"], budgets=[1, 4, 16], lam=0.5)
    assert len(result.rows) == 9
    for row in result.rows:
        assert 0 <= row["readability"] <= 1 + 1e-9 and 0 <= row["val_accuracy"] <= 1
        assert row["compressibility"] == pytest.approx(0.5 * row["energy"] + 0.5 * row["readability"])
    dct4 = next(r for r in result.rows if r["basis"] == "dct" and r["K"] == 4)
    assert dct4["energy"] == pytest.approx(energy_retention(m, basis_operator("dct", n)[structured_order(n)[:4]]))
    for k in (1, 4, 16):
        klt = next(r for r in result.rows if r["basis"] == "klt" and r["K"] == k)
        assert all(klt["energy"] >= r["energy"] - 1e-9 for r in result.rows if r["K"] == k)
    assert all(r["readability"] == pytest.approx(1.0) for r in result.rows if r["K"] == 16)
