"""BracoCoder: parity with the official computation and an independent float64 formula, names, errors."""

import math

import pytest
import torch

from braco_patch import BRACO_BUDGETS, BracoCoder, BracoConfig
from braco_patch.reference import official_forward

OFFICIAL_PARAMETER_ORDER = [
    "polar_pe_scale",
    "spatial_scale",
    "spatial_prior_weight",
    "polar_proj.weight",
    "spatial_norm.weight",
    "spatial_norm.bias",
    "spatial_scorer.0.weight",
    "spatial_scorer.0.bias",
    "spatial_scorer.1.weight",
    "spatial_scorer.1.bias",
    "spatial_scorer.3.weight",
    "spatial_scorer.3.bias",
]


def _coder(budget, dim=64, seed=0, **kw):
    torch.manual_seed(seed)
    coder = BracoCoder.from_config(dim, BracoConfig.from_budget(budget, **kw))
    with torch.no_grad():  # non-trivial values for every scalar so each term is exercised
        coder.spatial_prior_weight.fill_(0.2)
        coder.spatial_scale.fill_(1.3)
        if hasattr(coder, "polar_pe_scale"):
            coder.polar_pe_scale.fill_(0.7)
        if hasattr(coder, "spatial_norm"):
            coder.spatial_norm.weight.normal_()
            coder.spatial_norm.bias.normal_()
    return coder.eval()


def _float64_braco(coder: BracoCoder, x: torch.Tensor) -> torch.Tensor:
    """Independent float64 re-computation from the paper's equations (no project code)."""
    cfg = coder.config
    p = {k: v.detach().double() for k, v in coder.named_parameters()}
    x = x.double()
    b, length, d = x.shape
    n = int(math.isqrt(length))
    if n * n != length:
        n = int(math.isqrt(length - 1))
        x = x[:, 1:]
    c, s = cfg.cutoff, cfg.residual_tokens

    def dct(m):
        return torch.tensor(
            [[(math.sqrt(1 / m) if k == 0 else math.sqrt(2 / m)) * math.cos(math.pi * (j + 0.5) * k / m) for j in range(m)] for k in range(m)],
            dtype=torch.float64,
        )

    dn = dct(n)
    grid = x.view(b, n, n, d)
    y = torch.einsum("uh,bhwd,vw->buvd", dn[:c], grid, dn[:c])  # retained DCT block, eq. specialize_block
    if cfg.embedding == "polar":
        feats = []
        for u in range(c):
            for v in range(c):
                r = math.hypot(u, v) / (math.sqrt(2) * (n - 1))
                th = math.atan2(v, u) if (u or v) else 0.0
                bands = [2.0**k for k in range(cfg.num_freqs)]
                feats.append([math.sin(math.pi * w * r) for w in bands] + [math.cos(math.pi * w * r) for w in bands]
                             + [math.sin(w * th) for w in bands] + [math.cos(w * th) for w in bands])
        pe = torch.tensor(feats, dtype=torch.float64) @ p["polar_proj.weight"].T
        y = y + p["polar_pe_scale"] * pe.view(c, c, d)
    if cfg.resolved_coordinates == "idct":
        dc = dct(c)
        y = torch.einsum("up,buvd,vq->bpqd", dc, y, dc)
    out = [y.reshape(b, c * c, d)]
    if s:
        h = torch.nn.functional.layer_norm(x, (d,), p["spatial_scorer.0.weight"], p["spatial_scorer.0.bias"], 1e-5)
        h = torch.nn.functional.gelu(h @ p["spatial_scorer.1.weight"].T + p["spatial_scorer.1.bias"])
        logits = (h @ p["spatial_scorer.3.weight"].T + p["spatial_scorer.3.bias"]).transpose(1, 2)
        e = torch.zeros(b, n, n, dtype=torch.float64)
        for dh, dw in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            shifted = torch.roll(grid, shifts=(dh, dw), dims=(1, 2))
            valid = torch.ones(n, n, dtype=torch.bool)
            if dh == 1:
                valid[0] = False
            if dh == -1:
                valid[-1] = False
            if dw == 1:
                valid[:, 0] = False
            if dw == -1:
                valid[:, -1] = False
            e += ((grid - shifted) ** 2).sum(-1) * valid
        e = e.flatten(1)
        e = (e - e.mean(1, keepdim=True)) / (e.std(1, keepdim=True) + 1e-6)
        z = (logits + p["spatial_prior_weight"] * e.unsqueeze(1)) / cfg.temperature
        zs = z.sort(-1, descending=True).values
        k = torch.arange(1, z.shape[-1] + 1, dtype=torch.float64)
        support = ((1 + k * zs) > zs.cumsum(-1)).sum(-1, keepdim=True)
        tau = (zs.cumsum(-1).gather(-1, support - 1) - 1) / support
        w = (z - tau).clamp(min=0)
        r = torch.nn.functional.layer_norm(w @ x, (d,), p["spatial_norm.weight"], p["spatial_norm.bias"], 1e-5)
        out.append(r * p["spatial_scale"])
    return torch.cat(out, 1)


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("budget", sorted(BRACO_BUDGETS))
@pytest.mark.parametrize("tokens", [576, 577])
@pytest.mark.parametrize("embedding", ["polar", "none"])
def test_parity_with_official_and_float64(budget, tokens, embedding):
    coder = _coder(budget, dim=1024 if budget == 16 else 64, embedding=embedding)
    x = torch.randn(2, tokens, coder.dim)
    z = coder(x)
    assert z.shape == (2, budget, coder.dim)
    assert _rel(z, official_forward(dict(coder.named_parameters()), x, coder.config)) <= 1e-6
    assert _rel(z, _float64_braco(coder, x)) <= 1e-6


