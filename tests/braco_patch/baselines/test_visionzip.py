"""VisionZip against hand-worked cases and a direct float64 re-derivation written with Python loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from braco_patch.baselines.visionzip import VisionZip, attention_scores, default_contextual, visionzip_flops, visionzip_groups


def _reference(features, attention, keys, cls_token, dominant, contextual):
    """One image, float64, loops: the steps as the paper and release describe them."""
    x, a, k = (np.asarray(t, dtype=np.float64) for t in (features, attention, keys))
    heads, n = a.shape[0], x.shape[0]
    scores = a[:, 0, 1:].sum(axis=0)
    top = sorted(np.argsort(-scores, kind="stable")[: dominant - 1].tolist())
    rest = [i for i in range(n) if i not in top]
    metric = k.reshape(k.shape[0], heads, -1).mean(axis=1)[1:]
    unit = metric / np.linalg.norm(metric, axis=1, keepdims=True)
    step = max(1, len(rest) // contextual)
    targets = rest[::step][:contextual]
    groups = {t: [] for t in targets}
    for i in rest:
        if i in groups:
            continue
        sims = [unit[i] @ unit[t] for t in targets]
        groups[targets[int(np.argmax(sims))]].append(i)
    out = [np.asarray(cls_token, dtype=np.float64)] + [x[i] for i in top]
    for t in targets:
        merged = sum((x[j] for j in groups[t]), np.zeros(x.shape[1])) / max(len(groups[t]), 1)
        out.append(x[t] + merged)
    return np.stack(out)


def _inputs(batch=2, n=36, d=12, heads=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, n, d, generator=g), (3 * torch.randn(batch, heads, n + 1, n + 1, generator=g)).softmax(-1),
            torch.randn(batch, n + 1, d, generator=g), torch.randn(batch, d, generator=g))


def test_default_split_is_the_papers():
    # README / paper: 54 + 10 = 64, 108 + 20 = 128, 162 + 30 = 192 on LLaVA-1.5
    assert [default_contextual(k) for k in (64, 128, 192)] == [10, 20, 30]
    assert [VisionZip(8, k).dominant for k in (64, 128, 192)] == [54, 108, 162]
    assert [default_contextual(k) for k in (2, 4, 9, 16, 25)] == [1, 1, 1, 3, 4]


@pytest.mark.parametrize("budget, contextual", [(9, None), (16, 5), (30, 2), (37, 1)])
def test_matches_a_direct_float64_computation(budget, contextual):
    features, attention, keys, cls_token = _inputs()
    module = VisionZip(12, budget, contextual=contextual)
    out = module(features.double(), attention.double(), keys.double(), cls_token.double())
    assert out.shape == (2, budget, 12) and out.dtype == torch.float64
    for b in range(2):
        expected = _reference(features[b], attention[b], keys[b], cls_token[b], module.dominant, module.contextual)
        np.testing.assert_allclose(out[b].numpy(), expected, rtol=1e-12, atol=1e-12)


def test_hand_worked_case():
    # 4 patches, one head; CLS attends most to patch 1; K = 3: CLS + patch 1 dominant, one contextual token.
    x = torch.arange(4 * 2, dtype=torch.float64).reshape(1, 4, 2)
    attention = torch.zeros(1, 1, 5, 5, dtype=torch.float64)
    attention[0, 0, 0] = torch.tensor([0.0, 0.1, 0.5, 0.2, 0.2])
    cls_token = torch.tensor([[9.0, 9.0]], dtype=torch.float64)
    out = VisionZip(2, 3, contextual=1)(x, attention, torch.randn(1, 5, 2, dtype=torch.float64), cls_token)
    # remaining patches 0, 2, 3: the target is patch 0 (every ⌊3/1⌋-th), patches 2 and 3 join it as a mean
    expected = torch.stack([cls_token[0], x[0, 1], x[0, 0] + (x[0, 2] + x[0, 3]) / 2])
    torch.testing.assert_close(out[0], expected, rtol=0, atol=0)


def test_assignment_follows_key_similarity():
    # 5 patches, CLS attends to patch 4; remaining 0..3 with targets 0 and 2 (step 2); keys send 1 → 2 and 3 → 0
    x = torch.eye(5, dtype=torch.float64)[None]
    attention = torch.zeros(1, 1, 6, 6, dtype=torch.float64)
    attention[0, 0, 0, 5] = 1.0
    keys = torch.tensor([[[0, 0], [1, 0], [0, 1], [0, 1], [1, 0.1], [9, 9]]], dtype=torch.float64)  # CLS first
    module = VisionZip(5, 4, contextual=2)
    out = module(x, attention, keys, torch.zeros(1, 5, dtype=torch.float64))
    torch.testing.assert_close(out[0, 2], x[0, 0] + x[0, 3])  # target 0 gets patch 3
    torch.testing.assert_close(out[0, 3], x[0, 2] + x[0, 1])  # target 2 gets patch 1
    kept, groups = visionzip_groups(module, attention, keys, has_cls=True)
    assert kept == [4] and groups == [0, 1, 1, 0, -1]


def test_without_a_cls_token_every_dominant_token_is_a_patch():
    features, attention, keys, _ = _inputs(n=25)
    attention, keys = attention[:, :, 1:, 1:].softmax(-1), keys[:, 1:]
    module = VisionZip(12, 9, contextual=2)
    out = module(features, attention, keys)
    scores = attention.mean(dim=2).sum(dim=1)  # attention received, averaged over queries, summed over heads
    torch.testing.assert_close(attention_scores(attention, 25), scores)
    top = scores.topk(7, dim=1).indices.sort(dim=1).values
    torch.testing.assert_close(out[:, :7], torch.gather(features, 1, top.unsqueeze(-1).expand(-1, -1, 12)))


def test_is_deterministic_and_keeps_k():
    inputs = _inputs(batch=3, n=64)
    module = VisionZip(12, 16)
    first, second = module(*inputs), module(*inputs)
    assert torch.equal(first, second) and first.shape == (3, 16, 12)


def test_one_sentence_errors():
    features, attention, keys, cls_token = _inputs(n=9)
    with pytest.raises(ValueError, match="contextual must be below 4, got 4"):
        VisionZip(12, 4, contextual=4)
    with pytest.raises(ValueError, match="cannot keep 11 tokens of 9 patches and a CLS token; the budget must be at most 10"):
        VisionZip(12, 11, contextual=1)(features, attention, keys, cls_token)
    with pytest.raises(ValueError, match="expected cls_token of shape"):
        VisionZip(12, 4)(features, attention, keys)


def test_flops_by_hand():
    # N = 576, K = 64 = CLS + 53 patches + 10 contextual, D = 1024, 16 heads: 577² scores; 576 - 53 = 523 patches
    # remain, 10 of them targets, 513 merged
    parts = visionzip_flops(1024, 576, 64, heads=16, count_attention=True)
    assert parts == {"scores": 2 * 577 * 577 * 1024, "similarity": 2 * 513 * 10 * 64, "merge": 2 * 10 * 513 * 1024,
                     "add": 10 * 1024}
    assert visionzip_flops(1024, 576, 64, heads=16)["scores"] == 0  # attention-score products: only when counted
