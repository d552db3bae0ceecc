"""Command-line modules: an expected user error prints one line (no traceback) and exits non-zero, while a
bug keeps its traceback (issue 14, item 13)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llava.utils import UserError, cli_main, is_user_error

from .eval.images_faults import over_limit

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("LLAVA_TRACEBACK", None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _cases(tmp: Path) -> list[tuple[list[str], str]]:
    answers = tmp / "a.jsonl"
    answers.write_text('{"question_id": 1, "text": "yes", "prompt": "q"}\n')
    foreign = tmp / "playground"
    (foreign / "data").mkdir(parents=True)
    bomb = tmp / "bomb.png"
    bomb.write_bytes(over_limit())
    return [
        (["-m", "llava.eval.eval_pope", "--annotation-dir", str(tmp), "--question-file", str(tmp / "none.jsonl"),
          "--result-file", str(answers)], "does not exist"),
        (["-m", "llava.eval.model_vqa_loader", "--question-file", str(tmp / "none.jsonl")], "does not exist"),
        ([str(REPO / "scripts" / "convert_gqa_for_eval.py"), "--src", str(answers), "--dst", str(answers)], "same file"),
        (["-m", "llava.quickstart", "--out", str(foreign)], "was not created by the quickstart"),
        (["-m", "llava.eval.summarize", str(tmp / "missing.json")], "missing.json"),
        (["-m", "llava.serve.cli", "--model-path", str(tmp / "no-model"), "--image-file", str(bomb)], "decompression bomb"),
        (["-m", "llava.eval.run_llava", "--model-path", str(tmp / "no-model"), "--image-file", str(bomb), "--query", "q"],
         "decompression bomb"),
    ]


def test_user_errors_print_one_line(tmp_path: Path) -> None:
    for args, expected in _cases(tmp_path):
        result = _run(args, tmp_path)
        lines = [line for line in result.stderr.splitlines() if line.strip() and "|" not in line]  # log records aside
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)
        assert len(lines) == 1 and "error:" in lines[0] and expected in lines[0], (args, result.stderr)


def test_traceback_on_request(tmp_path: Path) -> None:
    answers = tmp_path / "a.jsonl"
    answers.write_text("{}\n")
    env_args = [str(REPO / "scripts" / "convert_gqa_for_eval.py"), "--src", str(answers), "--dst", str(answers)]
    os.environ["LLAVA_TRACEBACK"] = "1"
    try:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        result = subprocess.run([sys.executable, *env_args], env=env, capture_output=True, text=True, timeout=120)
    finally:
        del os.environ["LLAVA_TRACEBACK"]
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_library_value_errors_are_bugs_and_keep_their_traceback(capsys: pytest.CaptureFixture) -> None:
    def buggy(argv):
        np.zeros(3).reshape(2, 2)  # a ValueError raised inside numpy, not a message of ours

    with pytest.raises(ValueError):
        cli_main(buggy)

    def bad_input(argv):
        from llava.eval.core import get_chunk

        get_chunk([1, 2], 0, 0)  # our own ValueError: a sentence for the user

    assert cli_main(bad_input) == 2
    assert capsys.readouterr().err.strip().endswith("error: --num-chunks must be at least 1, got 0")
    assert is_user_error(UserError("x")) and is_user_error(FileNotFoundError("x"))
    assert not is_user_error(RuntimeError("x")) and not is_user_error(KeyError("x"))
