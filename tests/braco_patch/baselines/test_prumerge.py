"""PruMerge(+): IQR / top-K selection against numpy, merging against a direct loop over kept tokens."""

import numpy as np
import pytest
import torch

from braco_patch.baselines import PruMerge
from braco_patch.baselines.prumerge import importance_scores, single_head_cls_attention


def _attention(b, heads, t, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, heads, t, t, generator=g, dtype=torch.float64)
    logits[:, :, 0, 1 + torch.randperm(t - 1, generator=g)[:4]] += 4.0  # a few clear CLS outliers
    return logits.softmax(-1)


def test_importance_scores_by_hand():
    att = _attention(2, 3, 10)
    np.testing.assert_allclose(importance_scores(att, 9).numpy(), att.numpy()[:, :, 0, 1:].mean(axis=1), rtol=1e-6)
    no_cls = att[..., 1:, 1:]
    np.testing.assert_allclose(importance_scores(no_cls, 9).numpy(), no_cls.numpy().mean(axis=(1, 2)), rtol=1e-6)
    with pytest.raises(ValueError, match="T = 10 \\(CLS\\) or 9 \\(no CLS\\)"):
        importance_scores(att[..., :5, :5], 9)


def test_single_head_cls_attention_by_hand():
    q, k = torch.randn(2, 5, 8, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
    logits = np.einsum("bd,btd->bt", q[:, 0].numpy(), k.numpy()) / np.sqrt(8)
    soft = np.exp(logits - logits.max(1, keepdims=True))
    soft /= soft.sum(1, keepdims=True)
    np.testing.assert_allclose(single_head_cls_attention(q, k).numpy(), soft[:, 1:], rtol=1e-5)


def test_adaptive_selection_is_the_iqr_outliers():
    att = _attention(3, 2, 37, seed=3)
    scores = importance_scores(att, 36)
    kept = PruMerge(4).select(scores)
    for b in range(3):
        row = scores[b].numpy().astype(np.float64)
        q1, q3 = np.percentile(row, [25, 75])
        outliers = np.where(row > q3 + 1.5 * (q3 - q1))[0]
        assert len(outliers) > 0
        assert kept[b].tolist() == sorted(outliers.tolist(), key=lambda j: -row[j])


def test_fixed_k_selection_is_the_top_scores():
    scores = importance_scores(_attention(2, 2, 37, seed=4), 36)
    kept = PruMerge(4, 9).select(scores)
    for b in range(2):
        assert kept[b].tolist() == np.argsort(-scores[b].numpy(), kind="stable")[:8].tolist()


def test_plus_fixed_k_adds_uniform_positions():
    scores = importance_scores(_attention(1, 2, 37, seed=5), 36)
    kept = PruMerge(4, 9, plus=True).select(scores)[0].tolist()  # 8 kept: 4 by score, 4 uniform
    uniform = [int(np.floor((i + 0.5) * 36 / 4)) for i in range(4)]
    assert kept[4:] == uniform == [4, 13, 22, 31]
    order = [j for j in np.argsort(-scores[0].numpy(), kind="stable") if j not in uniform]
    assert kept[:4] == order[:4]


def _direct_merge(x, keys, a, kept, k, extra):
    """Loop over kept tokens: the k most key-similar other tokens, weighted by their scores, added to the centre."""
    unit = keys / np.linalg.norm(keys, axis=1, keepdims=True)
    out = []
    for p in kept:
        others = [j for j in range(len(x)) if j != p]
        sims = np.array([unit[p] @ unit[j] for j in others])
        nearest = [others[i] for i in np.argsort(-sims, kind="stable")[:k]]
        out.append(x[p] + sum(a[j] * x[j] for j in nearest))
    if extra:
        out.append(sum(a[j] * x[j] for j in range(len(x)) if j not in kept))
    return np.stack(out)


@pytest.mark.parametrize("plus", [False, True])
@pytest.mark.parametrize("k", [6, 30])  # 30 of 35: a token that counted itself would enter its own list
def test_merge_equals_a_direct_loop(plus, k):
    torch.manual_seed(0)
    x, keys = torch.randn(2, 36, 5, dtype=torch.float64), torch.randn(2, 37, 3, dtype=torch.float64)
    att = _attention(2, 2, 37, seed=6)
    module = PruMerge(5, 9, plus=plus, neighbours=k)
    out = module(x, att, keys)
    scores = importance_scores(att, 36).double().numpy()
    kept = module.select(importance_scores(att, 36))
    assert out.shape == (2, 9, 5)
    for b in range(2):
        expected = _direct_merge(x[b].numpy(), keys[b, 1:].numpy(), scores[b], kept[b].tolist(), k, True)
        np.testing.assert_allclose(out[b].numpy(), expected, rtol=1e-6, atol=1e-9)


def test_adaptive_mode_is_per_image():
    x, keys = torch.randn(3, 36, 4), torch.randn(3, 37, 4)
    att = _attention(3, 2, 37, seed=7).float()
    batched = PruMerge(4)(x, att, keys)
    for b in range(3):
        single = PruMerge(4)(x[b : b + 1], att[b : b + 1], keys[b : b + 1])[0]
        torch.testing.assert_close(batched[b], single)


def test_budget_errors():
    with pytest.raises(ValueError, match="budget must be at least 2, got 1"):
        PruMerge(4, 1)
    with pytest.raises(ValueError, match="cannot keep 39 of 36 tokens; the budget must be at most 37"):
        PruMerge(4, 40)(torch.randn(1, 36, 4), torch.rand(1, 36), torch.randn(1, 36, 4))
