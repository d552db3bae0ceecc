"""``benchmarks/gpu_prefill.py`` and ``benchmarks/gpu_train_step.py``: an ``--out`` they cannot write is refused in one
sentence before any measurement (they used to measure for minutes, then fail writing with a traceback)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from llava.utils import UserError

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["gpu_prefill", "gpu_train_step"])
def test_a_folder_as_out_is_refused_before_measuring(name: str, tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("my notes")
    # the smallest settings, so that the code before the fix (which measured first) fails quickly too
    argv = {"gpu_prefill": ["--matmul-size", "8", "--iters", "1", "--warmup", "0", "--layers", "1", "--batch-sizes", "1"],
            "gpu_train_step": ["--layers", "1", "--batch", "1", "--text-tokens", "4", "--steps", "1"]}[name]
    with pytest.raises(UserError, match=r"^--out '.*' is a folder; pass a file path$"):
        _load(name).main(["--device", "cpu", *argv, "--out", str(tmp_path)])
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]
