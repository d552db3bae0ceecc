"""``benchmarks/loader_prefetch.py``: a tiny run times the loaders' loop reading ahead and in turn, with the same
answers, and bad flags are refused before any work."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from llava.utils import UserError

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
TINY = ["--device", "cpu", "--layers", "1", "--shrink", "64", "--projector", "mlp2x_gelu", "--questions", "4",
        "--batch-size", "2", "--new-tokens", "2", "--rounds", "1", "--image-size", "64", "48"]


def _load():
    spec = importlib.util.spec_from_file_location("bench_loader_prefetch", BENCHMARKS / "loader_prefetch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_tiny_run_times_both_loops_with_the_same_answers(tmp_path: Path) -> None:
    result = _load().main([*TINY, "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "p.json")])
    assert json.loads((tmp_path / "p.json").read_text()) == result
    assert set(result["rows"]) == {"in turn", "prefetch"} and result["same_answers"] is True
    for row in result["rows"].values():
        assert len(row["rounds_s"]) == 1 and row["questions_per_s"] == pytest.approx(4 / row["median_s"], rel=0.02)


@pytest.mark.parametrize(("argv", "message"), [
    (["--questions", "0"], r"^--questions must be at least 1, got 0$"),
    (["--image-size", "8", "8"], r"^--image-size must be at least 16 x 16 pixels"),
])
def test_bad_flags_are_one_sentence_before_any_work(tmp_path: Path, argv, message) -> None:
    with pytest.raises(UserError, match=message):
        _load().main([*TINY, *argv, "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "p.json")])
    assert not (tmp_path / "cache").exists() and not (tmp_path / "p.json").exists()
