"""``benchmarks/answer_speed.py``: a tiny run through the eval core writes its table and JSON (fast answers equal the
eager ones), the random checkpoint is written once and reused, and bad flags or outputs are refused before any work."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from llava.model.fast_generation import COMPILE_BACKEND_VARIABLE
from llava.utils import UserError

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
TINY = ["--device", "cpu", "--layers", "1", "--shrink", "64", "--projectors", "mlp2x_gelu", "--batch-sizes", "2",
        "--new-tokens", "3", "--rounds", "1"]


def _load():
    spec = importlib.util.spec_from_file_location("bench_answer_speed", BENCHMARKS / "answer_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_tiny_run_times_eager_and_fast_and_reuses_its_checkpoint(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv(COMPILE_BACKEND_VARIABLE, "eager")
    bench = _load()
    result = bench.main([*TINY, "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "speed.json")])
    rows = json.loads((tmp_path / "speed.json").read_text())["rows"]
    assert rows == result["rows"] and [row["fast"] for row in rows] == ["none", "compile"]
    assert rows[1]["same_answers"] is True and rows[0]["visual_tokens"] == 576  # CLIP-L/14-336's 24 x 24 grid
    assert all(row["ttft_ms"] > 0 and row["questions_per_s"] > 0 for row in rows)
    assert "| mlp2x_gelu | 576 | 2 | compile |" in capsys.readouterr().out
    folder = tmp_path / "cache" / "llava-v1.5-7b-random-L1-w64"
    weights = next((folder / "vicuna-7b").glob("*.safetensors"))
    written = weights.stat().st_mtime_ns
    bench.main([*TINY, "--fast", "none", "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "again.json")])
    assert weights.stat().st_mtime_ns == written  # reused, not written again


@pytest.mark.parametrize(("argv", "message"), [
    (["--new-tokens", "1"], r"^--new-tokens must be at least 2"),
    (["--rounds", "0"], r"^--rounds must be at least 1, got 0$"),
    (["--fast", "cudagraph"], r"^--fast cudagraph needs a CUDA device, got --device cpu"),
])
def test_bad_flags_are_one_sentence_before_any_work(tmp_path: Path, argv, message) -> None:
    with pytest.raises(UserError, match=message):
        _load().main([*TINY, *argv, "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "speed.json")])
    assert not (tmp_path / "cache").exists() and not (tmp_path / "speed.json").exists()


def test_a_cache_of_someone_elses_files_is_refused_untouched(tmp_path: Path) -> None:
    folder = tmp_path / "cache" / "llava-v1.5-7b-random-L1-w64"
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"^--cache '.*' already holds files this command did not write \(notes\.txt\)"):
        _load().main([*TINY, "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "speed.json")])
    assert [path.name for path in folder.iterdir()] == ["notes.txt"]
