"""kineto's ``USDT ... profiler_start/stop`` lines stay out of ``braco cost --measure``'s output; other standard-error
output written during a profiled call still reaches the user."""

import json
import subprocess
import sys

SNIPPET = r"""
import os, sys, torch
from llava.cost.measure import profiler_flops
def call():
    os.write(2, b"C-level message inside the block\n")
    print("python message inside the block", file=sys.stderr)
    return torch.mm(torch.randn(8, 8), torch.randn(8, 8))
print(profiler_flops(call, torch.device("cpu"))["profiler_matmul"])
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
    torch.mm(torch.randn(2, 2), torch.randn(2, 2))
"""


def _run(args, cwd):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_profiled_call_keeps_other_stderr_and_drops_markers(tmp_path):
    result = _run(["-c", SNIPPET], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(2 * 8 * 8 * 8)
    lines = result.stderr.splitlines()
    assert "C-level message inside the block" in lines and "python message inside the block" in lines
    # The bare profiler after it (not wrapped) still prints its two markers: proof that this torch emits them.
    assert sum("profiler_start" in line for line in lines) == 1
    assert sum("profiler_stop" in line for line in lines) == 1


def test_braco_cost_measure_prints_no_marker(tmp_path):
    (tmp_path / "tower").mkdir()
    tower = {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "image_size": 56, "patch_size": 14}
    (tmp_path / "tower" / "config.json").write_text(json.dumps(tower))
    config = {"model_type": "llava_llama", "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "mm_vision_tower": "tower",
              "mm_hidden_size": 32, "mm_projector_type": "mlp2x_gelu", "mm_vision_select_layer": -2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = _run(["-m", "braco_patch.cost", "--config", "config.json", "--budgets", "4", "--prompt-tokens", "5",
                   "--measure", "--device", "cpu", "--warmup", "0", "--iters", "1", "--parts", "boundary"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "median" in result.stdout or "ms" in result.stdout
    assert "USDT" not in result.stderr and "profiler_start" not in result.stderr
