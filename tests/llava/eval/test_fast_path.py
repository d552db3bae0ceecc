"""``--fast compile`` through the commands users run gives the answers ``--fast none`` gives, token for token.

One loader run compiles with inductor (the real ``torch.compile`` path, batch 2 with prompts of unequal length);
the other commands trace with dynamo and run the traced steps with the ``eager`` backend
(``LLAVA_FAST_COMPILE_BACKEND=eager``: the same graphs and state, no kernel compilation), which keeps the suite's
compile time small. ``--fast cudagraph`` on the CPU is one sentence from every command.
"""

from __future__ import annotations

import base64
import io
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from llava.eval import model_vqa_loader, run_llava
from llava.model.fast_generation import COMPILE_BACKEND_VARIABLE
from llava.utils import UserError


@pytest.fixture()
def traced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(COMPILE_BACKEND_VARIABLE, "eager")


def _loader_answers(checkpoint: Path, bench_data, out: Path, fast: str, *extra: str) -> list[tuple]:
    out.mkdir(parents=True, exist_ok=True)
    answers = out / f"answers-{fast}.jsonl"
    model_vqa_loader.main([
        "--model-path", str(checkpoint), "--question-file", str(bench_data.vqa), "--image-folder", str(bench_data.images),
        "--answers-file", str(answers), "--temperature", "0", "--max_new_tokens", "12", "--device", "cpu",
        "--fast", fast, *extra,
    ])
    records = [json.loads(line) for line in answers.read_text().splitlines()]
    return [(record["question_id"], record["text"]) for record in records]


