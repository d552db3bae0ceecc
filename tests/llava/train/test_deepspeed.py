"""The tiny stage-1 run through the ``deepspeed`` launcher with ``scripts/zero2.json``, on the CPU (gloo + CPU
accelerator), as upstream's scripts launch it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import stage1_flags
from .test_two_stage import OFFICIAL_C2S5_KEYS

pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (pip install -e .[train])")

REPO = Path(__file__).resolve().parents[3]
LAUNCHER = Path(sys.executable).with_name("deepspeed")


def _launch(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    if not LAUNCHER.is_file():
        pytest.fail(f"DeepSpeed is installed but its launcher {LAUNCHER} is missing")
    env = {**os.environ, "PATH": f"{LAUNCHER.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [str(LAUNCHER), "--master_port", str(29500 + os.getpid() % 1000),
               str(REPO / "llava" / "train" / "train_mem.py"), "--deepspeed", str(REPO / "scripts" / "zero2.json"), *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=tmp_path, env=env)


def _deepspeed_breaks_on_scalars() -> bool:
    from llava.train.model_setup import _deepspeed_broadcasts_byte_views

    return _deepspeed_broadcasts_byte_views()


def test_zero2_stage1_mlp(tmp_path: Path, tiny_base_llm, tiny_tower_dir, train_data):
    output = tmp_path / "llava-ds-mlp-pretrain"
    result = _launch(stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", output, batch=4), tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    weights = torch.load(output / "mm_projector.bin", weights_only=True)
    assert set(weights) == {f"model.mm_projector.{i}.{kind}" for i in (0, 2) for kind in ("weight", "bias")}


def test_zero2_stage1_braco(tmp_path: Path, tiny_base_llm, tiny_tower_dir, train_data):
    """Braco's three 0-dim parameters (official layout) train under DeepSpeed, or, with a DeepSpeed release that
    cannot broadcast 0-dim parameters (0.19.8), the run stops at once with the fix in one sentence."""
    output = tmp_path / "llava-ds-braco-pretrain"
    result = _launch(stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "braco_c2s5", output, batch=4), tmp_path)
    if _deepspeed_breaks_on_scalars():
        assert result.returncode != 0
        assert "cannot start on a model with 0-dimensional parameters" in result.stderr
        assert "pip install deepspeed==0.19.7" in result.stderr
        return
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert set(torch.load(output / "mm_projector.bin", weights_only=True)) == OFFICIAL_C2S5_KEYS
