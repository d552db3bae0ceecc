"""Shared rules: the (G/s)² budget rule, region layout, region attention and sin-cos positions."""

import math

import pytest
import torch

from braco_patch.baselines._common import CrossAttention, concat_levels, region_index, region_scale, region_tokens, sincos_2d


def test_region_scale_rule():
    assert [region_scale(k, 24, "X") for k in (4, 9, 16, 36, 144)] == [12, 8, 6, 4, 2]
    with pytest.raises(ValueError, match=r"X cannot give 25 tokens on a 24x24 grid.*accepted budgets: \[1, 4, 9, 16, 36, 64, 144, 576\]"):
        region_scale(25, 24, "X")
    with pytest.raises(ValueError, match="cannot give 8 tokens"):
        region_scale(8, 24, "X")  # not a square
    assert region_scale(25, 10, "X") == 2  # 25 works where 5 divides the side


def test_region_layout_matches_a_direct_loop():
    side, s = 6, 3
    idx = region_index(side, s)
    for r in range(4):
        i, j = divmod(r, 2)
        expected = sorted((i * s + a) * side + (j * s + b) for a in range(s) for b in range(s))
        assert sorted(idx[r].tolist()) == expected
    x = torch.randn(2, side * side, 5)
    assert torch.equal(region_tokens(x, side, s), x[:, idx])


def test_concat_levels_orders_layers():
    a, b = torch.zeros(1, 4, 2), torch.ones(1, 4, 3)
    assert torch.equal(concat_levels({16: b, 12: a}, 5), torch.cat([a, b], -1))
    with pytest.raises(ValueError, match="total width 6"):
        concat_levels([a, b], 6)


def test_cross_attention_equals_torch_multihead_attention():
    torch.manual_seed(0)
    ours = CrossAttention(8, 2)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    q, kv = torch.randn(3, 4, 8), torch.randn(3, 7, 8)
    torch.testing.assert_close(ours(q, kv, kv), ref(q, kv, kv, need_weights=False)[0], rtol=1e-5, atol=1e-6)


def test_sincos_positions_by_formula():
    dim, rows, cols = 8, 3, 4
    pos = sincos_2d(dim, rows, cols)
    for r in range(rows):
        for c in range(cols):
            row = []
            for p in (c, r):  # columns first, then rows
                omegas = [1.0 / 10000 ** (i / (dim / 4)) for i in range(dim // 4)]
                row += [math.sin(p * w) for w in omegas] + [math.cos(p * w) for w in omegas]
            torch.testing.assert_close(pos[r * cols + c], torch.tensor(row, dtype=torch.float64))


def test_multi_level_layers():
    from braco_patch.baselines._common import multi_level_layers

    assert multi_level_layers(24) == (12, 16, 22, 23)
    assert multi_level_layers(27) == (14, 18, 25, 26)  # 13.5, 18, 24.75, 25.875 rounded half up
    assert multi_level_layers(2) == (1, 1, 2, 2)
