"""The fused coder (issue 29): its units against independent formulas, and the coder against its step-by-step form.

The step-by-step form (``coder.fused = False``) is the pre-issue-29 eager coder, unit by unit as in
``braco_patch/residual.py``; ``braco_patch/reference.py`` and float64 formulas are the independent references.
"""

import copy
import math

import pytest
import torch
from entmax import sparsemax as entmax_sparsemax
from torch.profiler import ProfilerActivity, profile

from braco_patch import BracoCoder, BracoConfig
from braco_patch import coder as coder_module
from braco_patch.fused import (
    MAX_FUSED_TOKENS,
    FusedOperators,
    energy_scatter,
    neighbour_energy,
    prior_gain,
    rank_reciprocals,
    sparsemax_rows,
    standardised_prior,
)
from braco_patch.reference import official_forward


def _ops64(grid):
    return FusedOperators(energy_scatter(grid), *rank_reciprocals(grid[0] * grid[1]))


def _rel(a, b):
    return float((a.detach().double() - b.detach().double()).norm() / b.detach().double().norm())


# ------------------------------------------------------------------------------------------------ units
def test_energy_scatter_adds_each_edge_to_its_two_tokens():
    p = energy_scatter((3, 4))
    assert p.shape == (2 * 4 + 3 * 3, 12) and p.dtype == torch.float64
    assert torch.equal(p.sum(1), torch.full((17,), 2.0, dtype=torch.float64))  # every edge has two ends
    degree = torch.tensor([[2, 3, 3, 2], [3, 4, 4, 3], [2, 3, 3, 2]], dtype=torch.float64).flatten()
    assert torch.equal(p.sum(0), degree)  # every token counts its neighbours
    assert p[0, 0] == p[0, 4] == 1 and p[8, 0] == p[8, 1] == 1  # first vertical edge (0,0)-(1,0), first horizontal (0,0)-(0,1)


@pytest.mark.parametrize("grid", [(4, 5), (1, 6), (6, 1), (7, 7)])
def test_neighbour_energy_equals_the_explicit_neighbour_sum(grid):
    h, w = grid
    g = torch.randn(2, h, w, 3, dtype=torch.float64)
    e = neighbour_energy(g, _ops64(grid)).view(2, h, w)
    for b in range(2):
        for i in range(h):
            for j in range(w):
                total = sum(float((g[b, i, j] - g[b, i + di, j + dj]).pow(2).sum())
                            for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)) if 0 <= i + di < h and 0 <= j + dj < w)
                assert abs(float(e[b, i, j]) - total) < 1e-10


def test_standardised_prior_is_weight_over_temperature_times_the_unbiased_standard_score():
    energy = torch.rand(3, 40, dtype=torch.float64) * 100
    weight, tau = torch.tensor(0.7, dtype=torch.float64), torch.tensor(0.8, dtype=torch.float64)
    got = standardised_prior(energy, prior_gain(weight, tau, 40, torch.float64))
    expected = 0.7 / 0.8 * (energy - energy.mean(-1, keepdim=True)) / (energy.std(-1, keepdim=True) + 1e-6)
    assert got.shape == (3, 1, 40)
    # √(var + 10⁻¹²) against std + 10⁻⁶: a relative difference of at most 10⁻⁶ / std (here std ≈ 29).
    torch.testing.assert_close(got[:, 0], expected, rtol=1e-7, atol=1e-9)
    flat = standardised_prior(torch.full((1, 40), 5.0, dtype=torch.float64), prior_gain(weight, tau, 40, torch.float64))
    assert torch.equal(flat, torch.zeros_like(flat))  # a constant energy is no prior (as std + eps gives)


def test_rank_reciprocals_give_the_prefix_thresholds():
    inv_rank, neg_inv_rank = rank_reciprocals(6)
    zs = torch.randn(4, 6, dtype=torch.float64)
    k = torch.arange(1, 7, dtype=torch.float64)
    torch.testing.assert_close(torch.addcmul(neg_inv_rank, zs.cumsum(-1), inv_rank), (zs.cumsum(-1) - 1) / k)


