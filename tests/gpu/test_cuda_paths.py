"""The CUDA paths that CI cannot run: half-precision coder numerics, loading and generation on the GPU, CUDA
graphs and torch.compile, CUDA-event measurement, 4/8-bit loading and DeepSpeed ZeRO-2/3 on NCCL (issue 15).

Run on a GPU machine with ``make gpu-check`` or ``bash scripts/gpu/check.sh``; see tests/gpu/conftest.py.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from braco_patch import BracoCoder, BracoConfig
from llava.capture import check_close, make_fast
from llava.eval import core
from llava.mm_utils import get_model_name_from_path
from llava.model.builder import load_pretrained_model

from ..llava.train.conftest import stage1_flags, stage2_flags
from .conftest import half_dtypes, needs_cuda

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
# Relative error of the output (Frobenius norm) allowed in half precision: 8 unit roundoffs of the dtype
# (2^-11 for float16, 2^-8 for bfloat16), measured against the same coder in float64 on the CPU.
TOLERANCE = {torch.float16: 8 * 2.0**-11, torch.bfloat16: 8 * 2.0**-8}


@pytest.mark.parametrize("dtype", half_dtypes(), ids=str)
@pytest.mark.parametrize("budget", [9, 16, 25])
def test_coder_in_half_precision_matches_float64(device: torch.device, dtype: torch.dtype, budget: int) -> None:
    torch.manual_seed(0)
    reference = BracoCoder.from_config(1024, BracoConfig.from_budget(budget)).double().eval()
    with torch.no_grad():
        reference.spatial_prior_weight.fill_(0.3)  # exercise the prior term too
    half = copy.deepcopy(reference).to(device=device, dtype=dtype)
    x = torch.randn(2, 577, 1024, dtype=torch.float64)
    with torch.no_grad():
        expected = reference(x)
        got = half(x.to(device=device, dtype=dtype)).to(device="cpu", dtype=torch.float64)
    error = ((got - expected).norm() / expected.norm()).item()
    print(f"budget {budget} {dtype}: relative error {error:.2e} (tolerance {TOLERANCE[dtype]:.2e})")
    assert got.shape == expected.shape and error <= TOLERANCE[dtype]


@needs_cuda("a CUDA graph")
@pytest.mark.parametrize("batch,tokens,dim", [(1, 577, 1024), (2, 37, 64)], ids=["clip-L-batch1", "small-batch2"])
def test_cudagraph_and_compile_equal_eager(device: torch.device, batch: int, tokens: int, dim: int) -> None:
    torch.manual_seed(0)
    coder = BracoCoder.from_config(dim, BracoConfig.from_budget(16)).to(device).half().eval()
    x = torch.randn(batch, tokens, dim, device=device, dtype=torch.half)
    with torch.no_grad():
        eager = coder(x)
        graph = make_fast(coder, "cudagraph", "cuda", (x,))
        check_close(eager, graph(x).clone())
        y = torch.randn_like(x)
        check_close(coder(y), graph(y).clone())
        torch._dynamo.reset()
        compiled = make_fast(coder, "compile", "cuda")
        check_close(eager, compiled(x))


def _images(count: int) -> list[Image.Image]:
    return [Image.new("RGB", (40 + 8 * i, 48), (30 * i, 120, 200 - 20 * i)) for i in range(count)]


def test_tiny_checkpoint_generates_and_batches_like_batch_one(device: torch.device, tiny_llava_checkpoint) -> None:
    checkpoint = tiny_llava_checkpoint("braco_c2s5")
    generator, _ = core.load_generator(str(checkpoint), None, "vicuna_v1", device.type)
    parameter = next(generator.model.parameters())
    assert parameter.device.type == device.type
    if device.type == "cuda":
        assert parameter.dtype == torch.float16
        torch.cuda.reset_peak_memory_stats()
    questions = ["What is in the image?", "Describe the colours in detail, please.", "Is it dark?"]
    images = [[image] for image in _images(3)]
    config = core.GenerationConfig(temperature=0, max_new_tokens=12)
    single = [generator.generate([question], [image], config)[0] for question, image in zip(questions, images)]
    batched = generator.generate(questions, images, config)
    if device.type == "cuda":
        print(f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
    assert batched == single and all(isinstance(text, str) for text in single)


def test_braco_cost_measures_latency_and_peak_memory(device: torch.device, tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    command = [sys.executable, "-m", "braco_patch.cli", "cost", "--measure", "--device", device.type, "--layers", "1",
               "--budgets", "16", "--warmup", "2", "--iters", "5", "--parts", "boundary", "pipeline", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(out.read_text())["measure"]
    rows = measured["boundary"] + measured["pipeline"]
    assert rows and all(row["status"] == "ok" and row["median_ms"] > 0 and row["peak_bytes"] > 0 for row in rows)
    if device.type == "cuda":
        assert all(row["memory_method"].startswith("torch.cuda.max_memory_allocated") for row in rows)


@needs_cuda("bitsandbytes")
@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_loading_generates(device: torch.device, tiny_llava_checkpoint, bits: int) -> None:
    if importlib.util.find_spec("bitsandbytes") is None:
        pytest.skip("bitsandbytes is not installed: carry its wheel (scripts/gpu/fetch_wheels.sh --with-bitsandbytes)")
    checkpoint = str(tiny_llava_checkpoint("braco_c2s5"))
    tokenizer, model, processor, _ = load_pretrained_model(checkpoint, None, get_model_name_from_path(checkpoint),
                                                           load_4bit=bits == 4, load_8bit=bits == 8, device="cuda")
    kinds = {type(module).__name__ for module in model.modules()}
    assert {"Linear4bit" if bits == 4 else "Linear8bitLt"} & kinds, sorted(kinds)
    generator = core.LlavaGenerator(tokenizer, model, processor, conv_mode="vicuna_v1", device="cuda", dtype=torch.float16)
    [text] = generator.generate(["What is it?"], [_images(1)], core.GenerationConfig(temperature=0, max_new_tokens=6))
    assert isinstance(text, str)


def test_flash_attention_2(device: torch.device, tiny_llava_checkpoint) -> None:
    if device.type != "cuda":
        pytest.skip("flash-attn needs CUDA (CPU wiring check)")
    if importlib.util.find_spec("flash_attn") is None:
        pytest.skip("flash-attn is not installed (no wheel travels with the GPU check)")
    checkpoint = str(tiny_llava_checkpoint("braco_c2s5"))
    _, model, _, _ = load_pretrained_model(checkpoint, None, get_model_name_from_path(checkpoint), use_flash_attn=True, device="cuda")
    assert model.config._attn_implementation == "flash_attention_2"


def _torchrun(script_args: list[str], config: str, cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", str(29600 + os.getpid() % 500),
               str(REPO / "llava" / "train" / "train_mem.py"), "--deepspeed", str(REPO / "scripts" / config), *script_args]
    return subprocess.run(command, capture_output=True, text=True, timeout=500, cwd=cwd)


def _on_gpu(flags: list[str]) -> list[str]:
    """The CPU test flags with ``--use_cpu`` dropped and bf16 on, as the v1.5 scripts run."""
    index = flags.index("--use_cpu")
    return flags[:index] + flags[index + 2:] + ["--bf16", "True"]


@needs_cuda("DeepSpeed on NCCL")
@pytest.mark.parametrize("config", ["zero2.json", "zero3.json"])
def test_deepspeed_stage2_step(device: torch.device, tmp_path: Path, tiny_base_llm, tiny_tower_dir, train_data, config: str) -> None:
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed: carry its wheel (scripts/gpu/fetch_wheels.sh builds it)")
    adapter_dir = tmp_path / "llava-braco-pretrain"
    first = _torchrun(_on_gpu(stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "braco_c2s5", adapter_dir, batch=4)), "zero2.json", tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    output = tmp_path / "llava-braco-finetune"
    flags = _on_gpu(stage2_flags(tiny_base_llm, tiny_tower_dir, train_data, "braco_c2s5", output, adapter_dir / "mm_projector.bin"))
    second = _torchrun(flags, config, tmp_path)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert (output / "config.json").is_file()
