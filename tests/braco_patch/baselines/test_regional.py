"""QueCC and TokenPacker: queries only see their own region; QueCC also follows the prompt."""

import pytest
import torch

from braco_patch.baselines import QueCC, TokenPacker
from braco_patch.baselines.quecc import last_token_state

D, SIDE = 16, 12


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, SIDE * SIDE, D, generator=g), torch.randn(2, SIDE * SIDE, 4 * D, generator=g)


def _run(module, x, levels, text):
    return module(x, levels) if isinstance(module, TokenPacker) else module(x, levels, text)


@pytest.mark.parametrize("cls", [QueCC, TokenPacker])
@pytest.mark.parametrize("budget", [4, 9, 16])
def test_a_query_sees_only_its_own_region(cls, budget):
    torch.manual_seed(0)
    module = cls(D, budget, SIDE, 20, heads=2) if cls is QueCC else cls(D, 24, budget, SIDE, heads=2)
    module.eval()
    x, levels = _inputs()
    text = torch.randn(2, 20)
    base = _run(module, x, levels, text)
    regions = module.regions()  # what a demo view would draw: verified below as what each query sees
    r = budget - 1  # the last region
    outside = torch.ones(SIDE * SIDE, dtype=torch.bool)
    outside[regions[r]] = False
    x2, levels2 = x.clone(), levels.clone()
    x2[:, outside] += 3 * torch.randn_like(x2[:, outside])
    levels2[:, outside] += 3 * torch.randn_like(levels2[:, outside])
    moved = _run(module, x2, levels2, text)
    torch.testing.assert_close(moved[:, r], base[:, r], rtol=0, atol=1e-5)
    assert (moved[:, :r] - base[:, :r]).abs().amax() > 1e-2  # the other regions did see the change
    x3, levels3 = x.clone(), levels.clone()
    x3[:, regions[r]] += 3.0  # inside, through the query ...
    assert (_run(module, x3, levels, text)[:, r] - base[:, r]).abs().amax() > 1e-3
    levels3[:, regions[r][0]] += 3.0  # ... and through one key/value token
    assert (_run(module, x, levels3, text)[:, r] - base[:, r]).abs().amax() > 1e-3


def test_quecc_follows_the_prompt_only_through_its_text_states():
    torch.manual_seed(0)
    module = QueCC(D, 9, SIDE, 20, heads=2).eval()
    x, levels = _inputs()
    states, mask = torch.randn(2, 5, 20), torch.ones(2, 5)
    base = module(x, levels, states, mask)
    other = states.clone()
    other[:, -1] += 1.0  # a different question (its last token's state)
    assert (module(x, levels, other, mask) - base).abs().amax() > 1e-3
    other = states.clone()
    other[:, 0] += 1.0  # earlier positions matter only through the LLM, which already produced the states
    torch.testing.assert_close(module(x, levels, other, mask), base)


def test_last_token_state_with_either_padding_side():
    states = torch.arange(2 * 4 * 1, dtype=torch.float32).reshape(2, 4, 1)
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    assert last_token_state(states, right)[:, 0].tolist() == [1.0, 7.0]
    assert last_token_state(states, left)[:, 0].tolist() == [3.0, 7.0]
    assert last_token_state(states)[:, 0].tolist() == [3.0, 7.0]


@pytest.mark.parametrize("build", [lambda k: QueCC(1024, k, 24, 4096), lambda k: TokenPacker(1024, 4096, k, 24)])
def test_25_tokens_on_24x24_is_refused_with_the_reason(build):
    with pytest.raises(ValueError, match=r"cannot give 25 tokens on a 24x24 grid: .*s dividing 24; accepted budgets: \[1, 4, 9, 16, 36"):
        build(25)


def test_grid_and_width_errors():
    module = TokenPacker(D, 24, 4, SIDE, heads=2)
    with pytest.raises(ValueError, match="built for a 12x12 grid \\(144 tokens\\), got 36"):
        module(torch.randn(1, 36, D), torch.randn(1, 36, 4 * D))
    with pytest.raises(ValueError, match="total width 64"):
        module(torch.randn(1, 144, D), torch.randn(1, 144, 3 * D))
