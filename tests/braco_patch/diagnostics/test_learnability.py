"""Learnability of coordinate organisations (paper §3.2, App. C, D, I) and the K_b* calibration summary."""

import pytest
import torch

from braco_patch.basis import dct_matrix, random_orthogonal
from braco_patch.coordinates import coordinate_matrix
from braco_patch.diagnostics.learnability import (
    DEFAULT_BETA,
    DEFAULT_GAMMA,
    CoordinateScores,
    block_gram,
    coordinate_scores,
    crossover_budget,
    crossover_scan,
    format_calibration_table,
    geo_penalty,
    learn_objective,
    stat_penalty,
    summarize_calibration,
)

from .conftest import random_moment, second_moment


def _l_st_by_hand(g_bar, a, gamma):
    g = a @ g_bar @ a.T
    k = g.shape[0]
    mean = sum(g_bar[i, i] for i in range(k)) / k
    off = sum(g[i, j] ** 2 for i in range(k) for j in range(k) if i != j)
    return float(off + gamma * sum((g[i, i] - mean) ** 2 for i in range(k)))


@pytest.mark.parametrize("mode", ["coef", "idct", "randrot"])
def test_stat_penalty_matches_the_written_out_definition(mode):
    g_bar = block_gram(random_moment(6, seed=1), 3)
    a = coordinate_matrix(mode, 3, seed=2)
    for gamma in (0.0, 0.3, 2.0):
        assert stat_penalty(g_bar, a, gamma) == pytest.approx(_l_st_by_hand(g_bar, a, gamma), rel=1e-10)


@pytest.mark.parametrize("c", range(1, 9))
def test_geometric_penalty_of_the_coarse_grid_is_zero_and_rho_is_one_minus_trace_squared(c):
    u_c = coordinate_matrix("idct", c)
    assert geo_penalty(u_c, u_c) == pytest.approx(0.0, abs=1e-12)
    rho = geo_penalty(torch.eye(c * c, dtype=torch.float64), u_c)
    assert rho == pytest.approx(1 - float(torch.trace(dct_matrix(c))) ** 2 / c**2, abs=1e-12)  # tr(D⊗D) = tr(D)²
    assert 0 <= rho <= 2
    a = random_orthogonal(c * c, 3)
    assert geo_penalty(a, u_c) == pytest.approx(float((a - u_c).pow(2).sum()) / (2 * c * c), abs=1e-12)  # eq. unified_geom_obj


@pytest.mark.parametrize("c", [2, 3, 4, 6])
@pytest.mark.parametrize("beta,gamma", [(DEFAULT_BETA, DEFAULT_GAMMA), (0.3, 0.1), (1e-5, 2.0)])
def test_closed_form_difference_equals_direct_computation(c, beta, gamma):
    # eq. specialize_compare: L_learn(U_C) − L_learn(I) = Δ_st / K_b² − β ρ_C.
    m = random_moment(7, seed=c) + 2.0  # a common mean component, as in real features
    g_bar, k = block_gram(m, c), c * c
    u_c, eye = coordinate_matrix("idct", c), torch.eye(c * c, dtype=torch.float64)
    direct = learn_objective(g_bar, u_c, u_c, beta=beta, gamma=gamma) - learn_objective(g_bar, eye, u_c, beta=beta, gamma=gamma)
    delta = _l_st_by_hand(g_bar, u_c, gamma) - _l_st_by_hand(g_bar, eye, gamma)
    rho = 1 - float(torch.trace(u_c)) / k
    assert direct == pytest.approx(delta / k**2 - beta * rho, rel=1e-9, abs=1e-15)
    scores = coordinate_scores(m, c, beta=beta, gamma=gamma)
    assert scores.difference == pytest.approx(direct, rel=1e-9, abs=1e-15)
    assert scores.choice == ("idct" if direct < 0 else "coef")
    assert scores.l_geo["idct"] == pytest.approx(0.0, abs=1e-12)


