"""``python -m llava.serve.cli`` chats about an image from a scripted stdin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def test_cli_answers_scripted_turns(tiny_llava_checkpoint, tiny_image_file) -> None:
    checkpoint = tiny_llava_checkpoint("mlp2x_gelu")
    command = [
        sys.executable, "-m", "llava.serve.cli", "--model-path", str(checkpoint), "--image-file", str(tiny_image_file),
        "--device", "cpu", "--temperature", "0", "--max-new-tokens", "5", "--conv-mode", "vicuna_v1",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        command, input="What is in the image?\nAnd the colour?\n", capture_output=True, text=True, timeout=180,
        cwd=ROOT, env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert out.count("USER: ") == 3 and out.count("ASSISTANT: ") == 2  # two answered turns, then end of input
    assert out.rstrip().endswith("exit...")
    answers = [part.split("USER: ")[0] for part in out.split("ASSISTANT: ")[1:]]
    assert all(answer.strip() for answer in answers)


def test_cli_rejects_a_corrupt_image(tiny_llava_checkpoint, tmp_path, monkeypatch) -> None:
    from llava.serve import cli

    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    monkeypatch.setattr("sys.stdin", open(os.devnull))
    with pytest.raises(ValueError, match="is not a readable image"):
        cli.main(["--model-path", str(tiny_llava_checkpoint("mlp2x_gelu")), "--image-file", str(broken), "--device", "cpu"])


def test_cli_refuses_a_plain_language_model_before_loading_it(tiny_base_llm, tiny_image_file, tmp_path, monkeypatch) -> None:
    import shutil

    from llava.model import builder
    from llava.serve import cli

    folder = tmp_path / "llava-vicuna-text-only"  # named like LLaVA, but its config.json has no mm_vision_tower
    shutil.copytree(tiny_base_llm, folder)
    monkeypatch.setattr("sys.stdin", open(os.devnull))
    monkeypatch.setattr(builder, "load_pretrained_model", lambda *args, **kwargs: pytest.fail("loaded the model"))
    with pytest.raises(ValueError, match=r"is a plain language model \(its config\.json names no mm_vision_tower\)"):
        cli.main(["--model-path", str(folder), "--image-file", str(tiny_image_file), "--device", "cpu"])