@pytest.mark.parametrize("coords", ["coef", "idct"])
def test_parity_idct_on_and_off(coords):
    coder = _coder(16, coordinates=coords)
    x = torch.randn(3, 576, 64)
    assert _rel(coder(x), official_forward(dict(coder.named_parameters()), x, coder.config)) <= 1e-6
    assert _rel(coder(x), _float64_braco(coder, x)) <= 1e-6


def test_backbone_is_dct_block_in_coefficient_mode():
    coder = _coder(9, embedding="none")
    x = torch.randn(1, 576, 64)
    dc = coder(x)[0, 0]
    assert torch.allclose(dc, 24 * x[0].mean(0), atol=1e-4)  # the DC token is N · mean(X)


def test_named_parameters_follow_official_order():
    coder = BracoCoder(1024, 3, 7)
    assert [n for n, _ in coder.named_parameters()] == OFFICIAL_PARAMETER_ORDER
    shapes = {n: tuple(p.shape) for n, p in coder.named_parameters()}
    assert shapes["polar_proj.weight"] == (1024, 32) and shapes["spatial_scorer.3.weight"] == (7, 1024)
    assert set(coder.state_dict()) == set(OFFICIAL_PARAMETER_ORDER)  # buffers are not persistent
    assert [n for n, _ in BracoCoder(16, 4, 0).named_parameters()] == [
        "polar_pe_scale", "spatial_scale", "spatial_prior_weight", "polar_proj.weight", "spatial_norm.weight", "spatial_norm.bias"
    ]


def test_legacy_post_norm_and_standalone_names_load():
    coder = _coder(9, post_concat_norm=True)
    sd = coder.state_dict()
    legacy = {k.replace("post_concat_ln.", "post_norm."): v for k, v in sd.items()}
    assert any(k.startswith("post_norm.") for k in legacy)
    other = BracoCoder.from_config(64, coder.config)
    other.load_state_dict(legacy, strict=True)
    x = torch.randn(2, 576, 64)
    assert torch.equal(other.eval()(x), coder(x))
    standalone = {k.replace("spatial_scorer.", "residual_scorer.").replace("polar_proj.", "polar_projection."): v for k, v in sd.items()}
    BracoCoder.from_config(64, coder.config).load_state_dict(standalone, strict=True)


@pytest.mark.parametrize("budget", [4, 9, 16, 25, 36])
def test_finite_outputs_and_gradients_all_budgets(budget):
    coder = _coder(budget, detach_dct=False).train()
    x = torch.randn(3, 577, 64, requires_grad=True)
    z = coder(x)
    assert z.shape == (3, budget, 64) and torch.isfinite(z).all()
    z.square().mean().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, p in coder.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_detach_dct_blocks_gradient_through_backbone_only():
    coder = _coder(9, residual_tokens=0).train()
    x = torch.randn(1, 576, 64, requires_grad=True)
    coder(x).sum().backward()
    assert x.grad is None
    assert coder.polar_proj.weight.grad is not None


