"""SparseVLM's raters, relevance, keep schedule and DPC-kNN recycling: float64 re-derivations, hand-made cases
with a known outcome, bounds."""

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from braco_patch.reducers.sparsevlm import (
    SCHEDULES,
    density_peak_centers,
    keep_top_visual,
    kept_per_stage,
    merge_clusters,
    recycle,
    select_raters,
    sparsevlm_stage,
    sparsify,
    stage_keep_count,
    text_queries,
    visual_relevance,
    visual_tokens_per_layer,
)

from .layout import prompt_masks


def test_raters_match_the_formula_in_float64():
    g = torch.Generator().manual_seed(0)
    visual, text = prompt_masks(2, prefix=3, n_visual=10, n_text=6)
    embeds = torch.randn(2, visual.shape[1], 5, generator=g, dtype=torch.float64)
    raters = select_raters(embeds, visual, text)
    for b in range(2):
        v, t = embeds[b, 3:13].numpy(), embeds[b, 13:].numpy()
        scores = np.zeros(6)
        for i in range(10):
            logits = np.array([v[i] @ t[j] for j in range(6)])
            scores += np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum() / 10
        expected = np.zeros(visual.shape[1], dtype=bool)
        expected[13:] = scores > scores.mean()
        assert raters[b].tolist() == expected.tolist()


def test_relevance_averages_heads_then_raters():
    g = torch.Generator().manual_seed(1)
    rows = torch.rand(2, 3, 4, 9, generator=g, dtype=torch.float64)
    raters = torch.tensor([[True, False, True, False], [False, False, False, True]])
    relevance = visual_relevance(rows, raters)
    for b in range(2):
        picked = [q for q in range(4) if raters[b, q]]
        expected = [sum(rows[b, h, q, k].item() for h in range(3) for q in picked) / (3 * len(picked)) for k in range(9)]
        assert relevance[b].tolist() == pytest.approx(expected, abs=1e-12)


def test_keep_top_visual_ignores_text_and_keeps_the_highest():
    visual, _ = prompt_masks(1, prefix=2, n_visual=5, n_text=2)
    relevance = torch.tensor([[9.0, 9.0, 0.1, 0.5, 0.3, 0.9, 0.2, 9.0, 9.0]])
    kept = keep_top_visual(relevance, visual, 2)
    assert kept[0].nonzero().squeeze(-1).tolist() == [3, 5]


@pytest.mark.parametrize("budget, per_layer", [(192, (309, 204, 113)), (128, (312, 117, 39)), (64, (82, 32, 18))])
def test_per_layer_counts_with_recycling(budget, per_layer):
    # Kept + recycled image tokens after layers 2, 6, 15, as the official code produced them side by side.
    assert kept_per_stage(budget) == per_layer


def test_schedule_is_the_budget_under_the_codes_layer_weights():
    # The official comment weighs 2 layers at 576, then 4, 10 and 16 layers at the three stages; the layers
    # really run 3 / 4 / 9 / 16 (a stage prunes its layer's output), so the true average is higher.
    for budget, (a, b, c) in SCHEDULES.items():
        assert abs((2 * 576 + 4 * a + 10 * b + 16 * c) / 32 - budget) / budget < 0.035, budget
    assert (3 * 576 + 4 * 66 + 9 * 30 + 16 * 17) / 32 == pytest.approx(79.1875)
    assert stage_keep_count(192, 0, 100) == 99
    with pytest.raises(ValueError, match="budget 100 is not one of"):
        stage_keep_count(100, 0, 576)


def test_density_peaks_split_two_blobs_and_merge_to_their_means():
    g = torch.Generator().manual_seed(2)
    blob_a = torch.randn(7, 6, generator=g, dtype=torch.float64) * 0.01 + 5.0
    blob_b = torch.randn(4, 6, generator=g, dtype=torch.float64) * 0.01 - 5.0
    x = torch.cat([blob_a, blob_b])
    centers, assignment = density_peak_centers(x, 2)
    clusters = [set((assignment == c).nonzero().squeeze(-1).tolist()) for c in range(2)]
    assert sorted(clusters, key=len) == [set(range(7, 11)), set(range(7))]
    merged = merge_clusters(x, assignment, 2)
    for c in range(2):
        members = sorted(clusters[c])
        expected = x[members].sum(0) / (len(members) + 1e-6)
        assert torch.allclose(merged[c], expected, atol=1e-12)


