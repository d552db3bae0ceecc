"""Braco's compressor FLOPs per paper step against counts by hand and against torch.profiler on the coder and the
official computation."""

import pytest
import torch

from braco_patch import BracoCoder, BracoConfig
from braco_patch.cost.coder_flops import official_compressor_flops, ours_compressor_flops
from braco_patch.reference import official_forward
from llava.cost.flops import elementwise, total


def _profiled(fn):
    """{aten op: FLOPs} that torch.profiler reports for one call."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True) as prof:
        fn()
    return {e.key: int(e.flops) for e in prof.key_averages() if e.flops}


def test_official_compressor_by_hand():
    # d = 8 channels on a 4x4 grid, c2s3 with coefficients, polar PE with 8 bands (32 features).
    cfg = BracoConfig(cutoff=2, residual_tokens=3, coordinates="coef")
    d, n, s, length = 8, 4, 3, 16
    steps = official_compressor_flops(cfg, d, (n, n))
    assert steps["step1"] == {"dct_left": 2 * d * n**3, "dct_right": 2 * d * n**3}  # (D X) then (.) D^T: 1024 each
    assert steps["step2"] == {"projection": 2 * length * 32 * d, "gate": length * d, "add": length * d}  # 8192, 128, 128
    assert steps["step3"] == {}
    assert steps["step4"] == {
        "scorer_linear_1": 2 * length * d * d,  # 2048
        "scorer_linear_2": 2 * length * d * s,  # 768
        "prior": 2 * 3 * 4 + 2 * 4 * 3 + length + s * length,  # energy accumulation 48, gate 16, add 48
        "selection": s * length,
        "pool": 2 * s * length * d,  # 768
        "scale": s * d,
    }
    idct = official_compressor_flops(cfg.replace(coordinates="idct"), d, (n, n))
    assert idct["step3"] == {"idct": 2 * (2 * d * 2**3)}  # two C x C products per channel
    randrot = official_compressor_flops(cfg.replace(coordinates="randrot"), d, (n, n))
    assert randrot["step3"] == {"rotation": 2 * 4 * 4 * d}  # one dense [C², C²] x [C², d] product
    # A batch of 3: the embedding projection and gate are input-independent, done once per call.
    three = official_compressor_flops(cfg, d, (n, n), batch=3)
    assert three["step2"] == {"projection": 8192, "gate": 128, "add": 3 * 128}
    assert total(three["step1"]) == 3 * total(steps["step1"]) and total(three["step4"]) == 3 * total(steps["step4"])


def test_ours_compressor_by_hand():
    cfg = BracoConfig(cutoff=2, residual_tokens=3, coordinates="idct")
    ours = ours_compressor_flops(cfg, 8, (4, 4))
    assert ours["step1"] == {"retained_rows": 2 * 4 * 16 * 8}  # [C², L] x [L, d], idct folded in
    assert ours["step2"] == {"add": 4 * 8} and ours["step3"] == {}  # embedding cached in eval
    # The paper's residual step plus the fused form's fixed product: [1, E] x [E, L] edge-to-token sums of the
    # prior (E = 12 + 12 edges of the 4x4 grid).
    fused = {"energy_scatter": 2 * 24 * 16}
    assert ours["step4"] == {**official_compressor_flops(cfg, 8, (4, 4))["step4"], **fused}
    train = ours_compressor_flops(cfg, 8, (4, 4), training=True)
    assert train["step2"] == {"projection": 2 * 4 * 32 * 8, "gate": 32, "add": 32}


@pytest.mark.parametrize("budget", [4, 9, 16, 25])
def test_compressor_matmuls_match_profiler(budget):
    torch.manual_seed(0)
    cfg = BracoConfig.from_budget(budget)
    coder = BracoCoder.from_config(16, cfg).eval()
    params = dict(coder.named_parameters())
    x = torch.randn(2, 37, 16)  # 6x6 grid + CLS, batch 2
    with torch.no_grad():
        coder(x), official_forward(params, x, cfg)  # build cached operators/features first, as in timing
        ours = _profiled(lambda: coder(x))
        official = _profiled(lambda: official_forward(params, x, cfg))
    matmul = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
    for counted, prof in ((ours_compressor_flops(cfg, 16, (6, 6), 2), ours), (official_compressor_flops(cfg, 16, (6, 6), 2), official)):
        assert sum(prof.get(k, 0) for k in matmul) == total(counted) - elementwise(counted)
