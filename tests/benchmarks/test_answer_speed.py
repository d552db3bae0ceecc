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


def test_a_failing_setting_is_a_row_and_a_profiled_one_says_where_its_time_goes(tmp_path: Path, monkeypatch, capfd) -> None:
    """A fast path that fails (here its capture) costs its own row only; ``--profile-batches`` adds a profiler
    summary whose answer holds more work than its first token."""
    import llava.model.fast_flag as fast_flag

    real = fast_flag.use_fast

    def capture_fails(model, fast):
        if fast == "compile":
            raise RuntimeError("CUDA graph capture failed (operation not permitted when stream is capturing)")
        return real(model, fast)

    monkeypatch.setattr(fast_flag, "use_fast", capture_fails)
    result = _load().main([*TINY, "--profile-batches", "2", "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "s.json")])
    eager, failed = result["rows"]
    assert failed == {"projector": "mlp2x_gelu", "visual_tokens": 576, "fast": "compile", "batch": 2,
                      "error": "RuntimeError: CUDA graph capture failed (operation not permitted when stream is capturing)"}
    profile = eager["profile"]
    assert profile["first_token"]["kind"] == "aten ops" and 0 < profile["first_token"]["count"] < profile["answer"]["count"]
    assert profile["per_decode_step"]["count"] == (profile["answer"]["count"] - profile["first_token"]["count"]) / 2
    assert 0 < profile["answer"]["busy_ms"] and profile["answer"]["top"][0]["ms"] > 0
    out = capfd.readouterr()  # file descriptors: kineto writes its trace markers to descriptor 2 directly
    assert "| mlp2x_gelu | | 2 | compile | failed: RuntimeError: CUDA graph capture failed" in out.out
    assert "profile first_token: " in out.err and "USDT:" not in out.err


def test_the_busy_time_is_the_union_of_the_kernels_intervals() -> None:
    import random
    import sys

    sys.path.insert(0, str(BENCHMARKS))
    from profile_summary import _union_us

    rng = random.Random(0)
    for _ in range(200):
        spans = [(start, start + rng.randint(0, 30)) for start in (rng.randint(0, 200) for _ in range(rng.randint(0, 12)))]
        covered = {t for start, stop in spans for t in range(start, stop)}  # unit steps, counted directly
        assert _union_us(spans) == len(covered)


def test_first_difference_is_the_first_word_that_differs() -> None:
    first_difference = _load().first_difference
    assert first_difference("a cat on a mat", "a cat on the mat") == 3
    assert first_difference("dog", "cat") == 0
    assert first_difference("a cat", "a cat sat") == 2  # one answer stops early: it differs where it stops
