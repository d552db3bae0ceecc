"""``python -m llava.eval.model_vqa_loader`` on the Qwen2 × SigLIP pair (issue 12, "Done means"), with
``mlp2x_gelu`` and a Braco budget: one answer per question in upstream's JSONL fields, and batched greedy answers
equal to batch size 1 (left padding must not change what a ChatML prompt gets answered)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llava.conversation import template_for_model
from llava.eval import model_vqa_loader

from .conftest import BenchData, write_vqa_questions

FIELDS = ["question_id", "prompt", "text", "answer_id", "model_id", "metadata"]


def _argv(checkpoint: Path, questions: Path, images: Path, answers: Path, batch_size: int) -> list[str]:
    return [
        "--model-path", str(checkpoint), "--question-file", str(questions), "--image-folder", str(images),
        "--answers-file", str(answers), "--temperature", "0", "--conv-mode", "qwen_1_5", "--max_new_tokens", "8",
        "--batch-size", str(batch_size), "--device", "cpu",
    ]


def _answers(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("projector", ["mlp2x_gelu", "braco_c2s5"])
def test_batch_of_three_answers_like_batch_one(projector: str, tiny_qwen_siglip_checkpoint, bench_data: BenchData,
                                               tmp_path: Path) -> None:
    checkpoint = tiny_qwen_siglip_checkpoint(projector)
    assert template_for_model(checkpoint.name) == "qwen_1_5"
    questions = write_vqa_questions(tmp_path / "questions.jsonl", count=6)
    texts = {}
    for batch_size in (1, 3):
        out = tmp_path / f"bs{batch_size}.jsonl"
        result = model_vqa_loader.main(_argv(checkpoint, questions, bench_data.images, out, batch_size))
        lines = _answers(out)
        assert result.answered == len(lines) == 6
        assert all(list(line) == FIELDS and line["model_id"] == checkpoint.name for line in lines)
        texts[batch_size] = [(line["question_id"], line["text"]) for line in lines]
    assert [qid for qid, _ in texts[1]] == [json.loads(line)["question_id"] for line in questions.read_text().splitlines()]
    assert any(text for _, text in texts[1]), "all answers empty: the comparison would prove nothing"
    assert texts[3] == texts[1]


def test_module_entry_point_answers(tiny_qwen_siglip_checkpoint, bench_data: BenchData, tmp_path: Path) -> None:
    """The command a user types, as a subprocess, on the Braco checkpoint."""
    checkpoint = tiny_qwen_siglip_checkpoint("braco_c2s5")
    out = tmp_path / "answers.jsonl"
    argv = _argv(checkpoint, bench_data.vqa, bench_data.images, out, 3)
    done = subprocess.run([sys.executable, "-m", "llava.eval.model_vqa_loader", *argv], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [line["question_id"] for line in _answers(out)] == bench_data.vqa_ids
