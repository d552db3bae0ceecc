"""``benchmarks/coder_speed.py`` (the Braco coder alone, issue 29) on a tiny coder: its rows, and ``--out`` checked first."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from llava.utils import UserError

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "coder_speed.py"
TINY = ["--allocation", "c2s3", "--dim", "32", "--tokens", "37", "--rounds", "2", "--iters", "1", "--threads", "1"]


def _main():
    spec = importlib.util.spec_from_file_location("bench_coder_speed", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_rows_time_count_and_compare_both_forms(tmp_path: Path) -> None:
    out = tmp_path / "coder.json"
    _main()([*TINY, "--out", str(out)])
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert list(rows) == ["step-by-step", "fused", "GEMM floor"]
    assert result["input"] == [1, 37, 32] and result["dtype"] == "float32" and result["threads"] == 1
    assert rows["fused"]["relative_error"] <= 1e-5 and rows["step-by-step"]["relative_error"] == 0
    assert rows["fused"]["aten_kernel_ops"] < rows["step-by-step"]["aten_kernel_ops"]
    assert rows["GEMM floor"]["aten_ops"] == 4 and rows["GEMM floor"]["over_gemm_floor"] == 1
    assert all(row["median_ms"] > 0 for row in rows.values())


def test_a_folder_as_out_is_refused_before_measuring(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^--out '.*' is a folder; pass a file path$"):
        _main()([*TINY, "--out", str(tmp_path)])
