"""Upstream's scripts/ entry points: ScienceQA conversion, projector extraction and LoRA merging (issue 14)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROBLEMS = {
    "7": {"question": "Which is a mammal?", "hint": "", "choices": ["frog", "dog"], "answer": 1, "image": None,
          "lecture": "Mammals have fur.", "solution": "A dog has fur.", "caption": "", "split": "train"},
    "9": {"question": "What colour is the sky?", "hint": "Look up.", "choices": ["blue", "green", "red"], "answer": 0,
          "image": "image.png", "lecture": "", "solution": "The sky is blue.", "caption": "a sky", "split": "train"},
}


@pytest.fixture
def sqa_dir(tmp_path: Path) -> Path:
    (tmp_path / "problems.json").write_text(json.dumps(PROBLEMS))
    (tmp_path / "pid_splits.json").write_text(json.dumps({"train": ["7", "9"], "test": ["9"]}))
    return tmp_path


def test_convert_sqa_to_llava(sqa_dir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SCRIPTS.parent)}
    subprocess.run([sys.executable, str(SCRIPTS / "convert_sqa_to_llava.py"), "convert_to_llava", "--base-dir", str(sqa_dir),
                    "--prompt-format", "QCM-LEA", "--split", "train"], check=True, env=env, capture_output=True, timeout=120)
    records = json.loads((sqa_dir / "llava_train_QCM-LEA.json").read_text())
    assert records == [
        {"id": "7", "conversations": [
            {"from": "human", "value": "Which is a mammal?\nContext: N/A\nOptions: (A) frog (B) dog"},
            {"from": "gpt", "value": "Mammals have fur. A dog has fur. The answer is B."}]},
        {"id": "9", "image": "9/image.png", "conversations": [
            {"from": "human", "value": "What colour is the sky?\nContext: Look up.\nOptions: (A) blue (B) green (C) red\n<image>"},
            {"from": "gpt", "value": "The sky is blue. The answer is A."}]},  # empty lecture: the double space collapses
    ]


def test_sqa_prompt_formats(sqa_dir: Path) -> None:
    module = _script("convert_sqa_to_llava")
    path = module.convert_to_jsonl(str(sqa_dir), "test")  # default QCM-LEPA
    [line] = [json.loads(text) for text in path.read_text().splitlines()]
    assert line == {"id": "9", "image": "9/image.png",
                    "instruction": "What colour is the sky?\nContext: Look up.\nOptions: (A) blue (B) green (C) red\n<image>",
                    "output": "SOLUTION: The sky is blue.\n###\nANSWER: A."}
    base = _script("convert_sqa_to_llava_base_prompt")
    source, target = base.create_one_example_chatbot("QCLM-AL", "Q?", "C.", "(A) x", "A", "Lec.", "Sol.", test_example=False)
    assert (source, target) == ("Question: Q?\nContext: C.\nBECAUSE: Lec.\nOptions: (A) x", "Answer: The answer is A. BECAUSE: Sol.")
    assert base.create_one_example_chatbot("CQM-A", "Q?", "C.", "(A) x", "A", "", "", test_example=True) == (
        "Context: C.\nQuestion: Q?\nOptions: (A) x", "Answer:")
    with pytest.raises(ValueError, match="unknown prompt format 'QQ-A'"):
        base.create_one_example_chatbot("QQ-A", "", "", "", "A", "", "")
    with pytest.raises(ValueError, match="unknown ScienceQA split 'dev'"):
        module.convert_to_llava(str(sqa_dir), "dev")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("lecture", None, "problem '9' has no 'lecture' field"),
    ("answer", "A", "problem '9': 'answer' must be an integer, got 'A'"),
])
def test_sqa_problem_without_a_prompt_field_is_one_sentence(sqa_dir: Path, field: str, value, message: str) -> None:
    problems = json.loads(json.dumps(PROBLEMS))
    if value is None:
        del problems["9"][field]
    else:
        problems["9"][field] = value
    (sqa_dir / "problems.json").write_text(json.dumps(problems))
    with pytest.raises(ValueError, match=message):
        _script("convert_sqa_to_llava").convert_to_llava(str(sqa_dir), "test")
    assert sorted(path.name for path in sqa_dir.iterdir()) == ["pid_splits.json", "problems.json"]


def test_extract_mm_projector(tiny_llava_checkpoint, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    checkpoint = tiny_llava_checkpoint("mlp2x_gelu")
    output = tmp_path / "mm_projector.bin"
    _script("extract_mm_projector").main(["--model-path", str(checkpoint), "--output", str(output)])
    saved = torch.load(output, weights_only=True)
    everything = {}
    for shard in checkpoint.glob("*.safetensors"):
        everything.update(load_file(str(shard)))
    expected = {key: value for key, value in everything.items() if "mm_projector" in key}
    assert sorted(saved) == sorted(expected) == [f"model.mm_projector.{i}.{p}" for i in (0, 2) for p in ("bias", "weight")]
    assert all(torch.equal(saved[key], expected[key]) for key in expected)
    empty = tmp_path / "empty"  # (tmp_path itself now holds mm_projector.bin: a stage-1 folder, which extracts)
    empty.mkdir()
    with pytest.raises(ValueError, match="holds no .*weights"):
        _script("extract_mm_projector").main(["--model-path", str(empty), "--output", str(tmp_path / "x.bin")])


def test_merge_lora_weights_saves_a_checkpoint_that_loads_alone(tiny_llava_checkpoint, tmp_path: Path) -> None:
    from llava.model.builder import load_pretrained_model

    checkpoint = tiny_llava_checkpoint("mlp2x_gelu")
    merge = _script("merge_lora_weights")
    with pytest.raises(ValueError, match="is the same folder as --model-path"):
        merge.main(["--model-path", str(checkpoint), "--save-model-path", str(checkpoint)])
    target = tmp_path / "llava-merged"
    merge.main(["--model-path", str(checkpoint), "--save-model-path", str(target)])
    _, original, _, _ = load_pretrained_model(str(checkpoint), None, checkpoint.name, device_map="cpu", device="cpu")
    _, merged, _, _ = load_pretrained_model(str(target), None, target.name, device_map="cpu", device="cpu")
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        assert torch.allclose(original(input_ids=ids).logits, merged(input_ids=ids).logits)
