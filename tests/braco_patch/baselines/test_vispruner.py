"""VisPruner against a hand-worked case and a direct float64 re-derivation written with Python lists."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from braco_patch.baselines.vispruner import VisPruner, cls_attention, important_count, vispruner_flops, vispruner_parts


def _reference(features, attention, budget, ratio):
    """One image, float64, lists: important by CLS attention, then rounds of even/odd matching."""
    x, a = np.asarray(features, dtype=np.float64), np.asarray(attention, dtype=np.float64)
    scores = a[:, 0, 1:].mean(axis=0)
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    important = int(budget * ratio)
    keep, residual = budget - important, order[important:]
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    while keep > 0 and len(residual) - keep > 0:
        drop = min(8, len(residual) - keep)
        evens, odds = residual[0::2], residual[1::2]
        best = [max(unit[i] @ unit[j] for j in odds) for i in evens]
        ranked = sorted(range(len(evens)), key=lambda e: (-best[e], e))
        residual = [evens[e] for e in ranked[drop:]] + odds
    chosen = order[:important] + (residual if keep > 0 else [])
    return sorted(chosen)


def _inputs(batch=2, n=100, d=12, heads=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, n, d, generator=g), (3 * torch.randn(batch, heads, n + 1, n + 1, generator=g)).softmax(-1)


def test_important_count_is_the_releases():
    # README: "64 important tokens and 64 diverse" = 128 at 0.5; "48 important and 16 diverse" = 64 at 0.75
    assert (important_count(128, 0.5), important_count(64, 0.75)) == (64, 48)
    assert VisPruner(8, 64, important_ratio=0.75).important == 48
    assert VisPruner(8, 9).important == 4  # int(4.5)


@pytest.mark.parametrize("budget, ratio", [(9, 0.5), (16, 0.5), (30, 0.75), (40, 0.25), (20, 1.0), (20, 0.0), (100, 0.5)])
def test_matches_a_direct_float64_computation(budget, ratio):
    features, attention = _inputs()
    module = VisPruner(12, budget, important_ratio=ratio)
    kept = module.select(features.double(), attention.double())
    for b in range(2):
        assert kept[b].tolist() == _reference(features[b], attention[b], budget, ratio)
    out = module(features, attention)
    torch.testing.assert_close(out, torch.gather(features, 1, kept.unsqueeze(-1).expand(-1, -1, 12)))


def test_hand_worked_round():
    # 4 patches ranked 2 > 0 > 3 > 1 by CLS attention; K = 2 at r = 0.5: patch 2, then one of 0, 3, 1. One round
    # drops min(8, 3 - 1) = 2 of the even positions (0 and 1) of [0, 3, 1], leaving the odd one: patch 3.
    attention = torch.zeros(1, 1, 5, 5)
    attention[0, 0, 0, 1:] = torch.tensor([0.3, 0.1, 0.4, 0.2])
    important, diverse = vispruner_parts(torch.randn(1, 4, 3), cls_attention(attention, 4), 2, 1)
    assert important.tolist() == [[2]] and diverse.tolist() == [[3]]


def test_odd_sequences_where_the_release_fails():
    # N - ⌊K·r⌋ odd (576 - 3 = 573): the release's index sizes disagree; here every even token takes part
    features, attention = _inputs(batch=1, n=576, d=8)
    kept = VisPruner(8, 4, important_ratio=0.75).select(features, attention)
    assert kept.shape == (1, 4) and len(set(kept[0].tolist())) == 4
    assert kept[0].tolist() == _reference(features[0], attention[0], 4, 0.75)


def test_without_a_cls_token_importance_is_attention_received():
    features, attention = _inputs(n=49)
    attention = attention[:, :, 1:, 1:].softmax(-1)
    torch.testing.assert_close(cls_attention(attention, 49), attention.mean(dim=(1, 2)))
    assert VisPruner(12, 9).select(features, attention).shape == (2, 9)


def test_kept_positions_are_unique_sorted_and_deterministic():
    features, attention = _inputs(batch=3, n=144)
    module = VisPruner(12, 25)
    kept = module.select(features, attention)
    assert torch.equal(kept, module.select(features, attention))
    for row in kept.tolist():
        assert row == sorted(set(row)) and len(row) == 25 and 0 <= row[0] and row[-1] < 144


def test_one_sentence_errors():
    features, attention = _inputs(n=9)
    with pytest.raises(ValueError, match="important ratio must be between 0 and 1, got 1.5"):
        VisPruner(12, 4, important_ratio=1.5)
    with pytest.raises(ValueError, match="cannot keep 10 of 9 tokens; the budget must be at most 9"):
        VisPruner(12, 10).select(features, attention)


def test_flops_by_hand():
    # N = 10, K = 4, r = 0.5: 2 important, R = 8 → one round drops min(8, 6) = 6 with a [4, 4] product; then R = 2
    assert vispruner_flops(16, 10, 4, count_attention=True) == {"scores": 2 * 11 * 11 * 16, "matching": 2 * 4 * 4 * 16}
    assert vispruner_flops(16, 10, 4)["scores"] == 0
    # rounds of 8: R = 20 → 12 (10 x 10) → 4 (6 x 6) with K - ⌊K·r⌋ = 4
    assert vispruner_flops(1, 28, 12, important_ratio=2 / 3)["matching"] == 2 * (10 * 10 + 6 * 6)
