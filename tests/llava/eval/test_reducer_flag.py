"""``--reducer`` on the commands that generate: run_llava and the eval loaders run an in-LLM reducer on any
checkpoint (``mlp2x_gelu``, Braco-16), an unknown name is one sentence before anything loads, and an answers file made
under one reducer is not resumed under another."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llava.eval import model_vqa_loader, run_llava
from llava.model import reducers
from llava.utils import UserError

from .conftest import BenchData


@pytest.fixture
def reducer_calls(monkeypatch):
    calls = []
    real = reducers.set_reducer

    def recording(model, name):
        calls.append(name)
        real(model, name)
        return None

    monkeypatch.setattr("llava.model.builder.set_reducer", recording)
    return calls


@pytest.mark.parametrize("projector, reducer", [("mlp2x_gelu", "fastv_k1_r50"), ("braco_c3s7", "fastv_k1_r75"),
                                                ("mlp2x_gelu", "pyramiddrop_s1_r50")])
def test_run_llava_runs_a_reducer_on_any_projector(tiny_llava_checkpoint, tiny_image_file, reducer_calls, projector, reducer) -> None:
    argv = ["--model-path", str(tiny_llava_checkpoint(projector)), "--image-file", str(tiny_image_file), "--device", "cpu",
            "--temperature", "0", "--max_new_tokens", "4", "--query", "What is it?", "--reducer", reducer]
    assert isinstance(run_llava.main(argv), str)
    assert reducer_calls == [reducer]


def test_an_unknown_reducer_is_one_sentence_before_loading(tiny_llava_checkpoint, tiny_image_file, monkeypatch) -> None:
    monkeypatch.setattr("llava.model.builder.load_pretrained_model", lambda *a, **k: pytest.fail("loaded the model"))
    argv = ["--model-path", str(tiny_llava_checkpoint("mlp2x_gelu")), "--image-file", str(tiny_image_file),
            "--query", "What is it?", "--reducer", "fastv_k2"]
    with pytest.raises(UserError, match=r"^unknown reducer 'fastv_k2'.*known reducers: .*fastv_k\{K\}_r\{R\}.*or 'none'$"):
        run_llava.main(argv)


def test_a_loader_runs_and_records_the_reducer_and_refuses_to_resume_under_another(tiny_llava_checkpoint, bench_data: BenchData,
                                                                                    tmp_path: Path, reducer_calls) -> None:
    out = tmp_path / "answers.jsonl"
    base = ["--model-path", str(tiny_llava_checkpoint("braco_c3s7")), "--answers-file", str(out), "--temperature", "0",
            "--conv-mode", "vicuna_v1", "--max_new_tokens", "4", "--device", "cpu", "--question-file", str(bench_data.vqa),
            "--image-folder", str(bench_data.images)]
    result = model_vqa_loader.main([*base, "--reducer", "fastv_k1_r50"])
    assert result.answered == len(bench_data.vqa_ids)
    assert reducer_calls == ["fastv_k1_r50"]  # the model it answered with runs the reducer, not only the record
    meta = json.loads(Path(f"{out}.meta.json").read_text())
    assert meta["producer"]["reducer"] == "fastv_k1_r50"
    with pytest.raises(UserError, match=r"reducer 'fastv_k1_r50' -> 'pyramiddrop_s1_r50'"):
        model_vqa_loader.main([*base, "--reducer", "pyramiddrop_s1_r50"])