def test_gamma_one_makes_the_statistical_term_rotation_invariant():
    # ‖OffDiag G‖² + ‖diag G − c1‖² = ‖G − cI‖_F², unchanged by G -> A G Aᵀ (documented in learnability.py).
    g_bar = block_gram(random_moment(6, seed=4) + 1.0, 4)
    values = [stat_penalty(g_bar, a, 1.0) for a in (torch.eye(16, dtype=torch.float64), coordinate_matrix("idct", 4),
                                                     random_orthogonal(16, 8))]
    assert max(values) - min(values) < 1e-10 * max(values)
    u_c, eye = coordinate_matrix("idct", 4), torch.eye(16, dtype=torch.float64)
    off = lambda a: _l_st_by_hand(g_bar, a, 0.0)  # noqa: E731
    for gamma in (0.0, 0.5, 1.5):
        delta = stat_penalty(g_bar, u_c, gamma) - stat_penalty(g_bar, eye, gamma)
        assert delta == pytest.approx((1 - gamma) * (off(u_c) - off(eye)), rel=1e-9, abs=1e-14)


def test_block_gram_is_the_retained_coefficient_gram(photo_tokens):
    m = second_moment(photo_tokens)
    d = dct_matrix(24)
    grids = photo_tokens.reshape(-1, 24, 24, photo_tokens.shape[-1])
    z = torch.einsum("uh,vw,shwd->suvd", d[:3], d[:3], grids).reshape(grids.shape[0], 9, -1)
    direct = torch.einsum("skd,sjd->kj", z, z) / grids.shape[0]
    assert torch.allclose(block_gram(m, 3, scale="raw"), direct, rtol=1e-10, atol=1e-9)
    energy = block_gram(m, 3)
    assert float(torch.trace(energy)) == pytest.approx(float(z.pow(2).sum() / grids.pow(2).sum()), rel=1e-10)


def test_random_rotation_is_nearly_orthogonal_to_the_coarse_grid():
    # App. I: ⟨R, U_C⟩_F ≈ 0 for Haar-random R in high dimension, so L_geo(R) ≈ 1.
    values = [coordinate_scores(random_moment(8, seed=s), 8, seed=s).l_geo["randrot"] for s in range(5)]
    assert all(abs(v - 1) < 0.1 for v in values)


def test_scan_rejects_cutoffs_beyond_the_grid():
    with pytest.raises(ValueError, match="cutoff C=7 does not fit the 6x6 token grid"):
        crossover_scan(random_moment(6), [2, 7])


def test_default_beta_gamma_put_the_crossover_at_sixteen_on_photographs(photo_tokens):
    # The documented stand-in for the paper's CLIP setting: 24 x 24 patch grids of every bundled photograph.
    scan = crossover_scan(second_moment(photo_tokens), range(2, 17))
    assert crossover_budget(scan) == 16
    assert [s.choice for s in scan[:3]] == ["coef", "coef", "idct"]
    for s in scan:  # β_C is where the choice flips
        if s.beta_threshold is not None:
            flipped = coordinate_scores(second_moment(photo_tokens), s.cutoff, beta=s.beta_threshold * 1.01)
            assert flipped.choice == "idct"


def _fake_scan(choices, start=2):
    return [CoordinateScores(c, c * c, 0.0, {}, {}, {}, 1.0, 1.0, -1.0 if ch == "idct" else 1.0, None, ch)
            for c, ch in enumerate(choices, start=start)]


def test_summary_median_range_and_votes_like_the_paper_table():
    scans = [_fake_scan(["coef", "coef", "idct", "idct"]), _fake_scan(["coef", "coef", "coef", "idct"]),
             _fake_scan(["coef", "coef", "idct", "idct"])]
    summary = summarize_calibration(scans)
    assert summary["k_b_star"] == [16, 25, 16]
    assert (summary["k_b_star_median"], summary["k_b_star_min"], summary["k_b_star_max"]) == (16, 16, 25)
    assert [b["idct_votes"] for b in summary["per_budget"]] == [0, 0, 2, 3]
    assert [b["choice"] for b in summary["per_budget"]] == ["coef", "coef", "idct", "idct"]
    table = format_calibration_table([("CLIP ViT-L/14-336", "LLaVA-Pretrain", summary)])
    assert "| CLIP ViT-L/14-336" in table and "LLaVA-Pretrain K_b*" in table and "16 (16–25)" in table


def test_summary_without_crossover_reads_beyond_the_scan():
    summary = summarize_calibration([_fake_scan(["coef"] * 3), _fake_scan(["coef", "coef", "idct"]), _fake_scan(["coef"] * 3)])
    assert summary["k_b_star"] == [None, 16, None] and summary["k_b_star_median"] is None
    assert ">16 (16–>16)" in format_calibration_table([("enc", "data", summary)])