def test_loader_compiled_by_inductor_answers_as_eager_in_batches(tiny_llava_checkpoint, bench_data, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(COMPILE_BACKEND_VARIABLE, raising=False)
    checkpoint = tiny_llava_checkpoint("mlp2x_gelu")
    eager = _loader_answers(checkpoint, bench_data, tmp_path, "none", "--batch-size", "2")
    fast = _loader_answers(checkpoint, bench_data, tmp_path, "compile", "--batch-size", "2")
    assert len(eager) == len(bench_data.vqa_ids) and fast == eager


@pytest.mark.parametrize(("projector", "batch"), [
    ("mlp2x_gelu", "1"),
    pytest.param("braco_c3s7", "3", id="braco_c3s7"),
    pytest.param("prumerge", "2", id="prumerge-adaptive"),
])
def test_loader_answers_as_eager(tiny_llava_checkpoint, bench_data, tmp_path, traced, caplog, projector, batch) -> None:
    checkpoint = tiny_llava_checkpoint(projector)
    eager = _loader_answers(checkpoint, bench_data, tmp_path, "none", "--batch-size", batch)
    with caplog.at_level(logging.INFO, logger="llava.model.fast_generation"):
        fast = _loader_answers(checkpoint, bench_data, tmp_path, "compile", "--batch-size", batch)
    assert fast == eager
    if projector == "mlp2x_gelu":  # --fast changes no answer, so answers made eagerly resume on the fast path
        before = (tmp_path / "answers-none.jsonl").read_text()
        model_vqa_loader.main(["--model-path", str(checkpoint), "--question-file", str(bench_data.vqa), "--image-folder",
                               str(bench_data.images), "--answers-file", str(tmp_path / "answers-none.jsonl"),
                               "--temperature", "0", "--max_new_tokens", "12", "--device", "cpu", "--fast", "compile"])
        assert (tmp_path / "answers-none.jsonl").read_text() == before
    said = [record.getMessage() for record in caplog.records if "run eagerly" in record.getMessage()]
    if projector == "prumerge":  # its token count depends on the image: tower and projector eager, the LLM compiled
        assert said == ["--fast compile: the projector's token count depends on the image, so the vision tower and "
                        "projector run eagerly (the language model is still captured)"]
    else:
        assert said == []


def _clip() -> np.ndarray:
    frames = np.zeros((8, 32, 48, 3), dtype=np.uint8)
    for index in range(8):
        frames[index, 8:20, 3 * index : 3 * index + 12] = 255
    return frames


def test_run_llava_answers_as_eager_about_images_and_a_video(tiny_llava_checkpoint, tiny_image_file, tmp_path, traced) -> None:
    from llava.video import write_video

    clip = tmp_path / "clip.mp4"
    write_video(clip, _clip(), fps=4)
    base = ["--model-path", str(tiny_llava_checkpoint("mlp2x_gelu")), "--device", "cpu", "--temperature", "0",
            "--max_new_tokens", "10", "--conv-mode", "vicuna_v1"]
    for visual in (["--image-file", f"{tiny_image_file},{tiny_image_file}", "--query", "Same?"],
                   ["--video-file", str(clip), "--frames-upbound", "4", "--query", "Where does it move?"]):
        answers = {fast: run_llava.main([*base, *visual, "--fast", fast]) for fast in ("none", "compile")}
        assert answers["compile"] == answers["none"]


def test_worker_streams_what_eager_streams(tiny_llava_checkpoint, traced) -> None:
    """The worker's (and the demo's) streamed chunks, greedy and cut at a stop string, are the eager ones."""
    from llava.serve.engine import ModelEngine

    from ..serve.conftest import png_bytes

    prompt = "USER: <image>\nWhat is shown in the image? ASSISTANT:"
    image = base64.b64encode(png_bytes((40, 30))).decode()
    streams = {}
    for fast in ("none", "compile"):
        engine = ModelEngine.load(str(tiny_llava_checkpoint("mlp2x_gelu")), device="cpu", fast=fast)
        for params in ({"max_new_tokens": 16}, {"max_new_tokens": 16, "stop": "</s>"}):
            chunks = list(engine.generate_stream({"prompt": prompt, "images": [image], "temperature": 0.0, **params}))
            assert all(chunk.ok for chunk in chunks), chunks
            streams.setdefault(fast, []).append([chunk.text for chunk in chunks])
    assert streams["compile"] == streams["none"]


def test_cli_chats_as_eager(tiny_llava_checkpoint, tiny_image_file, traced, monkeypatch, capsys) -> None:
    from llava.serve import cli

    outputs = {}
    for fast in ("none", "compile"):
        monkeypatch.setattr("sys.stdin", io.StringIO("What is in the image?\nAnd the colour?\n"))
        cli.main(["--model-path", str(tiny_llava_checkpoint("mlp2x_gelu")), "--image-file", str(tiny_image_file),
                  "--device", "cpu", "--temperature", "0", "--max-new-tokens", "6", "--conv-mode", "vicuna_v1", "--fast", fast])
        outputs[fast] = capsys.readouterr().out
    assert outputs["compile"] == outputs["none"] and outputs["none"].count("ASSISTANT: ") == 2


def test_cudagraph_on_the_cpu_is_one_sentence_from_every_command(tiny_llava_checkpoint, tiny_image_file, bench_data, tmp_path) -> None:
    from llava.serve import cli, demo, model_worker

    checkpoint = str(tiny_llava_checkpoint("mlp2x_gelu"))
    sentence = r"^--fast cudagraph needs a CUDA device, got --device cpu; use --fast compile or none$"
    model = ["--model-path", checkpoint, "--device", "cpu", "--fast", "cudagraph"]
    commands = [
        lambda: model_vqa_loader.main([*model, "--question-file", str(bench_data.vqa), "--image-folder",
                                       str(bench_data.images), "--answers-file", str(tmp_path / "a.jsonl")]),
        lambda: run_llava.main([*model, "--image-file", str(tiny_image_file), "--query", "What?"]),
        lambda: cli.main([*model, "--image-file", str(tiny_image_file)]),
        lambda: model_worker.main([*model, "--no-register"]),
        lambda: demo.main([*model], block=False),
    ]
    for command in commands:
        with pytest.raises(UserError, match=sentence):
            command()
    assert not (tmp_path / "a.jsonl").exists()


def test_examples_infer_and_quickstart_take_the_flag(tiny_llava_checkpoint, tiny_image_file, tmp_path) -> None:
    import importlib.util

    from llava.quickstart import run as quickstart

    spec = importlib.util.spec_from_file_location("infer", Path(__file__).resolve().parents[3] / "examples" / "infer.py")
    infer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(infer)
    with pytest.raises(UserError, match=r"^--fast cudagraph needs a CUDA device, got --device cpu"):
        infer.main(["--model-path", str(tiny_llava_checkpoint("mlp2x_gelu")), "--image", str(tiny_image_file),
                    "--device", "cpu", "--fast", "cudagraph"])
    with pytest.raises(ValueError, match=r"^--fast cudagraph needs a CUDA device, got --device cpu"):
        quickstart.main(["--out", str(tmp_path / "qs"), "--fast", "cudagraph"])
    assert not (tmp_path / "qs").exists()
    flags = quickstart.answer_flags(Path("ckpt"), quickstart.DatasetFiles(*[Path("x")] * 6), Path("a.jsonl"), "vicuna_v1", "compile")
    assert flags[-2:] == ["--fast", "compile"] and "--fast" not in quickstart.answer_flags(
        Path("ckpt"), quickstart.DatasetFiles(*[Path("x")] * 6), Path("a.jsonl"), "vicuna_v1")
