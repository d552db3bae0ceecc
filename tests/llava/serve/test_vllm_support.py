"""The vLLM plugin's torch-only half (llava.serve.vllm_plugin.support), without vLLM, over every registered projector
type: a type is either refused in one sentence naming it, or its vision side (tower, registry-built projector,
AnyRes merge) gives exactly the HF model's visual tokens, as many as the token count the front end announces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from llava.mm_utils import process_images
from llava.model.builder import load_pretrained_model
from llava.serve.vllm_plugin import support
from llava.testing.registry import registered_examples
from llava.utils import UserError

TOWER_WIDTH = 32  # the tiny tower's width (tests/conftest.py)

#: (width, height): square, wide and tall images, so padding and AnyRes canvases differ.
SIZES = [(48, 48), (90, 40), (30, 70)]


def _images() -> list[Image.Image]:
    images = []
    for index, size in enumerate(SIZES):
        image = Image.new("RGB", size, (40 * index, 200 - 50 * index, 90))
        image.paste((250, 250, 250), (3, 3, 3 + size[0] // 3, 3 + size[1] // 4))
        images.append(image)
    return images


def _vision_side(checkpoint: Path, config) -> support.VisionSide:
    side = support.VisionSide(config)
    _, projector, newline = support.split_weights(load_file(str(checkpoint / "model.safetensors")).items())
    side.load_checkpoint_tensors(projector, newline, str(checkpoint))
    return side.eval()


def _compare(checkpoint: Path) -> None:
    _, model, processor, _ = load_pretrained_model(str(checkpoint), None, checkpoint.name, device="cpu")
    model.eval()
    side = _vision_side(checkpoint, model.config)
    per_view, grid = support.tokens_per_view(model.config), side.vision_tower.grid_shape
    images = _images()
    pixels = [process_images([image], processor, model.config)[0] for image in images]
    sizes = [image.size for image in images]
    with torch.no_grad():
        expected = model.image_features(pixels, sizes)
        got = side.features(pixels, sizes)
    for image, want, have in zip(images, expected, got):
        assert have.shape == want.shape and torch.equal(have, want)
        count = support.image_token_count(model.config, image.size, per_view, support.tower_side(model.config), grid)
        assert count == have.shape[0]


REFUSALS = {
    "quecc_k4": "reads the question through the language model before the image is encoded",
    "cdpruner_k9": "reads the instruction through the vision tower's paired text encoder before the image is encoded",
    "prumerge": "keeps a number of tokens that depends on the image",
    "prumerge_plus": "keeps a number of tokens that depends on the image",
}


@pytest.mark.parametrize(("projector_type", "settings"), registered_examples())
def test_every_registered_type_is_served_exactly_or_refused_by_name(tiny_llava_checkpoint, projector_type: str, settings: dict) -> None:
    # the LLM as wide as the tower, so every type builds (``identity`` passes features on unchanged)
    checkpoint = tiny_llava_checkpoint(projector_type, extra_config=settings or None, hidden=TOWER_WIDTH)
    if projector_type in REFUSALS:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(checkpoint))
        with pytest.raises(UserError, match=rf"mm_projector_type '{projector_type}' {REFUSALS[projector_type]}"):
            support.check_servable(config)
        return
    _compare(checkpoint)


def test_anyres_spatial_unpad_on_qwen_matches_the_model(tmp_path: Path, tiny_tower_dir: Path, tiny_qwen_tokenizer_dir: Path) -> None:
    from llava.testing.tiny import build_tiny_llava_checkpoint

    for projector_type in ("mlp2x_gelu", "braco_c2s5"):
        checkpoint = build_tiny_llava_checkpoint(
            tmp_path / f"llava-qwen-anyres-{projector_type}", tiny_tower_dir, tiny_qwen_tokenizer_dir, projector_type=projector_type,
            llm="qwen2", extra_config={"image_aspect_ratio": "anyres", "mm_patch_merge_type": "spatial_unpad"},
        )
        _compare(checkpoint)


def test_a_checkpoint_whose_tower_folder_is_gone_is_one_sentence(tiny_llava_checkpoint, tmp_path: Path) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(tiny_llava_checkpoint("mlp2x_gelu")))
    config.mm_vision_tower = str(tmp_path / "missing-tower")
    with pytest.raises(UserError) as caught:
        support.check_servable(config, "llava-x")
    assert str(caught.value) == (f"llava-x: vision tower directory {str(tmp_path / 'missing-tower')!r} does not exist (a relative "
                                 "path is read from the working directory, then from the checkpoint's folder); point "
                                 "mm_vision_tower at a saved tower directory")


def test_a_plain_language_model_is_refused(tiny_base_llm: Path) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(tiny_base_llm))
    with pytest.raises(UserError, match=r"^vicuna-tiny names no vision tower \(mm_vision_tower\), so it is a plain language model"):
        support.check_servable(config, "vicuna-tiny")


def test_weights_are_routed_by_their_upstream_names() -> None:
    assert support.route_weight("model.layers.0.self_attn.q_proj.weight") == (support.LANGUAGE, "model.layers.0.self_attn.q_proj.weight")
    assert support.route_weight("lm_head.weight") == (support.LANGUAGE, "lm_head.weight")
    assert support.route_weight("model.mm_projector.0.weight") == (support.PROJECTOR, "0.weight")
    assert support.route_weight("model.mm_projector.0.coder.scale") == (support.PROJECTOR, "0.coder.scale")
    assert support.route_weight("model.image_newline") == (support.NEWLINE, "")
    assert support.route_weight("model.vision_tower.vision_tower.vision_model.embeddings.patch_embedding.weight")[0] == support.SKIP


def test_the_language_architecture_is_the_plain_llms(tiny_llava_checkpoint, tiny_root: Path) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(tiny_llava_checkpoint("mlp2x_gelu")))
    assert support.language_architecture(config) == "LlamaForCausalLM"
    legacy = json.loads((tiny_llava_checkpoint("mlp2x_gelu", model_type="llava") / "config.json").read_text())
    assert legacy["model_type"] == "llava"
    assert support.language_architecture(AutoConfig.for_model("llava_qwen")) == "Qwen2ForCausalLM"


@pytest.mark.parametrize("family", ["llama", "qwen"])
def test_prompts_are_re_tokenized_as_the_hf_path_does(family: str, tiny_tokenizer_dir: Path, tiny_qwen_tokenizer_dir: Path) -> None:
    """Whole-prompt ids, with the tokenizer's special tokens (completions) or without (rendered chats), become
    ``tokenizer_image_token``'s ids with the placeholder at each ``<image>``."""
    from transformers import AutoTokenizer

    from llava.conversation import conv_templates
    from llava.mm_utils import tokenizer_image_token

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir if family == "llama" else tiny_qwen_tokenizer_dir))
    conv = conv_templates["llava_v1" if family == "llama" else "qwen_2"].copy()
    conv.append_message(conv.roles[0], "<image>\n<image>\nWhat is  in the picture?")
    conv.append_message(conv.roles[1], None)
    prompt = conv.get_prompt()
    placeholder = support.placeholder_token_id(tokenizer, len(tokenizer) + (64 if family == "qwen" else 0))
    expected = tokenizer_image_token(prompt, tokenizer, placeholder)
    assert expected.count(placeholder) == 2
    for special in (True, False):
        whole = tokenizer(prompt, add_special_tokens=special).input_ids
        assert placeholder not in whole and whole != expected  # vLLM's tokenization differs around the markers
        assert support.relay_prompt(whole, tokenizer, placeholder) == expected
    assert support.relay_prompt(expected, tokenizer, placeholder) == expected  # already relaid: unchanged
