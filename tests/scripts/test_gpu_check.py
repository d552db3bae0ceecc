"""``scripts/gpu/check.sh``: its exit status says whether every step passed (M10), and its output folder follows
the project's rule (a folder of someone else's files is refused untouched). ``python3`` is a stub here, so nothing
is installed and no GPU is needed; each run takes well under a second."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CHECK = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "check.sh"


def _run(tmp_path: Path, out: Path, python_exit: int) -> subprocess.CompletedProcess:
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    (stubs / "python3").write_text(f"#!/bin/sh\nexit {python_exit}\n")
    (stubs / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "OUT": str(out), "GPU_CHECK_STEPS": "tests",
           "GPU_CHECK_BUDGET_S": "120"}
    return subprocess.run(["bash", str(CHECK)], env=env, capture_output=True, text=True, timeout=60)


def test_a_failed_step_makes_the_script_fail(tmp_path: Path) -> None:
    # M10: every step said FAILED, but the script (and `make gpu-check`) exited 0.
    result = _run(tmp_path, tmp_path / "gpu", python_exit=3)
    summary = (tmp_path / "gpu" / "summary.txt").read_text()
    assert result.returncode == 1
    # the offline install, the entry-point check and the tests
    assert "FAILED   GPU tests (exit 3" in summary and "3 step(s) did not pass" in summary


def test_every_step_passing_exits_zero_and_marks_the_folder(tmp_path: Path) -> None:
    result = _run(tmp_path, tmp_path / "gpu", python_exit=0)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED   GPU tests" in (tmp_path / "gpu" / "summary.txt").read_text()
    assert (tmp_path / "gpu" / ".llava-output").is_file()  # `make clean` may remove it
    assert _run(tmp_path, tmp_path / "gpu", python_exit=0).returncode == 0  # its own folder: reused


def test_a_folder_of_someone_elses_files_is_refused_untouched(tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.mkdir()
    (out / "summary.txt").write_text("my own notes")
    result = _run(tmp_path, out, python_exit=0)
    assert result.returncode == 2 and "already holds files this script did not write" in result.stderr
    assert (out / "summary.txt").read_text() == "my own notes" and sorted(p.name for p in out.iterdir()) == ["summary.txt"]


def test_an_out_that_is_a_file_is_refused_untouched(tmp_path: Path) -> None:
    # The script used to go on (mkdir failing), install, and exit 0 with no summary written anywhere.
    out = tmp_path / "results.txt"
    out.write_text("my own notes")
    result = _run(tmp_path, out, python_exit=0)
    assert result.returncode == 2 and "is a file, not a folder" in result.stderr, result.stdout + result.stderr
    assert out.read_text() == "my own notes"


@pytest.mark.skipif(not Path("/usr/bin/make").exists() and not Path("/bin/make").exists(), reason="make is not installed")
def test_make_clean_removes_only_the_projects_outputs(tmp_path: Path) -> None:
    # M14: `make clean` ran `rm -rf outputs` and deleted the user's own results with it.
    root = tmp_path / "repo"
    root.mkdir()
    (root / "Makefile").write_text((CHECK.parents[2] / "Makefile").read_text())
    outputs = root / "outputs"
    for name, marker in (("quickstart", ".llava-quickstart"), ("gpu", ".llava-output"), ("merged", ".llava-output"),
                         ("demo", "demo.png"), ("my-own-results", "notes.txt")):
        (outputs / name).mkdir(parents=True)
        (outputs / name / marker).write_text("x")
    (outputs / "demo" / "demo.json").write_text("{}")
    (outputs / "my-own-results" / "demo.png").write_text("mine")
    (outputs / "bench_boundary.json").write_text("{}")
    (outputs / "mine.txt").write_text("mine")
    (root / ".venv").mkdir()
    result = subprocess.run(["make", "-s", "clean"], cwd=root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in outputs.iterdir()) == ["mine.txt", "my-own-results"]
    assert sorted(p.name for p in (outputs / "my-own-results").iterdir()) == ["demo.png", "notes.txt"]
    assert not (root / ".venv").exists() and "kept outputs/my-own-results" in result.stdout


def test_the_fast_path_steps_run_time_boxed_and_are_summed_up(tmp_path: Path) -> None:
    """Issues 29 and 33's steps run in the order a 15-minute device needs them, whatever order they are named in:
    the fast path's GPU tests, answering at batch 1, the prefill against the peak, then (a second call) batch 8 and
    32, the cost tables and the other GPU tests; each in the summary."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "python3").write_text('#!/bin/sh\necho "python3 $*" >> "$OUT/calls.txt"\nexit 0\n')
    (stubs / "python3").chmod(0o755)
    out = tmp_path / "gpu"
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "OUT": str(out),
           "GPU_CHECK_STEPS": "tests cost-reducers cost answer-batch bench answer fast", "GPU_CHECK_BUDGET_S": "1000",
           "GPU_ANSWER_ARGS": "--device cpu --layers 1", "GPU_BENCH_ARGS": "--batch-sizes 32 --fast none"}
    result = subprocess.run(["bash", str(CHECK)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = (out / "summary.txt").read_text()
    for name in ("GPU fast-path tests", "answering speed (answer_speed)", "GPU prefill benchmarks",
                 "answering speed (answer_speed_batch)", "braco cost, every projector type at K = 16",
                 "braco cost, the in-LLM reducers", "GPU tests"):
        assert f"PASSED   {name} (" in summary
    calls = [line for line in (out / "calls.txt").read_text().splitlines()  # the steps' commands, in order
             if any(marker in line for marker in ("-m pytest", "benchmarks/", "braco_patch.cli"))]
    assert calls[0].endswith("-m pytest -q -m gpu tests/gpu/test_fast_generation.py -rs --junitxml " f"{out}/gpu_fast.xml")
    # the answer steps stop starting settings 30 s before their time box (170 s and 150 s)
    assert calls[1].endswith(f"--device cpu --layers 1 --budget-s 140 --batch-sizes 1 --profile-batches 1 --out {out}/answer_speed.json")
    assert calls[2].endswith(f"benchmarks/gpu_prefill.py --batch-sizes 32 --fast none --out {out}/gpu_bench.json")
    assert "--budget-s 120 --batch-sizes 8 32 --profile-batches 32 --projectors braco_c3s7 mlp2x_gelu prumerge_k16" in calls[3]
    assert "--projector all --budgets 16" in calls[4] and "--reducer fastv_k2_r50" in calls[5]
    assert "--ignore tests/gpu/test_fast_generation.py" in calls[6] and len(calls) == 7
