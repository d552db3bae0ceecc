"""CDPruner against hand-worked relevance and a naive greedy MAP over determinants (float64, numpy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from braco_patch.baselines.cdpruner import (
    CDPruner,
    cdpruner_flops,
    clip_text_flops,
    cosine_similarity,
    dpp_greedy_map,
    instruction_relevance,
    minmax,
)


def _greedy_determinants(kernel: np.ndarray, count: int) -> list[int]:
    """Greedy MAP by definition: each step adds the item that maximises det(L[S ∪ {j}])."""
    chosen: list[int] = []
    for _ in range(count):
        gains = [np.linalg.det(kernel[np.ix_(chosen + [j], chosen + [j])]) if j not in chosen else -np.inf for j in range(len(kernel))]
        chosen.append(int(np.argmax(gains)))
    return chosen


def _reference(tokens, image_embeds, text_embeds, count):
    """One image, float64: similarity, relevance (negated cosine, min-max), kernel, greedy over determinants."""
    x, v, t = (np.asarray(a, dtype=np.float64) for a in (tokens, image_embeds, text_embeds))
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    rel = -(v / np.linalg.norm(v, axis=1, keepdims=True)) @ (t / np.linalg.norm(t, axis=1, keepdims=True)).T
    rel = rel.mean(axis=1)
    rel = (rel - rel.min() + 1e-6) / (rel.max() - rel.min())
    kernel = rel[:, None] * (unit @ unit.T) * rel[None, :]
    return sorted(_greedy_determinants(kernel, count))


def test_fast_greedy_map_equals_greedy_over_determinants():
    g = torch.Generator().manual_seed(0)
    basis = torch.randn(30, 40, generator=g, dtype=torch.float64)
    kernel = basis @ basis.T
    picks = dpp_greedy_map(kernel[None], 12)[0].tolist()
    assert picks == _greedy_determinants(kernel.numpy(), 12)


def test_relevance_by_hand():
    # three tokens at 0°, 90°, 180° against a text at 0°: cos 1, 0, -1 → negated -1, 0, 1 → min-max (r + 1 + 1e-6) / 2
    image = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0]]])
    relevance = instruction_relevance(image, [torch.tensor([[5.0, 0.0]])])
    torch.testing.assert_close(relevance[0], torch.tensor([1e-6, 1 + 1e-6, 2 + 1e-6]) / 2)
    # two text segments: the mean of the negated cosines
    relevance = instruction_relevance(image, [torch.tensor([[1.0, 0.0], [0.0, 1.0]])])
    torch.testing.assert_close(relevance[0], minmax(torch.tensor([-0.5, -0.5, 0.5])))
    assert torch.equal(minmax(torch.full((4,), 0.3)), torch.ones(4))  # constant relevance: 1 everywhere


@pytest.mark.parametrize("budget", [1, 5, 16, 40])
def test_matches_a_direct_float64_computation(budget):
    g = torch.Generator().manual_seed(1)
    tokens, image, texts = torch.randn(2, 40, 64, generator=g), torch.randn(2, 40, 8, generator=g), torch.randn(2, 3, 8, generator=g)
    kept = CDPruner(budget).select(tokens.double(), image.double(), texts.double())
    for b in range(2):
        assert kept[b].tolist() == _reference(tokens[b], image[b], texts[b], budget)
    out = CDPruner(budget)(tokens, image, texts)
    torch.testing.assert_close(out, torch.gather(tokens, 1, kept.unsqueeze(-1).expand(-1, -1, 64)))


def test_without_an_instruction_it_is_a_similarity_dpp():
    g = torch.Generator().manual_seed(2)
    tokens = torch.randn(1, 30, 50, generator=g, dtype=torch.float64)
    x = tokens[0].numpy()
    similarity = cosine_similarity(tokens)[0]
    np.testing.assert_allclose(similarity.numpy(), (x @ x.T) / np.outer(np.linalg.norm(x, axis=1), np.linalg.norm(x, axis=1)), atol=1e-6)
    # every diagonal entry is 1 up to rounding, so the first pick is a tie broken by rounding: the reference gets the
    # same matrix to see the same tie
    assert CDPruner(10).select(tokens)[0].tolist() == sorted(_greedy_determinants(similarity.double().numpy(), 10))


def test_an_image_does_not_depend_on_its_batch():
    # the release scales relevance over the whole batch; here per image
    g = torch.Generator().manual_seed(3)
    tokens, image, texts = torch.randn(3, 36, 32, generator=g), 5 * torch.randn(3, 36, 8, generator=g), torch.randn(3, 1, 8, generator=g)
    together = CDPruner(9).select(tokens, image, texts)
    for b in range(3):
        assert torch.equal(together[b : b + 1], CDPruner(9).select(tokens[b : b + 1], image[b : b + 1], texts[b : b + 1]))


def test_more_tokens_than_the_kernel_rank_stay_defined():
    tokens = torch.randn(1, 20, 3, generator=torch.Generator().manual_seed(4))  # rank ≤ 3, K = 8
    kept = CDPruner(8).select(tokens)[0].tolist()
    assert len(set(kept)) == 8 and kept == sorted(kept)


def test_one_sentence_errors():
    with pytest.raises(ValueError, match="cannot keep 10 of 9 tokens; the budget must be at most 9"):
        CDPruner(10).select(torch.randn(1, 9, 4))
    with pytest.raises(ValueError, match="needs the patches in the image-text space"):
        CDPruner(2).select(torch.randn(1, 9, 4), None, [torch.randn(1, 3)])
    with pytest.raises(ValueError, match="expected one instruction per image, got 1 for 2 images"):
        CDPruner(2).select(torch.randn(2, 9, 4), torch.randn(2, 9, 3), [torch.randn(1, 3)])


def test_flops_by_hand():
    parts = cdpruner_flops(576, 4096, 64, tower_dim=1024, joint_dim=768, segments=1)
    assert parts["similarity"] == 2 * 576 * 576 * 4096 and parts["image_projection"] == 2 * 576 * 1024 * 768
    assert parts["dpp"] == 576 * sum(2 * i for i in range(64)) and parts["relevance"] == 2 * 576 * 768
    text = clip_text_flops(1, hidden=768, intermediate=3072, layers=12, projection=768, context=77)
    # CLIP-L/14's text tower on one 77-token segment: 12 x (4 x 77 x 768² + 2 x 77 x 768 x 3072) MACs
    assert sum(text.values()) == 2 * (12 * (4 * 77 * 768**2 + 2 * 77 * 768 * 3072) + 768 * 768)
