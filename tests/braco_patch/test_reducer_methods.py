"""FastV's and PyramidDrop's selection rules on hand-made attention, where the kept set is known, and their budgets
against the releases' formulas (FastV: ``round(N * (1 - R))``; PyramidDrop: ``int(N * ratio_j)`` with the ratio list
``[0.5, 0.25, 0.125]`` at layers ``[8, 16, 24]``), written here as the releases write them."""

from __future__ import annotations

import pytest
import torch

from braco_patch.reducers.fastv import PLUGIN as FASTV
from braco_patch.reducers.fastv import fastv_keep
from braco_patch.reducers.pyramiddrop import PLUGIN as PDROP
from llava.model.reduction import check_reduction
from llava.plugin_api import LMDims, ReducerBuild, ReducerContext, Reduction

LLAMA_7B = LMDims(hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32, head_dim=128, vocab=32000)


def _steps(plugin, name, lm=LLAMA_7B):
    entry, values = plugin.match(name)
    build = ReducerBuild(name, values, lm)
    return entry.factory(build), build


def _context(layer, attention, visual, asked):
    batch, length = visual.shape

    def attend(queries, at):
        asked.append((queries, at))
        return attention

    text = torch.zeros_like(visual)
    text[:, -2:] = True
    return ReducerContext(layer=layer, hidden_states=torch.zeros(batch, length, 4), visual=visual, text=text,
                          attention_mask=None, position_ids=torch.arange(length).expand(batch, -1), attend=attend,
                          prompt_visual=visual.sum(1))


def test_fastv_keeps_the_image_tokens_the_last_token_attends_most_averaged_over_heads() -> None:
    visual = torch.zeros(2, 10, dtype=torch.bool)
    visual[:, 2:8] = True  # six image tokens at rows 2..7
    attention = torch.zeros(2, 2, 1, 10)
    # head 0 favours rows 2, 3, 4; head 1 strongly favours rows 6, 7: the head average ranks 6, 7, 2 first in row 0
    attention[0, 0, 0, 2:8] = torch.tensor([0.30, 0.25, 0.20, 0.0, 0.0, 0.0])
    attention[0, 1, 0, 2:8] = torch.tensor([0.00, 0.00, 0.00, 0.0, 0.40, 0.45])
    attention[1, :, 0, 2:8] = torch.tensor([0.1, 0.6, 0.05, 0.3, 0.2, 0.0])  # row 1: 3, 5, 6
    (step,), _ = _steps(FASTV, "fastv_k2_r50")
    asked = []
    reduction = step(_context(2, attention, visual, asked))
    assert asked == [("last", 1)]  # the last token's attention in layer K-1
    assert reduction.keep.tolist() == [[0, 1, 2, 6, 7, 8, 9], [0, 1, 3, 5, 6, 8, 9]]
    check_reduction(reduction, visual, torch.zeros(2, 10, 4), 2)


def test_fastv_budget_is_the_release_rounding() -> None:
    release = {(576, 50): round(576 * (1 - 0.5)), (576, 75): round(576 * (1 - 0.75)), (5, 50): round(5 * (1 - 0.5)),
               (7, 50): round(7 * (1 - 0.5)), (36, 75): round(36 * (1 - 0.75))}
    assert {key: fastv_keep(*key) for key in release} == release == {(576, 50): 288, (576, 75): 144, (5, 50): 2, (7, 50): 4, (36, 75): 9}
    (step,), build = _steps(FASTV, "fastv_k2_r50")
    assert FASTV.cost.layer_tokens(build, 576) == [576, 576] + [288] * 30


def test_pyramiddrop_stages_and_counts_are_the_release_setting() -> None:
    steps, build = _steps(PDROP, "pyramiddrop_s8_r50")
    assert [step.layer for step in steps] == [8, 16, 24]
    ratios = [1.0, 0.5, 0.25, 0.125]  # the release's --image_token_ratio_list with its leading 1.0
    expected = [int(576 * ratios[layer // 8]) for layer in range(32)]
    assert PDROP.cost.layer_tokens(build, 576) == expected
    for n in (576, 577, 2880, 37):
        assert PDROP.cost.layer_tokens(build, n)[-1] == int(n * 0.125)


def test_pyramiddrop_ranks_by_this_layers_attention_and_keeps_the_stage_count() -> None:
    visual = torch.zeros(1, 12, dtype=torch.bool)
    visual[:, 1:9] = True  # eight image tokens; stage 2 of r50 keeps int(8 * 0.25) = 2
    attention = torch.zeros(1, 1, 1, 12)
    attention[0, 0, 0, 1:9] = torch.tensor([0.1, 0.5, 0.0, 0.2, 0.9, 0.3, 0.0, 0.05])
    steps, _ = _steps(PDROP, "pyramiddrop_s8_r50")
    asked = []
    reduction = steps[1](_context(16, attention, visual, asked))
    assert asked == [("last", 16)]
    assert reduction.keep.tolist() == [[0, 2, 5, 9, 10, 11]]


def test_a_reduction_that_drops_text_is_refused() -> None:
    visual = torch.tensor([[False, True, True, False]])
    with pytest.raises(ValueError, match="image tokens only"):
        check_reduction(Reduction(keep=torch.tensor([[1, 2, 3]])), visual, torch.zeros(1, 4, 2), 3)
    with pytest.raises(ValueError, match="sorted, distinct"):
        check_reduction(Reduction(keep=torch.tensor([[0, 2, 1, 3]])), visual, torch.zeros(1, 4, 2), 3)


@pytest.mark.parametrize("name, why", [("pyramiddrop_s0_r50", "S must be from 1 to 31"), ("pyramiddrop_s8_r0", "R is a percentage"),
                                       ("fastv_k0_r50", "K is at least 1")])
def test_bad_values_are_one_sentence(name, why) -> None:
    plugin = FASTV if name.startswith("fastv") else PDROP
    with pytest.raises(ValueError, match=why):
        _steps(plugin, name)
