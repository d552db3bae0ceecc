"""Every loader on a tiny LLaVA checkpoint (mlp2x_gelu and a Braco projector) through load_pretrained_model:
one well-formed answer per question, chunked runs merging to the same answers, batched greedy answers equal to
batch size 1, and a killed run that resumes with every question answered exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from llava.eval import core, model_vqa, model_vqa_loader, model_vqa_mmbench, model_vqa_science

from .conftest import BenchData, write_vqa_questions

FIELDS = ["question_id", "prompt", "text", "answer_id", "model_id", "metadata"]
MAX_NEW = "6"


@pytest.fixture(scope="module", params=["mlp2x_gelu", "braco_c2s5"])
def checkpoint(request: pytest.FixtureRequest, tiny_llava_checkpoint) -> Path:
    return tiny_llava_checkpoint(request.param)


@pytest.fixture(scope="module")
def generator(checkpoint: Path) -> core.LlavaGenerator:
    loaded, _ = core.load_generator(str(checkpoint), None, "vicuna_v1", "cpu")
    return loaded


def run(module: Any, argv: list[str], generator: core.LlavaGenerator | None = None) -> core.RunResult:
    factory = None if generator is None else (lambda args: (generator, "tiny"))
    return core.run_loader(module.SPEC, argv, generator_factory=factory)


def answers(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def common(checkpoint: Path, answers_file: Path, *extra: str) -> list[str]:
    return ["--model-path", str(checkpoint), "--answers-file", str(answers_file), "--temperature", "0",
            "--conv-mode", "vicuna_v1", "--max_new_tokens", MAX_NEW, "--device", "cpu", *extra]


def test_loader_main_loads_the_checkpoint(checkpoint: Path, bench_data: BenchData, tmp_path: Path) -> None:
    out = tmp_path / "answers.jsonl"
    result = model_vqa_loader.main(common(checkpoint, out, "--question-file", str(bench_data.vqa), "--image-folder", str(bench_data.images)))
    lines = answers(out)
    assert result.answered == len(lines) == len(bench_data.vqa_ids)
    assert [line["question_id"] for line in lines] == bench_data.vqa_ids
    for line in lines:
        assert list(line) == FIELDS and isinstance(line["text"], str)
        assert line["model_id"] == checkpoint.name and line["metadata"] == {}


def test_model_vqa_two_chunks_merge(checkpoint: Path, generator: core.LlavaGenerator, bench_data: BenchData, tmp_path: Path) -> None:
    argv = ["--question-file", str(bench_data.vqa), "--image-folder", str(bench_data.images)]
    run(model_vqa, common(checkpoint, tmp_path / "all.jsonl", *argv), generator)
    for index in range(2):
        run(model_vqa, common(checkpoint, tmp_path / f"2_{index}.jsonl", *argv, "--num-chunks", "2", "--chunk-idx", str(index)), generator)
    whole = answers(tmp_path / "all.jsonl")
    merged = answers(tmp_path / "2_0.jsonl") + answers(tmp_path / "2_1.jsonl")
    assert len(answers(tmp_path / "2_0.jsonl")) == 3
    assert [(a["question_id"], a["text"]) for a in merged] == [(a["question_id"], a["text"]) for a in whole]


def test_science_loader(checkpoint: Path, generator: core.LlavaGenerator, bench_data: BenchData, tmp_path: Path) -> None:
    out = tmp_path / "sqa.jsonl"
    run(model_vqa_science, common(checkpoint, out, "--question-file", str(bench_data.science), "--image-folder",
                                  str(bench_data.images), "--single-pred-prompt", "--batch-size", "4"), generator)
    lines = answers(out)
    assert [line["question_id"] for line in lines] == [str(1000 + i) for i in range(5)]
    assert all(list(line) == FIELDS for line in lines)
    assert [line["prompt"].startswith("<image>\n") for line in lines] == [True, True, True, False, False]


def test_mmbench_loader(checkpoint: Path, generator: core.LlavaGenerator, bench_data: BenchData, tmp_path: Path) -> None:
    out = tmp_path / "mmb.jsonl"
    run(model_vqa_mmbench, common(checkpoint, out, "--question-file", str(bench_data.mmbench), "--single-pred-prompt"), generator)
    lines = answers(out)
    assert [line["question_id"] for line in lines] == [10, 11, 12, 13]
    assert list(lines[0]) == ["question_id", "round_id", "prompt", "text", "options", "option_char", "answer_id", "model_id", "metadata"]
    assert lines[1]["options"] == ["yes", "no"] and lines[1]["option_char"] == ["A", "B"]


def test_batched_greedy_equals_batch_size_one(checkpoint: Path, generator: core.LlavaGenerator, bench_data: BenchData, tmp_path: Path) -> None:
    questions = write_vqa_questions(tmp_path / "questions.jsonl", count=8)
    texts = {}
    for batch_size in ("1", "4"):
        out = tmp_path / f"bs{batch_size}.jsonl"
        run(model_vqa_loader, common(checkpoint, out, "--question-file", str(questions), "--image-folder",
                                     str(bench_data.images), "--batch-size", batch_size, "--max_new_tokens", "12"), generator)
        texts[batch_size] = [(line["question_id"], line["text"]) for line in answers(out)]
    assert any(text for _, text in texts["1"]), "all answers empty: the comparison would prove nothing"
    assert texts["4"] == texts["1"]


def test_reading_ahead_gives_the_answers_of_reading_in_turn(checkpoint: Path, generator: core.LlavaGenerator,
                                                            bench_data: BenchData, tmp_path: Path) -> None:
    """The loop's background reading (images preprocessed on the CPU in the model's dtype, moved when the batch
    runs) answers as preprocessing inside ``generate`` does, with the real model, batch by batch."""
    from llava.eval.items import EvalItem, ImageRef

    names = sorted(path.name for path in bench_data.images.iterdir() if path.suffix in (".png", ".jpg"))[:4]
    items = [EvalItem(question_id=index, question="What is in the image?", prompt=str(index),
                      images=(ImageRef(str(bench_data.images / name)),)) for index, name in enumerate(names)]
    texts = {}
    for prefetch in (False, True):
        out = tmp_path / f"prefetch-{prefetch}.jsonl"
        core.run_items(items, out, lambda: (generator, "tiny"), core.GenerationConfig(temperature=0, max_new_tokens=8),
                       model_id="tiny", batch_size=2, prefetch=prefetch)
        texts[prefetch] = [line["text"] for line in answers(out)]
    assert len(texts[True]) == len(names) and any(texts[True]), "nothing to compare"
    assert texts[True] == texts[False]
    images = [[ImageRef(str(bench_data.images / name)).load()] for name in names[:2]]
    config = core.GenerationConfig(temperature=0, max_new_tokens=8)
    questions = ["What is in the image?"] * 2
    modes: list[bool] = []
    hook = generator.model.get_output_embeddings().register_forward_pre_hook(lambda *_: modes.append(torch.is_inference_mode_enabled()))
    try:
        assert generator.generate(questions, images, config, visuals=generator.prepare_visuals(images)) == \
            generator.generate(questions, images, config)
    finally:
        hook.remove()
    assert modes and all(modes)  # generate runs under inference mode (no autograd record of the answers)


def test_interrupted_run_resumes(checkpoint: Path, generator: core.LlavaGenerator, bench_data: BenchData, tmp_path: Path) -> None:
    questions = write_vqa_questions(tmp_path / "questions.jsonl", count=8)
    argv = common(checkpoint, tmp_path / "answers.jsonl", "--question-file", str(questions), "--image-folder", str(bench_data.images), "--batch-size", "2")
    reference = tmp_path / "reference.jsonl"
    run(model_vqa_loader, [*argv[:3], str(reference), *argv[4:]], generator)

    class Interrupting:
        """The real generator, interrupted on its third call."""

        def __init__(self) -> None:
            self.calls = 0

        def generate(self, *args: Any, **kwargs: Any) -> list[str]:
            self.calls += 1
            if self.calls == 3:
                raise KeyboardInterrupt
            return generator.generate(*args, **kwargs)

    interrupting = Interrupting()
    with pytest.raises(KeyboardInterrupt):
        core.run_loader(model_vqa_loader.SPEC, argv, generator_factory=lambda args: (interrupting, "tiny"))
    out = tmp_path / "answers.jsonl"
    assert len(answers(out)) == 4
    with out.open("a") as handle:
        handle.write('{"question_id": 4, "prompt": "What colo')  # killed in the middle of a write
    result = run(model_vqa_loader, argv, generator)
    assert (result.already_answered, result.answered) == (4, 4)
    lines = answers(out)
    assert sorted(map(str, (line["question_id"] for line in lines))) == sorted(map(str, (line["question_id"] for line in answers(reference))))
    assert len(lines) == 8
    assert [(line["question_id"], line["text"]) for line in lines] == [(line["question_id"], line["text"]) for line in answers(reference)]


def test_killed_subprocess_resumes(checkpoint: Path, generator: core.LlavaGenerator, bench_data: BenchData, tmp_path: Path) -> None:
    if checkpoint.name.endswith("braco_c2s5"):
        pytest.skip("one projector is enough for the subprocess kill")
    questions = write_vqa_questions(tmp_path / "questions.jsonl", count=40)
    out = tmp_path / "answers.jsonl"
    argv = common(checkpoint, out, "--question-file", str(questions), "--image-folder", str(bench_data.images), "--max_new_tokens", "24")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    process = subprocess.Popen([sys.executable, "-m", "llava.eval.model_vqa_loader", *argv], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and process.poll() is None:
        if out.exists() and out.read_text().count("\n") >= 3:
            break
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    written = out.read_text().count("\n")
    assert 3 <= written < 40, f"the run was not stopped part-way ({written} answers)"
    result = run(model_vqa_loader, argv, generator)
    assert result.already_answered == written and result.answered == 40 - written
    ids = [line["question_id"] for line in answers(out)]
    assert len(ids) == len(set(map(str, ids))) == 40
