"""The fast generation path on CUDA (issue 29): CUDA graphs (the default there) give the eager path's greedy tokens in
float16 on tiny checkpoints, at batch 1 and in a left-padded batch, with the vision tower and a Braco projector
captured, and ``torch.compile`` (then captured) gives them in float32; sampling replays with a seed.

The comparison itself is ``llava.testing.fast_paths``, which the CPU tests use too (tests/llava/model/
test_fast_decode.py, tests/llava/eval/test_fast_path.py). On the CPU wiring check (``LLAVA_GPU_TEST_DEVICE=cpu``)
the CUDA-graph cases are skipped and ``compile`` runs traced only, in bfloat16.
"""

from __future__ import annotations

import pytest
import torch

from llava.eval import core
from llava.mm_utils import get_model_name_from_path
from llava.model.builder import load_pretrained_model
from llava.model.fast_generation import COMPILE_BACKEND_VARIABLE, enable_fast_path, fast_path
from llava.testing.fast_paths import QUESTIONS, eager_and_fast, prompt_batch, sample_images, sampled_twice

from .conftest import DEVICE, needs_cuda

pytestmark = pytest.mark.gpu

GREEDY = {"do_sample": False, "max_new_tokens": 12}


def _load(checkpoint, device: torch.device, dtype: torch.dtype | None = None):
    tokenizer, model, image_processor, _ = load_pretrained_model(
        str(checkpoint), None, get_model_name_from_path(str(checkpoint)), device=device.type
    )
    dtype = dtype or (torch.float16 if device.type == "cuda" else torch.bfloat16)
    return tokenizer, model.to(dtype=dtype).eval(), image_processor


@pytest.fixture()
def traced_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    if not DEVICE.startswith("cuda"):
        monkeypatch.setenv(COMPILE_BACKEND_VARIABLE, "eager")


@needs_cuda("CUDA graphs")
@pytest.mark.parametrize("projector", ["mlp2x_gelu", "braco_c2s5"])
def test_cudagraph_equals_eager_in_float16(device: torch.device, tiny_llava_checkpoint, projector: str) -> None:
    tokenizer, model, image_processor = _load(tiny_llava_checkpoint(projector), device)
    calls = [{**prompt_batch(tokenizer, image_processor, model, QUESTIONS[:1]), **GREEDY},
             {**prompt_batch(tokenizer, image_processor, model, QUESTIONS), **GREEDY}]
    for eager, fast in eager_and_fast(model, "cudagraph", calls):
        assert fast.shape == eager.shape and torch.equal(fast, eager)


@pytest.mark.parametrize("projector", ["mlp2x_gelu", "braco_c2s5"])
def test_compile_equals_eager(device: torch.device, tiny_llava_checkpoint, traced_on_cpu, monkeypatch, projector: str) -> None:
    """float32 on CUDA (TF32 off): inductor's fused kernels round half precision differently from eager ones, so
    ``compile`` is held to eager's tokens where rounding cannot flip a near tie. Braco too: its coder, compiled and
    replayed from one CUDA graph, gave NaN once in float16 (tests/gpu/test_fused_coder.py)."""
    dtype = None
    if device.type == "cuda":  # (a CPU build of torch cannot restore these flags after the test)
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
        dtype = torch.float32
    tokenizer, model, image_processor = _load(tiny_llava_checkpoint(projector), device, dtype)
    calls = [{**prompt_batch(tokenizer, image_processor, model, QUESTIONS), **GREEDY}]
    for eager, fast in eager_and_fast(model, "compile", calls):
        assert torch.equal(fast, eager)


@needs_cuda("the CUDA default")
def test_the_cuda_default_is_cudagraph_and_answers_as_eager(device: torch.device, tiny_llava_checkpoint) -> None:
    checkpoint = str(tiny_llava_checkpoint("braco_c2s5"))
    generator, _ = core.load_generator(checkpoint, None, "vicuna_v1", device.type)
    assert fast_path(generator.model).mode == "cudagraph" and fast_path(generator.model).images is not None
    images = [[image] for image in sample_images(3)]
    config = core.GenerationConfig(temperature=0, max_new_tokens=12)
    fast = generator.generate(list(QUESTIONS), images, config)
    enable_fast_path(generator.model, "none")
    assert generator.generate(list(QUESTIONS), images, config) == fast


@needs_cuda("CUDA graphs")
def test_sampling_replays_with_a_seed_in_a_cuda_graph(device: torch.device, tiny_llava_checkpoint) -> None:
    tokenizer, model, image_processor = _load(tiny_llava_checkpoint("mlp2x_gelu"), device)
    call = {**prompt_batch(tokenizer, image_processor, model, QUESTIONS), "do_sample": True, "temperature": 0.7,
            "top_p": 0.9, "max_new_tokens": 8}
    first, second = sampled_twice(model, "cudagraph", call, seed=5)
    assert torch.equal(first, second)
