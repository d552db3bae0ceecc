"""The fused Braco coder on the GPU (issue 29): equal to the step-by-step form in float32, float16 and bfloat16,
gradients too, and no host sync in its forward.

``coder.fused = False`` is the step-by-step form (the coder before issue 29); float64 on the CPU is the truth for
half precision, with the tolerance of test_cuda_paths.py (8 unit roundoffs of the dtype).
"""

from __future__ import annotations

import copy

import pytest
import torch

from braco_patch import BracoCoder, BracoConfig

from .conftest import half_dtypes, needs_cuda
from .test_cuda_paths import TOLERANCE

pytestmark = pytest.mark.gpu


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm())


def _coders(budget: int = 16, dim: int = 1024) -> tuple[BracoCoder, BracoCoder]:
    torch.manual_seed(0)
    fused = BracoCoder.from_config(dim, BracoConfig.from_budget(budget))
    with torch.no_grad():
        fused.spatial_prior_weight.fill_(0.3)
        fused.spatial_norm.bias.normal_()
    step_by_step = copy.deepcopy(fused)
    step_by_step.fused = False
    return fused, step_by_step


@pytest.mark.parametrize("budget", [9, 16, 25])
def test_fused_equals_step_by_step_in_float32(device: torch.device, budget: int) -> None:
    fused, step_by_step = (c.to(device).eval() for c in _coders(budget))
    x = torch.randn(2, 577, 1024, device=device)
    with torch.no_grad():
        error = _rel(fused(x), step_by_step(x))
    print(f"budget {budget} float32: fused vs step-by-step {error:.2e}")
    assert error <= 1e-5


@pytest.mark.parametrize("dtype", half_dtypes(), ids=str)
def test_fused_half_precision_matches_float64(device: torch.device, dtype: torch.dtype) -> None:
    fused, step_by_step = _coders()
    reference = copy.deepcopy(step_by_step).double().eval()
    x = torch.randn(2, 577, 1024, dtype=torch.float64)
    with torch.no_grad():
        expected = reference(x)
        errors = {name: _rel(c.to(device=device, dtype=dtype).eval()(x.to(device=device, dtype=dtype)), expected)
                  for name, c in (("fused", fused), ("step-by-step", step_by_step))}
    print(f"{dtype}: relative error against float64 {errors} (tolerance {TOLERANCE[dtype]:.2e})")
    assert errors["fused"] <= TOLERANCE[dtype]


def _gradients(coder: BracoCoder, x: torch.Tensor, upstream: torch.Tensor) -> dict[str, torch.Tensor]:
    x = x.clone().requires_grad_()
    (coder.train()(x) * upstream).sum().backward()
    return {"x": x.grad, **{name: p.grad for name, p in coder.named_parameters()}}


#: Gradients that are rounding noise in every form (the last scorer bias shifts a whole row of logits, which the
#: selection does not see).
NOISE = {"spatial_scorer.3.bias"}
#: In half precision only the gradients downstream of the selection are well posed: sparsemax's Jacobian is piecewise
#: constant, so a score that rounding moves across the threshold changes every gradient upstream of it by O(1/support)
#: in either form (both forms then miss float64 by 5-25 % in bfloat16 on some inputs). Tensors only: the 0-dim scales
#: are sums with cancellation.
HALF_CHECKED = ("spatial_norm.weight", "spatial_norm.bias", "polar_proj.weight")


@pytest.mark.parametrize("dtype", [torch.float32, *half_dtypes()], ids=str)
def test_fused_gradients_equal_step_by_step(device: torch.device, dtype: torch.dtype) -> None:
    fused, step_by_step = _coders(dim=256)
    x = torch.randn(2, 577, 256, dtype=torch.float64)
    upstream = torch.randn(2, 16, 256, dtype=torch.float64)
    truth = _gradients(copy.deepcopy(step_by_step).double(), x, upstream)
    got = {name: _gradients(c.to(device=device, dtype=dtype), x.to(device=device, dtype=dtype), upstream.to(device=device, dtype=dtype))
           for name, c in (("fused", fused), ("step-by-step", step_by_step))}
    for name, expected in truth.items():
        if name in NOISE:
            continue
        errors = {form: _rel(grads[name], expected) for form, grads in got.items()}
        print(f"{dtype} d/d{name}: relative error against float64 {errors}")
        if dtype == torch.float32:  # as on the CPU: tensors 1e-5, the 0-dim scales (sums with cancellation) 1e-4
            assert _rel(got["fused"][name], got["step-by-step"][name]) <= (1e-4 if expected.dim() == 0 else 1e-5), name
        elif name in HALF_CHECKED:
            assert errors["fused"] <= TOLERANCE[dtype], name


@needs_cuda("torch.cuda.set_sync_debug_mode")
def test_fused_forward_never_syncs_with_the_host(device: torch.device) -> None:
    fused, _ = _coders()
    fused = fused.to(device=device, dtype=torch.float16).eval()
    x = torch.randn(1, 577, 1024, device=device, dtype=torch.float16)
    with torch.no_grad():
        fused(x)  # builds the fixed operators and caches (host work, once)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            fused(x)
            fused.train()(x)
        finally:
            torch.cuda.set_sync_debug_mode("default")


@needs_cuda("CUDA graphs")
def test_the_compiled_coder_replayed_from_a_cuda_graph_matches_float64(device: torch.device) -> None:
    """What ``--fast compile`` does on CUDA: inductor's kernels captured into one plain CUDA graph. On an H200
    (2026-11-27, ``benchmarks/coder_speed.py --device cuda --compile``) this variant of c3s7 returned NaN while the
    same compiled coder under torch.compile's own graphs (``reduce-overhead``) was correct."""
    from llava.capture import CudaGraphCall

    fused, step_by_step = _coders()
    reference = copy.deepcopy(step_by_step).double().eval()
    x = torch.randn(1, 577, 1024, dtype=torch.float64)
    with torch.no_grad():
        expected = reference(x)
        coder = fused.to(device=device, dtype=torch.float16).eval()
        replay = CudaGraphCall(torch.compile(coder, fullgraph=True), (x.to(device=device, dtype=torch.float16),))
        out = replay(x.to(device=device, dtype=torch.float16)).clone()
    assert torch.isfinite(out).all()
    assert _rel(out, expected) <= TOLERANCE[torch.float16]
