"""The demo panel with an in-LLM reducer (``--reducer``): the image positions it keeps after one prefill, through the
engine on tiny checkpoints loaded the way the worker loads them. Independent reference: FastV's kept positions
re-derived from an eager forward of the same model without the reducer (``output_attentions``: the last token's
layer-0 attention row, averaged over heads, top half of the image columns)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import torch
from PIL import Image

from llava.constants import IMAGE_TOKEN_INDEX
from llava.mm_utils import get_model_name_from_path, image_marker, process_images, tokenizer_image_token
from llava.model.builder import load_pretrained_model
from llava.serve.engine import ModelEngine

PROMPT = "USER: <image>\nWhat is it? ASSISTANT:"


def _png(path: Path) -> str:
    buffer = io.BytesIO()
    Image.open(path).convert("RGB").save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _engine(checkpoint: Path, reducer: str | None) -> ModelEngine:
    name = get_model_name_from_path(str(checkpoint))
    tokenizer, model, processor, context = load_pretrained_model(str(checkpoint), None, name, device="cpu", reducer=reducer)
    return ModelEngine(tokenizer, model, processor, context, name)


def _fastv_reference(engine: ModelEngine, image: Image.Image, keep: int) -> list[int]:
    """Grid indices FastV K=1 keeps, from an eager forward without the reducer."""
    model = engine.model
    model.set_reducer(None)
    model.set_attn_implementation("eager")
    prompt = PROMPT.replace("<image>", image_marker(model.config))
    ids = tokenizer_image_token(prompt, engine.tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0)
    pixels = process_images([image], engine.image_processor, model.config)
    with torch.no_grad():
        _, _, _, _, embeds, _ = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, pixels, [image.size])
        attention = model.get_model()(inputs_embeds=embeds, output_attentions=True).attentions[0]
    start = int((ids[0] == IMAGE_TOKEN_INDEX).nonzero()[0, 0])
    row = attention[0, :, -1, start : start + 36].double().mean(0)
    return sorted(row.topk(keep).indices.tolist())


def test_the_panel_shows_the_positions_fastv_keeps(tiny_llava_checkpoint, tiny_image_file) -> None:
    engine = _engine(tiny_llava_checkpoint("mlp2x_gelu"), "fastv_k1_r50")
    assert engine.has_compressor_view  # an mlp2x_gelu checkpoint has no projector view: the reducer gives the panel
    payload = engine.compressor_view({"images": [_png(tiny_image_file)], "prompt": PROMPT})
    assert payload["available"] and payload["reducer"] == "fastv_k1_r50" and payload["reducer_kept_per_layer"] == {1: 18}
    assert Image.open(io.BytesIO(base64.b64decode(payload["png"]))).size[0] > 0
    assert "layer 1: 18" in payload["summary"]
    assert payload["reducer_kept"] == {1: _fastv_reference(engine, Image.open(tiny_image_file).convert("RGB"), 18)}


def test_without_a_prompt_the_panel_asks_the_default_question(tiny_llava_checkpoint, tiny_image_file) -> None:
    engine = _engine(tiny_llava_checkpoint("mlp2x_gelu"), "fastv_k1_r75")
    payload = engine.compressor_view({"images": [_png(tiny_image_file)], "prompt": 3})  # not a prompt: the default one
    assert payload["available"] and payload["reducer_kept_per_layer"] == {1: 9} and len(payload["reducer_kept"][1]) == 9


def test_a_compressor_and_a_reducer_share_the_panel_with_one_sentence(tiny_llava_checkpoint, tiny_image_file) -> None:
    """Braco + FastV: the compressor's own pictures, and the reducer's kept counts over the compressed tokens in one
    sentence (they are not patches, so no positions are drawn)."""
    checkpoint = tiny_llava_checkpoint("braco_c2s5")
    plain = _engine(checkpoint, None).compressor_view({"images": [_png(tiny_image_file)]})
    engine = _engine(checkpoint, "fastv_k1_r50")
    payload = engine.compressor_view({"images": [_png(tiny_image_file)], "prompt": PROMPT})
    tokens = engine.visual_tokens
    assert tokens != 36 and payload["available"] and "reducer_kept" not in payload
    assert payload["reducer_kept_per_layer"] == {1: round(tokens / 2)}
    assert payload["summary"].startswith(plain["summary"])
    assert f"layer 1: {round(tokens / 2)} of {tokens}" in payload["summary"] and "no positions are drawn" in payload["summary"]


def test_a_video_gets_one_sentence_for_the_reducer(tiny_llava_checkpoint, tmp_path: Path) -> None:
    import numpy as np

    from llava.video import write_video

    frames = np.zeros((4, 32, 32, 3), dtype=np.uint8)
    frames[:, 8:24, 8:24, 0] = 255
    clip = Path(write_video(tmp_path / "square.mp4", frames, fps=2))
    engine = _engine(tiny_llava_checkpoint("mlp2x_gelu"), "fastv_k1_r50")
    payload = engine.compressor_view({"videos": [base64.b64encode(clip.read_bytes()).decode("ascii")]})
    assert payload == {"available": False, "error": "The reducer's kept positions are drawn for a single image, not for a video."}
