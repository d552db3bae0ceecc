"""The shell layer of ``scripts/v1_5/eval``: every script parses, sources ``common.sh``, and the chunked
answering loop runs the real loader once per listed device and merges the chunks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BenchData

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts" / "v1_5" / "eval"
BENCHMARK_SCRIPTS = sorted(p for p in SCRIPTS.glob("*.sh") if p.name != "common.sh")


@pytest.mark.parametrize("script", BENCHMARK_SCRIPTS, ids=lambda p: p.name)
def test_script_parses_and_uses_the_shared_settings(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert 'source "$(dirname "$0")/common.sh"' in text
    assert "MODEL_PATH=" not in text, "model settings belong in common.sh"


def test_common_settings_follow_the_environment() -> None:
    env = {**os.environ, "MODEL_PATH": "/ckpts/llava-v1.5-7b-braco_c3s7", "BATCH_SIZE": "4", "MODEL_BASE": "/base"}
    env.pop("CKPT", None)
    out = subprocess.run(
        ["bash", "-c", f'source {SCRIPTS / "common.sh"}; echo "$CKPT"; echo "$RESULTS"; printf "%s\\n" "${{MODEL_ARGS[@]}}"'],
        env=env, check=True, capture_output=True, text=True,
    ).stdout.splitlines()
    assert out[0] == "llava-v1.5-7b-braco_c3s7"
    assert out[1] == "./playground/data/eval/results/llava-v1.5-7b-braco_c3s7"
    assert out[2:] == ["--model-path", "/ckpts/llava-v1.5-7b-braco_c3s7", "--model-base", "/base", "--temperature", "0",
                       "--conv-mode", "vicuna_v1", "--batch-size", "4"]
    env["OVERWRITE"] = "1"  # answer again after the checkpoint or the settings changed
    env["LOADER_ARGS"] = "--device cpu  --projector-setting mm_mqt_num_tokens=8"  # more loader flags, split at spaces
    args = subprocess.run(["bash", "-c", f'source {SCRIPTS / "common.sh"}; printf "%s\\n" "${{MODEL_ARGS[@]}}"'],
                          env=env, check=True, capture_output=True, text=True).stdout.splitlines()
    assert args[-5:] == ["--overwrite", "--device", "cpu", "--projector-setting", "mm_mqt_num_tokens=8"]


def test_answer_in_chunks_runs_one_loader_per_device_and_merges(tiny_llava_checkpoint, bench_data: BenchData, tmp_path: Path) -> None:
    checkpoint = tiny_llava_checkpoint("mlp2x_gelu")
    answers = tmp_path / "answers"
    env = {**os.environ, "MODEL_PATH": str(checkpoint), "CUDA_VISIBLE_DEVICES": "0,1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = f'source {SCRIPTS / "common.sh"}; MODEL_ARGS+=(--device cpu --max_new_tokens 4); ' \
              f'answer_in_chunks {bench_data.vqa} {bench_data.images} {answers}'
    subprocess.run(["bash", "-c", command], env=env, check=True, capture_output=True, cwd=tmp_path, timeout=600)
    chunks = [[json.loads(line) for line in (answers / f"2_{i}.jsonl").read_text().splitlines()] for i in (0, 1)]
    merged = [json.loads(line) for line in (answers / "merge.jsonl").read_text().splitlines()]
    assert all(chunks), "each device should have answered a non-empty chunk"
    assert merged == chunks[0] + chunks[1]
    assert [line["question_id"] for line in merged] == bench_data.vqa_ids
    # the merged answers' record: the chunks' common producer, their question hashes in chunk order
    producers = [json.loads((answers / f"2_{i}.jsonl.meta.json").read_text())["producer"] for i in (0, 1)]
    record = json.loads((answers / "merge.jsonl.meta.json").read_text())["producer"]
    assert record == {**producers[0], "questions": [p["questions"] for p in producers]}
    assert producers[0]["questions"] != producers[1]["questions"]


def test_a_failing_chunk_fails_the_loop(bench_data: BenchData, tmp_path: Path) -> None:
    env = {**os.environ, "MODEL_PATH": str(tmp_path / "llava-missing"), "CUDA_VISIBLE_DEVICES": "0",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = f'set -e; source {SCRIPTS / "common.sh"}; MODEL_ARGS+=(--device cpu); ' \
              f'answer_in_chunks {bench_data.vqa} {bench_data.images} {tmp_path / "answers"}; echo reached'
    result = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode != 0 and "reached" not in result.stdout
