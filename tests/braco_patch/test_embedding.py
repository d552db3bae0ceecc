"""Basis-coordinate embeddings (paper App. H)."""

import math

import torch

from braco_patch.embedding import feature_width, polar_fourier_features, sincos2d_features


def test_polar_features_match_paper_formula():
    n, c, f = 24, 4, 8
    feats = polar_fourier_features(c, (n, n), num_freqs=f)
    assert feats.shape == (16, 32) and feats.dtype == torch.float64
    for u in range(c):
        for v in range(c):
            r = math.hypot(u, v) / (math.sqrt(2) * (n - 1))
            theta = math.atan2(v, u) if (u, v) != (0, 0) else 0.0
            expect = (
                [math.sin(math.pi * 2**k * r) for k in range(f)]
                + [math.cos(math.pi * 2**k * r) for k in range(f)]
                + [math.sin(2**k * theta) for k in range(f)]
                + [math.cos(2**k * theta) for k in range(f)]
            )
            assert torch.allclose(feats[u * c + v], torch.tensor(expect, dtype=torch.float64), atol=1e-12)


def test_polar_radius_normalised_by_full_lattice_corner():
    raw = polar_fourier_features(2, (24, 24), num_freqs=1, include_raw=True)
    assert raw.shape == (4, 7)
    r, sin_t, cos_t = raw[:, 0], raw[:, 1], raw[:, 2]
    assert torch.allclose(r, torch.tensor([0, 1 / (23 * math.sqrt(2)), 1 / (23 * math.sqrt(2)), 1 / 23], dtype=torch.float64))
    # θ = atan2(v, u): 0 along u (row frequency), π/2 along v; 0 at the origin.
    assert torch.allclose(sin_t, torch.tensor([0.0, 1.0, 0.0, math.sqrt(0.5)], dtype=torch.float64), atol=1e-12)
    assert cos_t[0] == 1.0


def test_sincos2d_and_widths():
    feats = sincos2d_features(3, (24, 16), num_freqs=2)
    assert feats.shape == (9, 8)
    assert torch.allclose(feats[5], torch.tensor([
        math.sin(math.pi * 1 / 23), math.sin(math.pi * 2 / 23), math.cos(math.pi * 1 / 23), math.cos(math.pi * 2 / 23),
        math.sin(math.pi * 2 / 15), math.sin(math.pi * 4 / 15), math.cos(math.pi * 2 / 15), math.cos(math.pi * 4 / 15),
    ], dtype=torch.float64))
    assert feature_width("polar", 8) == 32 and feature_width("polar", 8, True) == 35
    assert feature_width("learned", 8) == 0
