"""Spatial residual pooling units (paper App. J.2)."""

import pytest
import torch

from braco_patch.residual import (
    build_scorer,
    check_selection,
    gradient_energy,
    pool,
    select,
    sparsemax_traceable,
    standardise,
)


def _simplex_projection_bisect(z: torch.Tensor, iters: int = 200) -> torch.Tensor:
    # Independent sparsemax: find τ with Σ max(z - τ, 0) = 1 by bisection (float64).
    lo = z.max(-1, keepdim=True).values - 1.0
    hi = z.max(-1, keepdim=True).values
    for _ in range(iters):
        mid = (lo + hi) / 2
        too_big = (z - mid).clamp(min=0).sum(-1, keepdim=True) > 1
        lo = torch.where(too_big, mid, lo)
        hi = torch.where(too_big, hi, mid)
    return (z - (lo + hi) / 2).clamp(min=0)


def test_sparsemax_on_simplex_and_sparse():
    logits = torch.randn(3, 5, 144) * 4
    w = select(logits, torch.tensor(0.8), "sparsemax")
    assert torch.allclose(w.sum(-1), torch.ones(3, 5), atol=1e-5)
    assert (w >= 0).all()
    assert ((w > 0).sum(-1) < 144).all()  # spread logits give a strictly smaller support
    ref = _simplex_projection_bisect((logits / 0.8).double())
    assert torch.allclose(w.double(), ref, atol=1e-5)


def test_temperature_sharpens_support():
    logits = torch.randn(2, 3, 64)
    hot = (select(logits, torch.tensor(4.0)) > 0).sum(-1)
    cold = (select(logits, torch.tensor(0.25)) > 0).sum(-1)
    assert (cold <= hot).all() and (cold < hot).any()


@pytest.mark.parametrize("name", ["softmax", "entmax15", "entmax:1.7"])
def test_other_selections_on_simplex(name):
    w = select(torch.randn(2, 3, 16), torch.tensor(1.0), name)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3), atol=1e-4) and (w >= 0).all()


def test_selection_dtype_roundtrip_bf16():
    w = select(torch.randn(1, 2, 36, dtype=torch.bfloat16), torch.tensor(0.8), "sparsemax")
    assert w.dtype == torch.bfloat16


@pytest.mark.parametrize("bad", ["argmax", "entmax:1.0", "entmax:x"])
def test_unknown_selection(bad):
    with pytest.raises(ValueError, match="unknown selection function"):
        check_selection(bad)


def test_gradient_energy_matches_explicit_neighbour_sum():
    g = torch.randn(2, 4, 5, 3)
    e = gradient_energy(g).view(2, 4, 5)
    for b in range(2):
        for h in range(4):
            for w in range(5):
                total = 0.0
                for dh, dw in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                    hh, ww = h + dh, w + dw
                    if 0 <= hh < 4 and 0 <= ww < 5:
                        total += float((g[b, h, w] - g[b, hh, ww]).pow(2).sum())
                assert abs(float(e[b, h, w]) - total) < 1e-4
    s = standardise(e.flatten(1))
    assert torch.allclose(s.mean(-1), torch.zeros(2), atol=1e-5)
    assert torch.allclose(s.std(-1), torch.ones(2), atol=1e-4)


def test_gradient_energy_runs_in_float32():
    assert gradient_energy(torch.randn(1, 3, 3, 4, dtype=torch.bfloat16)).dtype == torch.float32


def test_scorer_layouts():
    assert [type(m).__name__ for m in build_scorer(8, 3, 1)] == ["LayerNorm", "Linear", "GELU", "Linear"]
    assert build_scorer(8, 3, 1)[1].out_features == 8
    assert [type(m).__name__ for m in build_scorer(8, 3, 0)] == ["LayerNorm", "Linear"]
    assert build_scorer(8, 3, -1)[1].out_features == 3


def test_pool_is_weighted_sum():
    w = torch.softmax(torch.randn(2, 3, 10), -1)
    x = torch.randn(2, 10, 4)
    assert torch.allclose(pool(w, x), torch.einsum("bsl,bld->bsd", w, x), atol=1e-6)


def test_traceable_sparsemax_equals_entmax_forward_and_backward():
    from entmax import sparsemax

    z = (torch.randn(4, 7, 100) * 3).requires_grad_()
    ours = sparsemax_traceable(z)
    ref = sparsemax(z, dim=-1)
    assert torch.equal(ours, ref)
    g = torch.randn_like(ours)
    (ga,) = torch.autograd.grad((ours * g).sum(), z)
    (gb,) = torch.autograd.grad((ref * g).sum(), z)
    assert torch.allclose(ga, gb, atol=1e-6)
