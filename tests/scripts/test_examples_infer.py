"""examples/infer.py: the official Braco example's command line on a tiny checkpoint (CPU), and its refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INFER = REPO / "examples" / "infer.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(INFER), *args], capture_output=True, text=True, timeout=600, cwd=REPO)


@pytest.fixture(scope="module")
def stage2_folder(tmp_path_factory, tiny_llava_checkpoint) -> Path:
    """A Braco c2s5 full checkpoint in a folder named as the official layout names it (stage2, no 'llava')."""
    folder = tmp_path_factory.mktemp("run") / "stage2"
    folder.symlink_to(tiny_llava_checkpoint("braco_c2s5"))
    return folder


def test_answers_on_the_cpu_and_writes_the_official_json(stage2_folder, tiny_image_file, tmp_path) -> None:
    output = tmp_path / "answer.json"
    result = _run("--model-path", str(stage2_folder), "--image", str(tiny_image_file), "--question", "What is it?",
                  "--max-new-tokens", "4", "--device", "cpu", "--output", str(output))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(output.read_text())
    assert set(record) == {"model_path", "visual_tokens", "image", "question", "answer"}
    assert record["visual_tokens"] == 2 * 2 + 5  # C^2 + S of c2s5
    assert record["question"] == "What is it?" and record["image"] == str(tiny_image_file.resolve())
    assert result.stdout.strip() == record["answer"].strip()  # the answer is printed, logs go to stderr


def test_help_needs_no_model(tmp_path) -> None:
    result = _run("--help")
    assert result.returncode == 0 and "--model-path" in result.stdout and "--device" in result.stdout


@pytest.mark.parametrize("case", ["stage1", "plain-llm", "missing-image", "output-is-image", "cuda", "empty-question", "bad-temperature"])
def test_refusals_are_one_sentence(case, stage2_folder, tiny_projector_checkpoint, tiny_base_llm, tiny_image_file, tmp_path) -> None:
    args = {"--model-path": str(stage2_folder), "--image": str(tiny_image_file), "--device": "cpu"}
    expected = {
        "stage1": "holds no language-model weights (a stage-1 projector or LoRA folder)",
        "plain-llm": "is a plain language model (its config.json names no mm_vision_tower), so it cannot read images",
        "missing-image": "--image '/no/such.png' does not exist",
        "output-is-image": "is the same file as --image",
        "cuda": "--device cuda needs a GPU",
        "empty-question": "--question is empty",
        "bad-temperature": "--temperature must be a finite number >= 0",
    }[case]
    extra: list[str] = []
    if case == "stage1":
        args["--model-path"] = str(tiny_projector_checkpoint("braco_c2s5"))
    elif case == "plain-llm":
        args["--model-path"] = str(tiny_base_llm)
    elif case == "missing-image":
        args["--image"] = "/no/such.png"
    elif case == "output-is-image":
        extra = ["--output", str(tiny_image_file)]
    elif case == "cuda":
        pytest.importorskip("torch")
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
        args["--device"] = "cuda"
    elif case == "empty-question":
        extra = ["--question", " "]
    else:
        extra = ["--temperature", "-1"]
    before = tiny_image_file.read_bytes()
    result = _run(*[item for pair in args.items() for item in pair], *extra)
    assert result.returncode == 2, result.stderr[-2000:]
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert tiny_image_file.read_bytes() == before
