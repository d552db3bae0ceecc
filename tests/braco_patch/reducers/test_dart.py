"""DART's pivots and greedy least-similar claims: hand-made cases, a numpy float64 re-implementation, bounds."""

import numpy as np
import pytest
import torch

from braco_patch.reducers.dart import DART_BUDGETS, DartConfig, dart_keep, visual_tokens_per_layer
from llava.model.reducers import resolve_reducer
from llava.plugin_api import LMDims

from .layout import prompt_masks


def _numpy_dart(keys: np.ndarray, states: np.ndarray, visual: np.ndarray, text: np.ndarray, cfg: DartConfig):
    """One row in float64: the pivots by sorted L1 norm, then each pivot (in the order of a Python set of the
    positions, as the repository iterates them) claims its least cosine-similar remaining image tokens."""
    norms = np.abs(keys).sum(axis=1)
    vis, txt = np.flatnonzero(visual), np.flatnonzero(text)
    image_pivots = [int(p) for p in vis[np.argsort(-norms[vis], kind="stable")[: cfg.pivot_image]]]
    text_pivots = [int(p) for p in txt[np.argsort(-norms[txt], kind="stable")[: cfg.pivot_text]]]
    unit = states / np.linalg.norm(states, axis=1, keepdims=True)
    pool = [int(p) for p in vis if p not in image_pivots]
    kept = set(image_pivots)
    for pivot in set(image_pivots + text_pivots):
        cos = np.array([unit[pivot] @ unit[c] for c in pool])
        claimed = [pool[i] for i in np.argsort(cos, kind="stable")[: cfg.per_pivot]]
        kept.update(claimed)
        pool = [c for c in pool if c not in claimed]
    return sorted(kept)


@pytest.mark.parametrize("budget, kept", [(192, 196), (128, 132), (64, 68)])
def test_paper_budgets_keep_the_image_pivots_on_top_of_the_claims(budget, kept):
    # The official code keeps pivot_image + 8 * (budget // 8) image tokens (checked side by side, BASELINES.md).
    assert budget in DART_BUDGETS
    assert DartConfig(budget=budget).kept == kept


def test_hand_made_case_claims_the_anti_aligned_tokens():
    visual, text = prompt_masks(1, prefix=2, n_visual=12, n_text=3)
    t, d = visual.shape[1], 4
    keys = torch.ones(1, t, 2)
    keys[0, 5, :] = 10.0  # the image pivot
    keys[0, 15, :] = 10.0  # the text pivot
    states = torch.zeros(1, t, d)
    states[0, :, 2] = 1.0  # everything else is orthogonal to both pivots
    states[0, 5] = torch.tensor([1.0, 0, 0, 0])
    states[0, 15] = torch.tensor([0, 1.0, 0, 0])
    anti_image, anti_text = [3, 8, 11], [4, 9, 13]
    states[0, anti_image] = torch.tensor([-1.0, 0, 0.1, 0])
    states[0, anti_text] = torch.tensor([0, -1.0, 0.1, 0])
    cfg = DartConfig(budget=6, pivot_image=1, pivot_text=1)
    keep = dart_keep(keys, states, visual, text, cfg)[0].tolist()
    expected_visual = sorted([5, *anti_image, *anti_text])
    assert [p for p in keep if visual[0, p]] == expected_visual
    assert [p for p in keep if not visual[0, p]] == [0, 1, 14, 15, 16]


@pytest.mark.parametrize("seed", range(5))
def test_matches_a_float64_reimplementation(seed):
    g = torch.Generator().manual_seed(seed)
    visual, text = prompt_masks(1, prefix=5, n_visual=64, n_text=9)
    keys = torch.randn(1, visual.shape[1], 12, generator=g, dtype=torch.float64)
    states = torch.randn(1, visual.shape[1], 10, generator=g, dtype=torch.float64)
    cfg = DartConfig(budget=24, pivot_image=2, pivot_text=2)
    keep = dart_keep(keys, states, visual, text, cfg)[0].tolist()
    expected = _numpy_dart(keys[0].numpy(), states[0].numpy(), visual[0].numpy(), text[0].numpy(), cfg)
    assert [p for p in keep if visual[0, p]] == expected


def test_bounds_and_batch_rows_are_independent():
    g = torch.Generator().manual_seed(7)
    visual, text = prompt_masks(3, prefix=4, n_visual=96, n_text=7)
    keys = torch.randn(3, visual.shape[1], 16, generator=g)
    states = torch.randn(3, visual.shape[1], 8, generator=g)
    cfg = DartConfig(budget=32)
    keep = dart_keep(keys, states, visual, text, cfg)
    n_other = int((~visual[0]).sum())
    assert keep.shape == (3, n_other + cfg.kept)
    for b in range(3):
        row = keep[b]
        assert torch.equal(row, row.unique(sorted=True))
        assert bool(visual[b, row].sum() == cfg.kept)
        assert set((~visual[b]).nonzero().squeeze(-1).tolist()) <= set(row.tolist())
        alone = dart_keep(keys[b : b + 1], states[b : b + 1], visual[b : b + 1], text[b : b + 1], cfg)
        assert torch.equal(alone[0], row)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"budget": 7}, "no claim per pivot"), ({"budget": 0}, "positive integer"), ({"budget": 64, "layer": -1}, "layer")],
)
def test_bad_settings_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DartConfig(**kwargs)


def test_budget_larger_than_the_image_is_refused():
    visual, text = prompt_masks(1, prefix=1, n_visual=40, n_text=5)
    keys = torch.randn(1, visual.shape[1], 4)
    with pytest.raises(ValueError, match="keeps 68 image tokens but the image has 40"):
        dart_keep(keys, keys, visual, text, DartConfig(budget=64))


def test_rows_with_different_image_counts_are_refused():
    visual, text = prompt_masks(2, prefix=2, n_visual=30, n_text=4)
    visual[1, 2] = False
    keys = torch.randn(2, visual.shape[1], 4)
    with pytest.raises(ValueError, match="same image-token count"):
        dart_keep(keys, keys, visual, text, DartConfig(budget=8))


def test_tokens_per_layer_switch_at_layer_k():
    counts = visual_tokens_per_layer(DartConfig(budget=128), n_layers=32)
    assert counts[:2] == (576, 576) and set(counts[2:]) == {132} and len(counts) == 32
    with pytest.raises(ValueError, match="layer 2 is not inside a 2-layer LLM"):
        visual_tokens_per_layer(DartConfig(budget=128), n_layers=2)


def test_too_short_an_instruction_is_refused():
    visual, text = prompt_masks(1, prefix=1, n_visual=40, n_text=2)
    keys = torch.randn(1, visual.shape[1], 4)
    with pytest.raises(ValueError, match="4 pivots from the instruction after the image but it has 2 tokens"):
        dart_keep(keys, keys, visual, text, DartConfig(budget=16))


@pytest.mark.parametrize("name, kept", [("dart_k128", 132), ("dart_k64_l3", 68)])
def test_the_plugins_cost_counts_each_layer_at_its_own_count(name, kept):
    llama_7b = LMDims(hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32, head_dim=128, vocab=32000)
    choice = resolve_reducer(name)
    layer = 3 if name.endswith("_l3") else 2
    assert choice.plugin.cost.layer_tokens(choice.build(llama_7b), 576) == [576] * layer + [kept] * (32 - layer)
