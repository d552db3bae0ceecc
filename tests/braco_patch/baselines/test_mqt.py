"""MQT-LLaVA: the Matryoshka (nested) property, random prefix lengths in training, and the query-count limit."""

import math

import pytest
import torch
import torch.nn.functional as F

from braco_patch.baselines import MQTAbstractor
from braco_patch.baselines.mqt import nested_lengths


@pytest.mark.parametrize("keys", ["position", "features"])
def test_first_m_outputs_equal_the_m_token_output(keys):
    torch.manual_seed(0)
    module = MQTAbstractor(16, 24, 36, heads=2, keys=keys).eval()
    x = torch.randn(2, 64, 16)
    full = module(x, num_tokens=36)
    for m in (1, 4, 9, 16, 25):
        torch.testing.assert_close(full[:, :m], module(x, num_tokens=m), rtol=1e-5, atol=1e-6)


def test_eval_uses_the_configured_budget_and_training_samples_even_prefixes():
    module = MQTAbstractor(8, 8, 16, heads=2, num_tokens=9)
    x = torch.randn(1, 16, 8)
    assert module.eval()(x).shape == (1, 9, 8)
    module.train()
    torch.manual_seed(0)
    lengths = {module(x).shape[1] for _ in range(40)}
    assert lengths <= set(range(2, 17, 2)) and len(lengths) > 3
    assert nested_lengths(256) == list(range(2, 257, 2))


def test_against_a_direct_computation():
    # The release's forward written out with torch's own MultiheadAttention: LN_q(q + p), LN_k(pos), LN_v(x).
    torch.manual_seed(1)
    module = MQTAbstractor(8, 12, 16, heads=2).eval()
    x = torch.randn(2, 36, 8)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    a = module.attn
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
        mha.in_proj_bias.copy_(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]))
        mha.out_proj.load_state_dict(a.out_proj.state_dict())
        pos_q = module.query_pos
        pos_k = F.interpolate(pos_q.reshape(1, 4, 4, 8).permute(0, 3, 1, 2), size=(6, 6), mode="bicubic", align_corners=False)
        pos_k = pos_k.permute(0, 2, 3, 1).reshape(36, 8)
        q = module.ln_q(module.query[:5] + pos_q[:5]).expand(2, -1, -1)
        k = module.ln_k(pos_k).expand(2, -1, -1)
        expected = mha(q, k, module.ln_v(x), need_weights=False)[0] @ module.proj
    torch.testing.assert_close(module(x, num_tokens=5), expected, rtol=1e-5, atol=1e-6)
    # query (0, 1): column 1 in the first channel, stored as the release stores its table (float16)
    assert float(pos_q[1, 0]) == float(torch.tensor(math.sin(1.0), dtype=torch.float16))
    assert float(pos_q[1, 0]) != pytest.approx(math.sin(1.0), rel=1e-6)


def test_budget_errors():
    with pytest.raises(ValueError, match="1 to 16 tokens \\(its query count\\), got 25"):
        MQTAbstractor(8, 8, 16, heads=2, num_tokens=25)
    with pytest.raises(ValueError, match="perfect square"):
        MQTAbstractor(8, 8, 20, heads=2)
    with pytest.raises(ValueError, match="1 to 16 tokens"):
        MQTAbstractor(8, 8, 16, heads=2)(torch.randn(1, 16, 8), num_tokens=0)