@pytest.mark.parametrize("grid", [(12, 20), (7, 9)])
def test_non_square_grid(grid):
    coder = BracoCoder(32, 3, 4, grid=grid).train()
    x = torch.randn(2, grid[0] * grid[1] + 1, 32, requires_grad=True)
    z = coder(x)
    assert z.shape == (2, 13, 32) and torch.isfinite(z).all()
    z.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_residual_tokens_centred_backbone_not():
    coder = BracoCoder(32, 3, 7).eval()
    z = coder(torch.randn(2, 576, 32) + 3.0)
    assert z[:, 9:].mean(-1).abs().max() < 1e-5
    assert z[:, :9].mean(-1).abs().max() > 1e-4


@pytest.mark.parametrize("batch", [1, 5])
def test_batch_elements_are_independent(batch):
    coder = _coder(16)
    x = torch.randn(batch, 576, 64)
    full = coder(x)
    for i in range(batch):
        assert torch.allclose(full[i : i + 1], coder(x[i : i + 1]), atol=1e-5)


def test_eval_embedding_cache_follows_weights_and_mode():
    coder = _coder(9)
    x = torch.randn(1, 576, 64)
    first = coder(x)
    assert torch.equal(first, coder(x))  # deterministic, served from the cache
    with torch.no_grad():
        coder.polar_proj.weight.mul_(2.0)
    changed = coder(x)
    assert not torch.allclose(changed, first)
    assert torch.allclose(changed, official_forward(dict(coder.named_parameters()), x, coder.config), atol=1e-5)
    coder.load_state_dict({k: v.clone() for k, v in _coder(9, seed=5).state_dict().items()})
    assert torch.allclose(coder(x), _coder(9, seed=5)(x), atol=1e-6)
    coder.train()
    assert coder.coordinate_embedding((24, 24), torch.float32, torch.device("cpu")).requires_grad


def test_caches_filled_under_inference_mode_still_train():
    coder = _coder(9).eval()
    x = torch.randn(2, 576, 64)
    with torch.inference_mode():
        coder(x)  # fills the operator cache
        official_forward(dict(coder.named_parameters()), x, coder.config)  # fills the reference caches
    coder.train()
    coder(x).sum().backward()
    assert coder.polar_proj.weight.grad is not None
    x.requires_grad_(True)
    official_forward(dict(coder.named_parameters()), x, coder.config).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_coder_built_under_inference_mode_runs_twice():
    with torch.inference_mode():
        coder = BracoCoder(64, 3, 7).eval()
        x = torch.randn(1, 576, 64)
        assert torch.equal(coder(x), coder(x))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: BracoCoder(8, 3, 2)(torch.randn(1, 570, 8)), r"expected N² or 1\+N² tokens .* got 570"),
        (lambda: BracoCoder(8, 5, 2)(torch.randn(1, 16, 8)), "cutoff C=5 exceeds the 4x4 token grid"),
        (lambda: BracoCoder(8, 3, 2)(torch.randn(1, 16, 9)), "expected token width 8, got 9"),
        (lambda: BracoCoder(8, 3, -1), "residual_tokens S must be >= 0, got -1"),
        (lambda: BracoCoder(8, 3, 2, coordinates="zigzag"), "unknown coordinate mode 'zigzag'"),
        (lambda: BracoCoder(8, 3, 2, selection="hardmax"), "unknown selection function 'hardmax'"),
        (lambda: BracoCoder(8, 3, 2, temperature=float("nan")), "temperature must be a finite number > 0, got nan"),
        (lambda: BracoCoder(8, 3, 2).set_temperature(float("inf")), "temperature must be a finite number > 0"),
        (lambda: BracoCoder(8, 3, 2, grid=(2, 8)), "cutoff C=3 exceeds the token grid 2x8"),
        (lambda: BracoCoder(8, 3, 2, grid=(4, 4))(torch.randn(1, 15, 8)), "expected 16 or 17 tokens"),
        (lambda: BracoCoder(8, 0, 0), "both 0"),
        (lambda: BracoConfig.from_name("c3x7"), "cannot parse Braco name 'c3x7'"),
    ],
)
def test_bad_input_gives_one_clear_sentence(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_torch_compile_matches_eager_without_graph_breaks():
    coder = _coder(16)
    x = torch.randn(2, 577, 64)
    compiled = torch.compile(coder, fullgraph=True)  # fullgraph: any host sync (.item()) would fail here
    assert torch.allclose(compiled(x), coder(x), atol=1e-5, rtol=1e-5)
