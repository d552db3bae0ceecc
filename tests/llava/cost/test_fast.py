"""Fast paths: torch.compile equals eager on CPU; CUDA-only paths refuse CPU with one sentence.

The CUDA-graph and CUDA compile checks are in tests/gpu/test_cuda_paths.py (``make gpu-check``)."""

import pytest
import torch

from braco_patch import BracoCoder, BracoConfig
from llava.capture import COMPILE_MODES, check_close, make_fast


@pytest.fixture
def fresh_dynamo():
    """Compiled-frame state (incl. automatic dynamic shapes) is process-wide: leave none behind for other tests."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compile_equals_eager_on_cpu(fresh_dynamo):
    torch.manual_seed(0)
    coder = BracoCoder.from_config(32, BracoConfig.from_budget(9)).eval()
    with torch.no_grad():
        coder.spatial_prior_weight.fill_(0.3)  # exercise the prior term too
    x = torch.randn(2, 17, 32)
    assert COMPILE_MODES["cpu"] == "max-autotune-no-cudagraphs"
    with torch.no_grad():
        eager = coder(x)  # warm the coder's caches first, as the measure command does
        fast = make_fast(coder, "compile", "cpu")
        out = fast(x)
        assert check_close(eager, out) <= 1e-4
        assert check_close(eager, fast(x + 0)) <= 1e-4  # a second call reuses the compiled graph


def test_none_is_identity_and_bad_modes_are_refused():
    fn = lambda t: t  # noqa: E731
    assert make_fast(fn, "none", "cpu") is fn
    with pytest.raises(ValueError, match="--fast cudagraph needs a CUDA device, got 'cpu'"):
        make_fast(fn, "cudagraph", "cpu", (torch.zeros(1),))
    with pytest.raises(ValueError, match="unknown fast path 'turbo'"):
        make_fast(fn, "turbo", "cpu")


def test_check_close_rejects_a_wrong_result():
    ref = torch.ones(3, 4)
    assert check_close(ref, ref + 1e-6) < 1e-5
    with pytest.raises(RuntimeError, match="exceeds"):
        check_close(ref, ref + 1e-2)
    with pytest.raises(RuntimeError, match="shape"):
        check_close(ref, ref[:2])


