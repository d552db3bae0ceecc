"""Python entry points that upstream's users and tools call (issue 14): ``run_llava.eval_model`` on an
upstream-style args object, ``image_parser``/``load_images``, and ``eval_model``/``get_chunk``/``split_list``
in every ``model_vqa*`` module."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from llava.eval import model_vqa, model_vqa_loader, model_vqa_mmbench, model_vqa_qbench, model_vqa_science, run_llava
from llava.mm_utils import get_model_name_from_path

from .conftest import BenchData

LOADERS = [model_vqa, model_vqa_loader, model_vqa_mmbench, model_vqa_qbench, model_vqa_science]


@pytest.mark.parametrize("module", LOADERS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_split_list_and_get_chunk(module) -> None:
    for length in range(0, 12):
        items = list(range(length))
        for chunks in range(1, 6):
            size = math.ceil(length / chunks)
            expected = [items[i : i + size] for i in range(0, length, size)] if size else []
            assert module.split_list(items, chunks) == expected
            for index in range(chunks):
                assert module.get_chunk(items, chunks, index) == (expected[index] if index < len(expected) else [])


def _upstream_args(**fields):
    """An args object as upstream's README builds it: a class with attributes only (no device, no sep)."""
    return type("Args", (), fields)()


def test_run_llava_eval_model_with_upstream_args(tiny_llava_checkpoint, tiny_image_file, capsys) -> None:
    checkpoint = str(tiny_llava_checkpoint("mlp2x_gelu"))
    args = _upstream_args(model_path=checkpoint, model_base=None, model_name=get_model_name_from_path(checkpoint),
                          query="What is it?", conv_mode=None, image_file=str(tiny_image_file), sep=",",
                          temperature=0, top_p=None, num_beams=1, max_new_tokens=4)
    answer = run_llava.eval_model(args)
    cli = run_llava.main(["--model-path", checkpoint, "--image-file", str(tiny_image_file), "--query", "What is it?",
                          "--temperature", "0", "--max_new_tokens", "4", "--device", "cpu"])
    assert answer == cli
    parsed = run_llava.image_parser(_upstream_args(image_file=f"{tiny_image_file},{tiny_image_file}", sep=","))
    assert parsed == [str(tiny_image_file)] * 2
    assert [image.mode for image in run_llava.load_images(parsed)] == ["RGB", "RGB"]


def test_loader_eval_model_with_upstream_args(tiny_llava_checkpoint, bench_data: BenchData, tmp_path: Path) -> None:
    checkpoint = str(tiny_llava_checkpoint("mlp2x_gelu"))
    answers = tmp_path / "a.jsonl"
    args = _upstream_args(model_path=checkpoint, model_base=None, image_folder=str(bench_data.images),
                          question_file=str(bench_data.vqa), answers_file=str(answers), conv_mode="vicuna_v1",
                          num_chunks=1, chunk_idx=0, temperature=0, top_p=None, num_beams=1, max_new_tokens=3)
    model_vqa_loader.eval_model(args)
    cli = tmp_path / "cli.jsonl"
    model_vqa_loader.main(["--model-path", checkpoint, "--image-folder", str(bench_data.images), "--question-file",
                           str(bench_data.vqa), "--answers-file", str(cli), "--conv-mode", "vicuna_v1",
                           "--temperature", "0", "--max_new_tokens", "3"])
    texts = [(r["question_id"], r["text"]) for r in map(json.loads, answers.read_text().splitlines())]
    assert texts == [(r["question_id"], r["text"]) for r in map(json.loads, cli.read_text().splitlines())]
    assert [qid for qid, _ in texts] == bench_data.vqa_ids
