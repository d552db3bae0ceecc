"""Every vision tower × language model pair, uncompressed and with a Braco budget (and the six baselines on the
Qwen2 and Mistral models), end to end (issues 12 and 13):
both training stages through ``llava/train/train.py`` with upstream flags, then ``model_vqa_loader`` answers
(batch 3 as batch 1) and the model worker serves the trained checkpoint.

Towers: tiny CLIP (6×6 + CLS), SigLIP (9×9, no CLS), SigLIP2-style (8×8, no CLS). LLMs: tiny LLaMA (stage 2
``v1``), Qwen2 (``qwen_1_5``), Mistral (``mistral_instruct``), each from a plain base of its family."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from llava.constants import DEFAULT_IMAGE_TOKEN
from llava.conversation import conv_templates
from llava.eval import model_vqa_loader
from llava.serve.engine import ModelEngine
from llava.serve.model_worker import ConcurrencyGate, create_app
from llava.serve.protocol import CHUNK_DELIMITER

from ..train.conftest import stage1_flags, stage2_flags, train_data  # noqa: F401  (train_data is a fixture)
from .conftest import BenchData, write_vqa_questions

#: llm → stage-2 --version (also the loader's --conv-mode) and the checkpoint's LLaVA model_type.
LLMS = {"llama": ("v1", "llava_llama"), "qwen2": ("qwen_1_5", "llava_qwen"), "mistral": ("mistral_instruct", "llava_mistral")}
TOWERS = ("clip", "siglip", "siglip2")
PAIRS = [(llm, tower, projector) for llm in LLMS for tower in TOWERS for projector in ("mlp2x_gelu", "braco_c2s5")]
#: The six baselines on the non-LLaMA language models (9 tokens fit both the 9x9 SigLIP and the 6x6 CLIP grid).
BASELINES_K9 = ("prumerge_k9", "divprune_k9", "mqt_k9", "quecc_k9", "tokenpacker_k9", "fouriervlm_k9")
PAIRS += [("qwen2", "siglip", projector) for projector in BASELINES_K9]
PAIRS += [("mistral", "clip", projector) for projector in BASELINES_K9]


@pytest.fixture(scope="module")
def parts(tmp_path_factory, tiny_tokenizer_dir, tiny_qwen_tokenizer_dir, tiny_tower_dir) -> dict:
    from llava.testing.tiny import build_tiny_llm, build_tiny_siglip2_tower, build_tiny_siglip_tower

    root = tmp_path_factory.mktemp("matrix")
    tokenizers = {"llama": tiny_tokenizer_dir, "mistral": tiny_tokenizer_dir, "qwen2": tiny_qwen_tokenizer_dir}
    return {
        "root": root,
        "towers": {
            "clip": tiny_tower_dir,
            "siglip": build_tiny_siglip_tower(root / "siglip", image_size=54, patch_size=6),
            "siglip2": build_tiny_siglip2_tower(root / "siglip2"),
        },
        "bases": {llm: build_tiny_llm(root / f"{llm}-base", tokenizers[llm], llm=llm) for llm in LLMS},
    }


def _trained(parts: dict, data, llm: str, tower: str, projector: str) -> Path:
    """Stage 1 (``plain``, projector only), then stage 2 (the LLM's template) from its ``mm_projector.bin``."""
    from llava.train.train import train

    base, tower_dir = parts["bases"][llm], parts["towers"][tower]
    stage1 = parts["root"] / f"llava-{llm}-{tower}-{projector}-pretrain"
    train(argv=stage1_flags(base, tower_dir, data, projector, stage1, batch=4) + ["--max_steps", "2"])
    stage2 = parts["root"] / f"llava-{llm}-{tower}-{projector}"
    argv = stage2_flags(base, tower_dir, data, projector, stage2, stage1 / "mm_projector.bin") + ["--max_steps", "2"]
    argv[argv.index("--version") + 1] = LLMS[llm][0]
    train(argv=argv)
    return stage2


@pytest.mark.parametrize("llm, tower, projector", PAIRS, ids=["-".join(pair) for pair in PAIRS])
def test_trains_answers_and_serves(parts, train_data, bench_data: BenchData, tmp_path: Path, llm, tower, projector):  # noqa: F811
    checkpoint = _trained(parts, train_data, llm, tower, projector)
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["model_type"] == LLMS[llm][1] and config["mm_projector_type"] == projector

    questions = write_vqa_questions(tmp_path / "questions.jsonl", count=3)
    texts = {}
    for batch_size in (1, 3):
        out = tmp_path / f"bs{batch_size}.jsonl"
        result = model_vqa_loader.main([
            "--model-path", str(checkpoint), "--question-file", str(questions), "--image-folder", str(bench_data.images),
            "--answers-file", str(out), "--temperature", "0", "--conv-mode", LLMS[llm][0], "--max_new_tokens", "4",
            "--batch-size", str(batch_size), "--device", "cpu",
        ])
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        assert result.answered == len(lines) == 3
        texts[batch_size] = [(line["question_id"], line["text"]) for line in lines]
    assert texts[3] == texts[1]

    engine = ModelEngine.load(str(checkpoint), device="cpu")
    client = TestClient(create_app(engine, ConcurrencyGate(1)))
    assert client.post("/worker_get_status").json()["model_names"] == [checkpoint.name]
    conv = conv_templates[LLMS[llm][0]].copy()
    conv.append_message(conv.roles[0], DEFAULT_IMAGE_TOKEN + "\nWhat is shown in the image?")
    conv.append_message(conv.roles[1], None)
    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 40, 30)).save(buffer, format="PNG")
    body = {"prompt": conv.get_prompt(), "images": [base64.b64encode(buffer.getvalue()).decode()], "temperature": 0.0,
            "max_new_tokens": 4}
    answer = client.post("/worker_generate_stream", json=body)
    chunks = [json.loads(piece) for piece in answer.content.split(CHUNK_DELIMITER) if piece]
    assert answer.status_code == 200 and chunks and all(chunk["error_code"] == 0 for chunk in chunks), chunks
    assert chunks[-1]["text"].startswith(conv.get_prompt())
