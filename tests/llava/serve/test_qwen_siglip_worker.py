"""The model worker serves the Qwen2 × SigLIP pair (issue 12, "Done means"), with ``mlp2x_gelu`` and a Braco
budget: one ChatML request with an image through the worker's HTTP app, answered as ``generate`` answers the same
prompt and image directly, and the status the controller reads."""

from __future__ import annotations

import base64
import io
import json

import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image

from llava.constants import DEFAULT_IMAGE_TOKEN
from llava.conversation import conv_templates, template_for_model
from llava.mm_utils import process_images, tokenizer_image_token
from llava.serve.engine import ModelEngine
from llava.serve.model_worker import ConcurrencyGate, create_app
from llava.serve.protocol import CHUNK_DELIMITER

MAX_NEW = 8


def _image() -> Image.Image:
    image = Image.new("RGB", (40, 30), (200, 40, 30))
    image.paste((250, 250, 250), (4, 4, 18, 14))
    return image


def _prompt(model_name: str) -> str:
    conv = conv_templates[template_for_model(model_name)].copy()
    conv.append_message(conv.roles[0], DEFAULT_IMAGE_TOKEN + "\nWhat is shown in the image?")
    conv.append_message(conv.roles[1], None)
    return conv.get_prompt()


def _direct_answer(engine: ModelEngine, prompt: str, image: Image.Image) -> str:
    """The same request without the worker: upstream's prompt → ids → ``generate`` → decode."""
    ids = tokenizer_image_token(prompt, engine.tokenizer, return_tensors="pt")[None]
    pixels = process_images([image], engine.image_processor, engine.model.config).to(engine.model.dtype)
    with torch.no_grad():
        out = engine.model.generate(ids, images=pixels, image_sizes=[image.size], do_sample=False, max_new_tokens=MAX_NEW)
    return engine.tokenizer.decode(out[0], skip_special_tokens=True).strip()


@pytest.mark.parametrize("projector", ["mlp2x_gelu", "braco_c2s5"])
def test_worker_answers_a_chatml_request_with_an_image(projector: str, tiny_qwen_siglip_checkpoint) -> None:
    checkpoint = tiny_qwen_siglip_checkpoint(projector)
    engine = ModelEngine.load(str(checkpoint), device="cpu")
    assert engine.model.config.model_type == "llava_qwen" and template_for_model(engine.model_name) == "qwen_1_5"
    client = TestClient(create_app(engine, ConcurrencyGate(1)))
    assert client.post("/worker_get_status").json()["model_names"] == [checkpoint.name]

    prompt = _prompt(engine.model_name)
    buffer = io.BytesIO()
    _image().save(buffer, format="PNG")
    body = {"prompt": prompt, "images": [base64.b64encode(buffer.getvalue()).decode()], "temperature": 0.0,
            "max_new_tokens": MAX_NEW}
    answer = client.post("/worker_generate_stream", json=body)
    chunks = [json.loads(piece) for piece in answer.content.split(CHUNK_DELIMITER) if piece]
    assert answer.status_code == 200 and chunks and all(chunk["error_code"] == 0 for chunk in chunks), chunks
    served = chunks[-1]["text"]
    assert served.startswith(prompt)
    # The PNG round trip is lossless, so the served answer must be exactly the direct one.
    expected = _direct_answer(engine, prompt, _image())
    assert expected, "the direct answer is empty: the comparison would prove nothing"
    assert served[len(prompt):].strip() == expected
