"""lmms-eval end to end on a tiny Braco checkpoint whose tokenizer is a sentencepiece ``tokenizer.model``.

Slow and needs lmms-eval (0.7.3), so it is deselected by default: ``make lmms-eval-check`` builds a virtualenv
with lmms-eval (which pins protobuf < 7 through wandb) and runs ``pytest -m slow tests/lmms_eval``. The
command is the one a user runs::

    python -m lmms_eval --model llava --model_args pretrained=<ckpt>,conv_template=vicuna_v1,device=cpu,device_map=auto
        --tasks llava_local_check --include_path <folder with the task YAML>

It must finish and write a score for the task (the tiny model's answers are random, so only the score's
presence and range are checked). The same holds for ``--model llava_onevision`` (LLaVA-NeXT's OneVision wrapper:
``load_pretrained_model(..., multimodal=True, attn_implementation=..., overwrite_config=...)``, ``modalities``)
on a tiny ``llava_qwen`` + SigLIP checkpoint, with a local image task and a local video task.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm
from PIL import Image

pytestmark = pytest.mark.slow

TASK = "llava_local_check"
QUESTIONS = [("red", "What colour is the square?"), ("blue", "What colour is the square?"), ("green", "What colour is it?")]


def _sentencepiece_tokenizer(checkpoint: Path, tmp_path: Path) -> None:
    """Replace the checkpoint's tokenizer by a sentencepiece ``tokenizer.model`` (as LLaVA-1.5 checkpoints ship)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["USER: what colour is the square? ASSISTANT: red", "a blue square and a green one"] * 50))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "spm"), vocab_size=100, model_type="bpe",
                                   character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"):
        (checkpoint / name).unlink(missing_ok=True)
    (checkpoint / "tokenizer.model").write_bytes((tmp_path / "spm.model").read_bytes())
    (checkpoint / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False, "legacy": False, "model_max_length": 2048,
    }))


def _task(folder: Path, task: str = TASK, video: bool = False) -> None:
    """A task YAML over a local JSON file and local images (or, with ``video``, local video files)."""
    folder.mkdir(exist_ok=True)
    docs = []
    for index, (colour, question) in enumerate(QUESTIONS):
        if video:
            import numpy as np

            from llava.video import write_video

            # 64 x 64: decord 0.6.0 fails on this MPEG-4 clip at 48 px wide (row padding: 6144 vs 4608 bytes).
            frames = np.zeros((6, 64, 64, 3), dtype=np.uint8)
            frames[:, 8:24, 8:24] = Image.new("RGB", (1, 1), colour).getpixel((0, 0))
            path = write_video(folder / f"clip{index}.mp4", frames, fps=3)
            docs.append({"id": index, "video": str(path), "question": question, "answer": colour})
        else:
            image = folder / f"img{index}.png"
            Image.new("RGB", (40, 30), colour).save(image)
            docs.append({"id": index, "image": str(image), "question": question, "answer": colour})
    (folder / f"{task}.json").write_text(json.dumps(docs))
    (folder / "utils.py").write_text((Path(__file__).parent / "task_utils.py").read_text())
    (folder / f"{task}.yaml").write_text(
        f"task: {task}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / (task + '.json')}\n"
        "test_split: test\n"
        "output_type: generate_until\n"
        f"doc_to_visual: !function utils.{'doc_to_visual_video' if video else 'doc_to_visual'}\n"
        "doc_to_text: !function utils.doc_to_text\n"
        "doc_to_target: answer\n"
        "generation_kwargs:\n  max_new_tokens: 4\n  do_sample: false\n  temperature: 0\n"
        "process_results: !function utils.process_results\n"
        "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n"
    )