def _simplex_projection_bisect(z: torch.Tensor, iters: int = 200) -> torch.Tensor:
    # Independent sparsemax: find τ with Σ max(z - τ, 0) = 1 by bisection (float64).
    lo, hi = z.max(-1, keepdim=True).values - 1.0, z.max(-1, keepdim=True).values
    for _ in range(iters):
        mid = (lo + hi) / 2
        too_big = (z - mid).clamp(min=0).sum(-1, keepdim=True) > 1
        lo, hi = torch.where(too_big, mid, lo), torch.where(too_big, hi, mid)
    return (z - (lo + hi) / 2).clamp(min=0)


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0])
def test_sparsemax_rows_is_the_simplex_projection_and_has_its_jacobian(scale):
    z = (torch.randn(2, 3, 48, dtype=torch.float64) * scale).requires_grad_()
    w = sparsemax_rows(z, _ops64((6, 8)))
    torch.testing.assert_close(w, _simplex_projection_bisect(z.detach()), rtol=0, atol=1e-12)
    torch.testing.assert_close(w, entmax_sparsemax(z, dim=-1), rtol=0, atol=1e-12)
    g = torch.randn_like(w)
    (ours,) = torch.autograd.grad((w * g).sum(), z)
    zz = z.detach().requires_grad_()
    (theirs,) = torch.autograd.grad((entmax_sparsemax(zz, dim=-1) * g).sum(), zz)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_sparsemax_rows_with_a_nan_or_inf_score_pool_nan_and_the_others_are_untouched(bad):
    z = torch.randn(2, 3, 12, dtype=torch.float64)
    z[1, 2, 5] = bad
    w = sparsemax_rows(z, _ops64((3, 4)))
    assert torch.isnan(w[1, 2]).all() if bad != math.inf else torch.isnan(w[1, 2, 5]) and (w[1, 2].nan_to_num() == 0).all()
    assert torch.isnan(w[1, 2] @ torch.randn(12, 4, dtype=torch.float64)).all()  # the pooled token is NaN
    good = torch.ones(2, 3, dtype=torch.bool)
    good[1, 2] = False
    torch.testing.assert_close(w[good], _simplex_projection_bisect(z[good]), rtol=0, atol=1e-12)