def _numpy_dpc(x: np.ndarray, k: int) -> tuple[list[int], list[int]]:
    """DPC-kNN written out with loops in float64 (ties do not occur on random data)."""
    m = x.shape[0]
    dist = np.array([[np.linalg.norm(x[i] - x[j]) / math.sqrt(x.shape[1]) for j in range(m)] for i in range(m)])
    density = np.array([math.exp(-np.mean(np.sort(dist[i])[:k] ** 2)) for i in range(m)])
    sep = [min([dist[i, j] for j in range(m) if density[j] > density[i]], default=dist.max()) for i in range(m)]
    centers = [int(i) for i in np.argsort(-(np.array(sep) * density), kind="stable")[:k]]
    assignment = [int(np.argmin([dist[c, i] for c in centers])) for i in range(m)]
    for n, c in enumerate(centers):
        assignment[c] = n
    return centers, assignment


@pytest.mark.parametrize("seed", range(4))
def test_density_peaks_match_a_loop_reimplementation(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(23, 5, generator=g, dtype=torch.float64)
    centers, assignment = density_peak_centers(x, 3)
    expected_centers, expected_assignment = _numpy_dpc(x.numpy(), 3)
    assert centers.tolist() == expected_centers
    assert assignment.tolist() == expected_assignment


def test_equal_densities_go_to_the_lower_index_without_noise():
    # Two mutual-nearest pairs tie in density with two neighbours; the lower index of each is the denser.
    x = torch.tensor([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]], dtype=torch.float64)
    centers, assignment = density_peak_centers(x, 2)
    assert sorted(centers.tolist()) == [0, 2]
    assert assignment.tolist() == [assignment[0].item()] * 2 + [assignment[2].item()] * 2


def test_recycle_clusters_the_most_relevant_dropped_tokens():
    dropped = torch.zeros(40, dtype=torch.bool)
    dropped[5:35] = True  # 30 dropped: int(0.3 * 30) + 1 = 10 candidates, 10 // 10 + 1 = 2 clusters
    relevance = torch.zeros(40, dtype=torch.float64)
    relevance[torch.arange(5, 35)] = torch.linspace(0.0, 1.0, 30, dtype=torch.float64)
    states = torch.zeros(40, 3, dtype=torch.float64)
    states[25:30] = torch.tensor([1.0, 0.0, 0.0])
    states[30:35] = torch.tensor([0.0, 0.0, 7.0])
    positions, merged = recycle(states, relevance, dropped)
    assert merged.shape == (2, 3)
    assert all(25 <= p < 35 for p in positions.tolist())
    assert sorted(merged[:, 0].tolist() + merged[:, 2].tolist()) == pytest.approx([0.0, 0.0, 5 / (5 + 1e-6), 35 / (5 + 1e-6)])


def test_stage_bounds_batch_and_merged_rows():
    g = torch.Generator().manual_seed(3)
    visual, text = prompt_masks(3, prefix=4, n_visual=60, n_text=5)
    states = torch.randn(3, visual.shape[1], 8, generator=g)
    relevance = torch.rand(3, visual.shape[1], generator=g)
    keep, rows = sparsevlm_stage(states, relevance, visual, 20)
    clusters = (int(40 * 0.3) + 1) // 10 + 1
    assert keep.shape == (3, 9 + 20 + clusters)
    assert rows.shape == (3, keep.shape[1], 8)
    for b in range(3):
        row = keep[b]
        assert torch.equal(row, row.unique(sorted=True))
        assert set(text[b].nonzero().squeeze(-1).tolist()) <= set(row.tolist())
        top = keep_top_visual(relevance, visual, 20)[b]
        unchanged = [i for i, p in enumerate(row.tolist()) if not visual[b, p] or top[p]]
        assert torch.equal(rows[b, unchanged], states[b, row[unchanged]])
        alone_keep, alone_rows = sparsevlm_stage(states[b : b + 1], relevance[b : b + 1], visual[b : b + 1], 20)
        assert torch.equal(alone_keep[0], row) and torch.equal(alone_rows[0], rows[b])


