"""The analytic FLOPs of each baseline against torch's FlopCounterMode on the module, and against the paper."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from braco_patch.baselines import DivPrune, FourierVLM, MQTAbstractor, PruMerge, QueCC, TokenPacker
from braco_patch.baselines.divprune import divprune_flops
from braco_patch.baselines.fouriervlm import fouriervlm_flops
from braco_patch.baselines.mqt import mqt_flops
from braco_patch.baselines.prumerge import prumerge_flops, single_head_cls_attention
from braco_patch.baselines.quecc import quecc_flops
from braco_patch.baselines.tokenpacker import tokenpacker_flops
from braco_patch.cost.by_type import paper_setting_flops
from llava.cost.flops import elementwise, total

D, LLM, TEXT, SIDE, B = 16, 24, 20, 12, 3
N = SIDE * SIDE


def _counted(module, *args, **kwargs) -> int:
    """Matrix-product FLOPs (mm/bmm/addmm/conv, 2 per multiply-add) that FlopCounterMode sees in one call
    (after a first call, which builds cached constants such as Fourier-VLM's operator)."""
    with torch.no_grad():
        module(*args, **kwargs)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(*args, **kwargs)
    return counter.get_total_flops()


def _matmul(parts) -> int:
    return total(parts) - elementwise(parts)


@pytest.mark.parametrize("budget", [4, 9, 16])
def test_regional_and_query_modules(budget):
    torch.manual_seed(0)
    x, levels = torch.randn(B, N, D), torch.randn(B, N, 4 * D)
    quecc = QueCC(D, budget, SIDE, TEXT, heads=2).eval()
    assert _counted(quecc, x, levels, torch.randn(B, 3, TEXT)) == _matmul(quecc_flops(D, SIDE, budget, TEXT, count_attention=True, batch=B))
    packer = TokenPacker(D, LLM, budget, SIDE, heads=2).eval()
    assert _counted(packer, x, levels) == _matmul(tokenpacker_flops(D, LLM, SIDE, budget, count_attention=True, batch=B))
    for keys in ("position", "features"):
        mqt = MQTAbstractor(D, LLM, 36, heads=2, keys=keys).eval()
        counted = _counted(mqt, x, num_tokens=budget)
        assert counted == _matmul(mqt_flops(D, LLM, N, budget, keys=keys, count_attention=True, batch=B))


@pytest.mark.parametrize("budget", [4, 9, 16, 25])
def test_training_free_modules(budget):
    x = torch.randn(B, N, D)
    assert _counted(FourierVLM(D, budget), x) == _matmul(fouriervlm_flops(D, (SIDE, SIDE), budget, batch=B))
    assert _counted(DivPrune(budget), torch.randn(B, N, LLM)) == _matmul(divprune_flops(N, LLM, budget, batch=B))
    attention, keys = torch.rand(B, 2, N + 1, N + 1).softmax(-1), torch.randn(B, N + 1, 8)
    for extra in (True, False):
        counted = _counted(PruMerge(D, budget, extra_token=extra), x, attention, keys)
        assert counted == _matmul(prumerge_flops(D, N, budget - int(extra), key_dim=8, extra_token=extra, batch=B))


def test_prumerge_score_sources():
    q, k = torch.randn(B, N + 1, 8), torch.randn(B, N + 1, 8)
    with FlopCounterMode(display=False) as counter:
        single_head_cls_attention(q, k)
    assert counter.get_total_flops() == prumerge_flops(D, N, 3, key_dim=8, score_source="cls_row", batch=B)["scores"]
    assert prumerge_flops(D, N, 3, key_dim=8, score_source="full_matrix")["scores"] == 2 * (N + 1) ** 2 * 8
    with pytest.raises(ValueError, match="unknown PruMerge score source"):
        prumerge_flops(D, N, 3, score_source="guess")


def test_paper_module_cost_table():
    """tab:main_compressor_cost at K = 16 (GFLOP), where our accounting can be stated (see cost.py)."""
    ours = {k: v / 1e9 for k, v in paper_setting_flops().items()}
    assert ours["tokenpacker"] == pytest.approx(15.271, rel=1e-3)
    assert ours["quecc"] == pytest.approx(109.504, rel=1e-3)  # module + a 7-token prompt pass
    assert paper_setting_flops(count_attention=True)["mqt"] / 1e9 == pytest.approx(2.674, rel=1e-2)
    assert ours["prumerge"] == pytest.approx(0.724, rel=1e-2)
    second_similarity = 2 * 576 * 576 * 4096 / 1e9
    assert ours["divprune"] + second_similarity == pytest.approx(29.603, rel=1e-3)


def test_cost_functions_share_the_budget_rule():
    with pytest.raises(ValueError, match="QueCC cannot give 25 tokens on a 24x24 grid"):
        quecc_flops(1024, 24, 25, 4096)
    with pytest.raises(ValueError, match="TokenPacker cannot give 25 tokens on a 24x24 grid"):
        tokenpacker_flops(1024, 4096, 24, 25)


def test_elementwise_parts_by_hand():
    # MQT adds the query positions once per call, content keys x + p once per image.
    assert mqt_flops(8, 4, 36, 5, batch=3)["add"] == 5 * 8
    assert mqt_flops(8, 4, 36, 5, keys="features", batch=3)["add"] == 5 * 8 + 3 * 36 * 8
    # PruMerge: centre + merged (M·D) and the pruned-token mask on the scores (N), per image.
    parts = prumerge_flops(8, 36, 3, batch=2)
    assert (parts["add"], parts["scale"]) == (2 * 3 * 8, 2 * 36)
    assert elementwise(quecc_flops(8, 12, 9, 5, batch=2)) == 2 * 144 * 8  # text added to every feature
