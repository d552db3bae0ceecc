"""DivPrune's greedy max–min selection: a numpy re-implementation step by step, and brute force on small N."""

import itertools

import numpy as np
import pytest
import torch

from braco_patch.baselines import DivPrune
from braco_patch.baselines.divprune import divprune_select


def _numpy_divprune(x: np.ndarray, k: int) -> list[int]:
    """The repository's formulation: distance 1 − cos; first pick by the second-smallest entry per column
    (the smallest is the token itself), then argmax of the column-wise min over the chosen rows."""
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    dist = 1.0 - unit @ unit.T
    np.fill_diagonal(dist, 0.0)
    chosen = []
    for i in range(k):
        scores = np.sort(dist, axis=0)[1] if i == 0 else dist[chosen].min(axis=0)
        if i:
            scores[chosen] = -np.inf
        chosen.append(int(np.argmax(scores)))
    return chosen


def _min_pairwise(x: np.ndarray, idx) -> float:
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    return min(1.0 - float(unit[a] @ unit[b]) for a, b in itertools.combinations(idx, 2))


def test_equals_numpy_step_by_step_per_sample():
    torch.manual_seed(0)
    x = torch.randn(3, 20, 6, dtype=torch.float64)
    picks = divprune_select(x, 7)
    for b in range(3):
        assert picks[b].tolist() == _numpy_divprune(x[b].numpy(), 7)
    out = DivPrune(7)(x)
    for b in range(3):  # kept in original order
        idx = sorted(_numpy_divprune(x[b].numpy(), 7))
        torch.testing.assert_close(out[b], x[b, idx])


@pytest.mark.parametrize("seed", range(5))
def test_greedy_is_within_the_max_min_guarantee_of_brute_force(seed):
    # √(2(1 − cos)) is a metric and a monotone function of 1 − cos, so farthest-point greedy keeps at least
    # half the optimal chordal min-distance: in 1 − cos units, at least a quarter of the brute-force optimum.
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 10, 4, generator=g, dtype=torch.float64)
    k = 4
    best = max(_min_pairwise(x[0].numpy(), c) for c in itertools.combinations(range(10), k))
    got = _min_pairwise(x[0].numpy(), divprune_select(x, k)[0].tolist())
    assert got >= best / 4 - 1e-12


def test_one_token_per_cluster_reaches_the_brute_force_optimum():
    # Four well-separated directions, three noisy copies each: the optimum takes one token per direction.
    g = torch.Generator().manual_seed(1)
    centres = torch.eye(4, dtype=torch.float64) * 5
    x = (centres.repeat_interleave(3, 0) + 0.05 * torch.randn(12, 4, generator=g, dtype=torch.float64)).unsqueeze(0)
    picks = divprune_select(x, 4)[0].tolist()
    assert sorted(p // 3 for p in picks) == [0, 1, 2, 3]
    best = max(_min_pairwise(x[0].numpy(), c) for c in itertools.combinations(range(12), 4))
    assert _min_pairwise(x[0].numpy(), picks) >= 0.97 * best


def test_budget_errors():
    with pytest.raises(ValueError, match="budget must be a positive integer, got 0"):
        DivPrune(0)
    with pytest.raises(ValueError, match="cannot keep 40 of 36 tokens"):
        DivPrune(40)(torch.randn(1, 36, 4))