def test_lmms_eval_scores_a_tiny_braco_checkpoint(tmp_path: Path, tiny_tower_dir, tiny_tokenizer_dir):
    python = os.environ.get("LMMS_EVAL_PYTHON", sys.executable)
    if python == sys.executable and importlib.util.find_spec("lmms_eval") is None:
        pytest.fail("lmms-eval is not installed here; run `make lmms-eval-check` (or set LMMS_EVAL_PYTHON)")
    from llava.testing.tiny import build_tiny_llava_checkpoint

    checkpoint = build_tiny_llava_checkpoint(tmp_path / "llava-tiny-braco", tiny_tower_dir, tiny_tokenizer_dir,
                                             projector_type="braco_c2s5")
    _sentencepiece_tokenizer(checkpoint, tmp_path)
    _task(tmp_path / "task")
    output = tmp_path / "results"
    command = [
        python, "-m", "lmms_eval", "--model", "llava",
        "--model_args", f"pretrained={checkpoint},conv_template=vicuna_v1,device=cpu,device_map=auto",
        "--tasks", TASK, "--include_path", str(tmp_path / "task"), "--batch_size", "1",
        "--output_path", str(output),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    files = sorted(output.rglob("*results*.json"))
    assert files, f"no results file under {output}: {result.stdout[-2000:]}"
    scores = json.loads(files[-1].read_text())["results"][TASK]
    score = next(value for key, value in scores.items() if key.startswith("exact_match"))
    assert 0.0 <= score <= 1.0


def _run_lmms_eval(python: str, model: str, model_args: str, tasks: str, include: Path, output: Path, cwd: Path) -> tuple[dict, str]:
    command = [
        python, "-m", "lmms_eval", "--model", model, "--model_args", model_args, "--tasks", tasks,
        "--include_path", str(include), "--batch_size", "1", "--output_path", str(output),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=cwd)
    assert result.returncode == 0, result.stderr[-4000:]
    files = sorted(output.rglob("*results*.json"))
    assert files, f"no results file under {output}: {result.stdout[-2000:]}"
    return json.loads(files[-1].read_text())["results"], result.stdout + result.stderr


def test_lmms_eval_llava_onevision_scores_an_image_and_a_video_task(tmp_path: Path):
    """``--model llava_onevision`` (issue 23): NeXT's load keywords, ``modalities=["video"]``, decord frames."""
    python = os.environ.get("LMMS_EVAL_PYTHON", sys.executable)
    if python == sys.executable and importlib.util.find_spec("lmms_eval") is None:
        pytest.fail("lmms-eval is not installed here; run `make lmms-eval-check` (or set LMMS_EVAL_PYTHON)")
    from llava.testing.tiny import build_tiny_llava_checkpoint, build_tiny_siglip_tower, train_tiny_qwen_tokenizer

    tokenizer = train_tiny_qwen_tokenizer(tmp_path / "qwen-tokenizer")
    tower = build_tiny_siglip_tower(tmp_path / "siglip", image_size=54, patch_size=6)
    checkpoint = build_tiny_llava_checkpoint(
        tmp_path / "llava-onevision-qwen2-tiny-ov", tower, tokenizer, llm="qwen2", projector_type="braco_c2s5",
        extra_config={"mm_patch_merge_type": "spatial_unpad", "image_aspect_ratio": "anyres_max_9", "mm_newline_position": "one_token"},
    )
    tasks = tmp_path / "tasks"
    _task(tasks, "ov_image_check")
    _task(tasks, "ov_video_check", video=True)
    model_args = (f"pretrained={checkpoint},conv_template=qwen_1_5,model_name=llava_qwen,device=cpu,device_map=auto,"
                  "attn_implementation=sdpa,max_frames_num=4")
    results, log = _run_lmms_eval(python, "llava_onevision", model_args, "ov_image_check,ov_video_check", tasks, tmp_path / "results", tmp_path)
    # The wrapper answers text-only (and still scores) when a video fails to load: make sure none did.
    assert "in loading video" not in log, log[-3000:]
    for task in ("ov_image_check", "ov_video_check"):
        score = next(value for key, value in results[task].items() if key.startswith("exact_match"))
        assert 0.0 <= score <= 1.0, task