def test_sparsemax_rows_give_a_minus_inf_score_weight_zero():
    z = torch.randn(2, 3, 12, dtype=torch.float64)
    z[1, 2, 5] = -math.inf
    w = sparsemax_rows(z, _ops64((3, 4)))
    assert w[1, 2, 5] == 0 and torch.isfinite(w).all()
    keep = torch.arange(12) != 5
    torch.testing.assert_close(w[1, 2, keep], _simplex_projection_bisect(z[1, 2, keep]), rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------ coder
def _pair(dim=48, grid=None, seed=0, **options):
    """A coder with non-trivial values in every parameter, and its step-by-step twin (same weights)."""
    torch.manual_seed(seed)
    fused = BracoCoder(dim, grid=grid, **options)
    with torch.no_grad():
        for name, p in fused.named_parameters():
            if p.dim() == 0:
                p.fill_({"spatial_prior_weight": 0.6, "spatial_scale": 1.3, "polar_pe_scale": 0.7}[name])
            elif name.endswith("bias") or name.startswith(("spatial_norm", "post_concat_ln")):
                p.normal_()
    step_by_step = copy.deepcopy(fused)
    step_by_step.fused = False
    return fused, step_by_step


VARIANTS = {
    "c3s7": {},
    "idct": {"coordinates": "idct"},
    "randrot": {"coordinates": "randrot"},
    "sincos2d": {"embedding": "sincos2d"},
    "learned": {"embedding": "learned"},
    "no-embedding": {"embedding": "none"},
    "no-prior": {"prior": "none"},
    "S=0": {"residual_tokens": 0},
    "C=0": {"cutoff": 0, "residual_tokens": 5},
    "post-concat-norm": {"post_concat_norm": True},
    "no-residual-norm": {"residual_norm": False},
    "one-layer-scorer": {"scorer_hidden_mult": 0},
    "narrow-scorer": {"scorer_hidden_mult": 0.5},
    "cold": {"temperature": 0.3, "temperature_mul": 1.5},
    "dct-gradient": {"detach_dct": False},
}
SHAPES = {"24x24+CLS": (577, None), "24x24": (576, None), "12x20+CLS": (241, (12, 20))}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_equals_step_by_step_in_float32(variant, shape):
    tokens, grid = SHAPES[shape]
    fused, step_by_step = _pair(grid=grid, **VARIANTS[variant])
    x = torch.randn(3, tokens, 48) * 2
    for mode in ("eval", "train"):
        fused.train(mode == "train")
        step_by_step.train(mode == "train")
        assert _rel(fused(x), step_by_step(x)) <= 1e-5, mode


def _noise(name, options):
    """Gradients that are rounding noise in both forms: the last scorer bias (and, with a one-layer scorer, the
    scorer LayerNorm's bias) shift every logit of a row alike, which no selection sees; a LayerNorm over the
    whole output makes the residual scale irrelevant."""
    last = "spatial_scorer.1.bias" if options.get("scorer_hidden_mult", 1) <= 0 else "spatial_scorer.3.bias"
    return name == last or (name == "spatial_scorer.0.bias" and options.get("scorer_hidden_mult", 1) <= 0) or (
        name == "spatial_scale" and options.get("post_concat_norm", False))


@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_gradients_equal_step_by_step(variant):
    """With non-trivial weights, where float32 gradients are well conditioned (see the ill-conditioned case below)."""
    options = VARIANTS[variant]
    fused, step_by_step = _pair(grid=(12, 20), seed=1, **options)
    x = torch.randn(3, 241, 48) * 2
    upstream = torch.randn(3, fused.output_tokens, 48)
    grads = []
    for coder in (fused.train(), step_by_step.train()):
        xx = x.clone().requires_grad_()
        (coder(xx) * upstream).sum().backward()
        grads.append({"x": xx.grad, **{n: p.grad for n, p in coder.named_parameters()}})
    for name, expected in grads[1].items():
        got = grads[0][name]
        assert (got is None) == (expected is None), name  # every parameter the step-by-step form trains, trains
        if expected is None or _noise(name, options):
            continue
        # Sums over the whole output (the 0-dim scales) lose digits to cancellation in both forms: 1e-4 there.
        assert _rel(got, expected) <= (1e-4 if expected.dim() == 0 else 1e-5), name


def test_where_float32_gradients_are_ill_conditioned_the_fused_form_is_no_less_accurate():
    """A freshly initialised coder (tiny scorer logits under a standardised prior) gives float32 scorer gradients that
    miss float64 by 3e-3 to 5e-3 in either form (a 1e-7 relative change of the input moves them by 0.4 %); there the
    forms cannot agree to 1e-5, and the fused one must be at least as close to the float64 truth."""
    torch.manual_seed(0)
    coder = BracoCoder(64, 3, 7).train()
    with torch.no_grad():
        coder.spatial_prior_weight.fill_(0.5)
    x = torch.randn(2, 577, 64, dtype=torch.float64)

    def gradients(module, dtype):
        module = copy.deepcopy(module).to(dtype)
        (module(x.to(dtype)) ** 2).mean().backward()
        return {n: p.grad.double() for n, p in module.named_parameters() if p.grad is not None}

    truth = gradients(coder, torch.float64)  # the fused form runs its prior and selection in float64 too
    step_by_step = copy.deepcopy(coder)
    step_by_step.fused = False
    errors = {form: {n: _rel(g, truth[n]) for n, g in gradients(c, torch.float32).items()}
              for form, c in (("fused", coder), ("step-by-step", step_by_step))}
    assert errors["step-by-step"]["spatial_scorer.1.weight"] > 1e-4  # the ill-conditioned case this test is about
    for name in ("spatial_scorer.0.weight", "spatial_scorer.1.weight", "spatial_scorer.3.weight", "spatial_prior_weight"):
        assert errors["fused"][name] <= max(1e-5, errors["step-by-step"][name]), name


@pytest.mark.parametrize("budget", [4, 9, 16, 25])
@pytest.mark.parametrize("tokens", [576, 577])
def test_fused_equals_the_official_computation(budget, tokens):
    torch.manual_seed(budget)
    coder = BracoCoder.from_config(1024 if budget == 16 else 64, BracoConfig.from_budget(budget)).eval()
    with torch.no_grad():
        coder.spatial_prior_weight.fill_(0.4)
    x = torch.randn(2, tokens, coder.dim)
    with torch.no_grad():
        assert _rel(coder(x), official_forward(dict(coder.named_parameters()), x, coder.config)) <= 1e-5


#: Half precision against the same coder in float64: 8 unit roundoffs, as tests/gpu requires of CUDA.
HALF_TOLERANCE = {torch.float16: 8 * 2.0**-11, torch.bfloat16: 8 * 2.0**-8}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_fused_half_precision_matches_float64(dtype):
    fused, _ = _pair(dim=256)
    reference = copy.deepcopy(fused).double().eval()
    x = torch.randn(2, 577, 256, dtype=torch.float64)
    with torch.no_grad():
        expected = reference(x)
        got = copy.deepcopy(fused).to(dtype).eval()(x.to(dtype))
    assert got.dtype == dtype and _rel(got, expected) <= HALF_TOLERANCE[dtype]


def _profiled_ops(coder, x):
    with torch.no_grad():
        coder(x)  # fills the caches
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            coder(x)
    aten = [e for e in prof.events() if e.name.startswith("aten::")]
    return [e for e in aten if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]


def test_eval_forward_dispatches_few_ops():
    """Top-level aten ops of one eval forward (c3s7, batch 1, CLS), as docs/BENCHMARKS.md counts them."""
    fused, step_by_step = _pair(dim=64)
    x = torch.randn(1, 577, 64)
    ops = _profiled_ops(fused.eval(), x)
    views = {"slice", "expand", "reshape", "view", "flatten", "unsqueeze", "transpose", "broadcast_tensors"}
    kernels = [e.name for e in ops if e.name.removeprefix("aten::") not in views]
    assert len(ops) <= 35 and len(kernels) <= 21, [e.name for e in ops]
    assert len(_profiled_ops(step_by_step.eval(), x)) >= 80  # the form it replaces


def test_eval_caches_follow_temperature_weights_and_scales():
    fused, step_by_step = _pair()
    fused.eval(), step_by_step.eval()
    x = torch.randn(2, 577, 48)

    def check():
        with torch.no_grad():
            out = fused(x)
            assert _rel(out, step_by_step(x)) <= 1e-5
            return out

    first = check()
    for coder in (fused, step_by_step):
        coder.set_temperature(0.3)
    assert not torch.allclose(check(), first)
    with torch.no_grad():
        for coder in (fused, step_by_step):
            coder.spatial_scorer[3].weight.mul_(1.5)
            coder.spatial_prior_weight.fill_(-0.4)
            coder.spatial_scale.fill_(0.5)
            coder.spatial_norm.bias.add_(1.0)
    check()


def test_annealed_temperature_reaches_the_fused_training_forward():
    fused, step_by_step = _pair(temp_start=2.0, temp_end=0.8, temp_steps=10)
    x = torch.randn(2, 577, 48)
    outputs = []
    for step in (0, 10):
        for coder in (fused.train(), step_by_step.train()):
            coder.set_step(step)
        outputs.append(fused(x))
        assert _rel(outputs[-1], step_by_step(x)) <= 1e-5
    assert not torch.allclose(*outputs)


class _QuantisedLinear(torch.nn.Linear):
    """Stands for a layer replaced by a quantiser: not a plain ``nn.Linear``."""


@pytest.mark.parametrize(
    "why, make",
    [
        ("softmax", lambda: _pair(selection="softmax")),
        ("entmax15", lambda: _pair(selection="entmax15")),
        ("grid over the limit", lambda: _pair(dim=8, cutoff=2, residual_tokens=3, grid=(33, 33))),
    ],
)
def test_unfused_configurations_keep_the_step_by_step_residual(monkeypatch, why, make):
    fused, step_by_step = make()
    assert MAX_FUSED_TOKENS < 33 * 33
    monkeypatch.setattr(coder_module, "sparsemax_rows", lambda *a: pytest.fail(f"fused selection used ({why})"))
    tokens = 33 * 33 + 1 if fused.grid == (33, 33) else 577
    x = torch.randn(2, tokens, fused.dim)
    assert _rel(fused.eval()(x), step_by_step.eval()(x)) <= 1e-5


def test_a_quantised_scorer_and_autocast_keep_the_step_by_step_residual(monkeypatch):
    fused, step_by_step = _pair()
    last = fused.spatial_scorer[3]
    quantised = _QuantisedLinear(last.in_features, last.out_features)
    quantised.load_state_dict(last.state_dict())
    fused.spatial_scorer[3] = quantised
    monkeypatch.setattr(coder_module, "sparsemax_rows", lambda *a: pytest.fail("fused selection used"))
    x = torch.randn(2, 577, 48)
    assert _rel(fused.eval()(x), step_by_step.eval()(x)) <= 1e-5
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _rel(fused(x), step_by_step(x)) <= 1e-5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_fused_half_precision_gradients_downstream_of_the_selection_match_float64(dtype):
    """Upstream of sparsemax, half-precision gradients are ill-posed in either form (a score rounded across the
    threshold changes the piecewise-constant Jacobian); downstream of it they must stay within 8 unit roundoffs."""
    fused, _ = _pair(dim=128, seed=2)
    x = torch.randn(2, 577, 128, dtype=torch.float64)
    upstream = torch.randn(2, 16, 128, dtype=torch.float64)
    grads = []
    for coder, dt in ((copy.deepcopy(fused).double(), torch.float64), (copy.deepcopy(fused).to(dtype), dtype)):
        (coder.train()(x.to(dt)) * upstream.to(dt)).sum().backward()
        grads.append(dict(coder.named_parameters()))
    for name in ("spatial_norm.weight", "spatial_norm.bias", "polar_proj.weight"):
        assert _rel(grads[1][name].grad, grads[0][name].grad) <= HALF_TOLERANCE[dtype], name


@pytest.mark.slow
def test_training_through_torch_compile_fullgraph_matches_eager():
    """The fused form compiles whole in training (no graph break, no host sync) and its gradients match eager's.
    Slow: compiling forward and backward takes one to four minutes on a 2-vCPU machine."""
    fused, _ = _pair(grid=(12, 20), seed=1, temp_start=2.0, temp_end=0.8, temp_steps=10)
    eager = copy.deepcopy(fused)
    compiled = torch.compile(fused, fullgraph=True)
    x = torch.randn(3, 241, 48) * 2
    upstream = torch.randn(3, fused.output_tokens, 48)
    for step in (0, 10):  # the annealed temperature is a buffer: a new value needs no recompilation
        grads = []
        for coder, run in ((eager, eager), (fused, compiled)):
            coder.train().set_step(step)
            coder.zero_grad()
            xx = x.clone().requires_grad_()
            (run(xx) * upstream).sum().backward()
            grads.append({"x": xx.grad, **{n: p.grad for n, p in coder.named_parameters()}})
        for name, expected in grads[0].items():
            if expected is not None and not _noise(name, {}) and expected.dim() > 0:
                assert _rel(grads[1][name], expected) <= 1e-4, (step, name)