def test_tokens_per_layer_by_hand_for_192():
    # 576 on layers 0-2; 300 kept + 9 recycled on 3-6; 200 + 4 on 7-15; 110 + 3 on 16-31.
    expected = (576,) * 3 + (309,) * 4 + (204,) * 9 + (113,) * 16
    assert visual_tokens_per_layer(192, n_layers=32) == expected
    with pytest.raises(ValueError, match="too shallow"):
        visual_tokens_per_layer(192, n_layers=12)


def test_a_row_without_raters_is_rated_by_all_its_queries():
    rows = torch.rand(2, 2, 3, 6, dtype=torch.float64)
    raters = torch.tensor([[False, False, False], [True, False, False]])
    relevance = visual_relevance(rows, raters)
    assert torch.allclose(relevance[0], rows[0].mean(dim=(0, 1)))
    assert torch.allclose(relevance[1], rows[1, :, 0].mean(dim=0))
    one_token = select_raters(torch.randn(1, 5, 3), *prompt_masks(1, prefix=1, n_visual=3, n_text=1))
    assert not bool(one_token.any())  # a single instruction token scores exactly its mean
    with pytest.raises(ValueError, match="needs instruction tokens after the image"):
        visual_relevance(torch.rand(1, 2, 0, 6), torch.zeros(1, 0, dtype=torch.bool))


def test_text_queries_top_up_short_rows_with_image_tokens():
    visual = torch.zeros(2, 9, dtype=torch.bool)
    visual[:, 1:5] = True
    text = torch.zeros(2, 9, dtype=torch.bool)
    text[0, 5:8] = True
    text[1, 6:8] = True
    queries, real = text_queries(text, visual)
    assert [row.nonzero().squeeze(-1).tolist() for row in queries] == [[5, 6, 7], [1, 6, 7]]
    assert real.tolist() == [[True, True, True], [False, True, True]]


@dataclass(frozen=True)
class _Context:
    """The reducer context's fields a stage reads; attention rows come from a full attention matrix of the layer
    before this one (the only one it may ask for)."""

    layer: int
    hidden_states: torch.Tensor
    visual: torch.Tensor
    text: torch.Tensor
    full_attention: torch.Tensor

    def attention(self, queries: torch.Tensor, layer: int) -> torch.Tensor:
        assert layer == self.layer - 1
        return torch.stack([self.full_attention[b][:, row] for b, row in enumerate(queries)])


def test_sparsify_rates_with_the_raters_rows_of_each_row():
    # Row 0: 2 prefix tokens, 30 image, 4 instruction; row 1: 3 prefix, 30 image, 3 instruction (same length).
    g = torch.Generator().manual_seed(4)
    visual = torch.zeros(2, 36, dtype=torch.bool)
    visual[0, 2:32] = True
    visual[1, 3:33] = True
    text = torch.zeros(2, 36, dtype=torch.bool)
    text[0, 32:] = True
    text[1, 33:] = True
    attention = torch.rand(2, 3, 36, 36, generator=g, dtype=torch.float64).softmax(-1)
    states = torch.randn(2, 36, 8, generator=g, dtype=torch.float64)
    raters = torch.zeros_like(text)
    raters[0, [32, 34]] = True
    raters[1, [35]] = True
    keep, rows = sparsify(_Context(16, states, visual, text, attention), 64, raters, stage=2)
    k = 17  # the third stage of budget 64
    assert keep.shape == (2, 6 + k + 1)  # 13 dropped: 4 recycled into 1 cluster
    for b, positions in enumerate(([32, 34], [35])):
        relevance = attention[b][:, positions].mean(dim=(0, 1))
        alone_keep, alone_rows = sparsevlm_stage(states[b : b + 1], relevance[None], visual[b : b + 1], k)
        assert torch.equal(keep[b], alone_keep[0]) and torch.equal(rows[b], alone_rows[0])
