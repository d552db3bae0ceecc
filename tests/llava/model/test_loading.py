"""Upstream-format checkpoints built from scratch load through ``load_pretrained_model`` and answer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from llava.model.language_model.llava_llama import LlavaConfig, LlavaLlamaForCausalLM

from ._support import PROJECTORS, load, make_images, pixels, prompt_ids

UPSTREAM_MM_KEYS = {
    "mm_vision_tower", "mm_hidden_size", "mm_projector_type", "mm_vision_select_layer", "mm_vision_select_feature",
    "use_mm_proj", "mm_use_im_start_end", "mm_use_im_patch_token", "image_aspect_ratio",
}


def _copy_checkpoint(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def _edit_config(path: Path, **changes: object) -> None:
    config_file = path / "config.json"
    config = json.loads(config_file.read_text())
    config.update(changes)
    config_file.write_text(json.dumps(config))


@pytest.mark.parametrize("projector_type, extra_config, tokens", PROJECTORS)
def test_checkpoint_loads_and_generates(tiny_llava_checkpoint, projector_type, extra_config, tokens) -> None:
    path = tiny_llava_checkpoint(projector_type, extra_config=extra_config)
    tokenizer, model, image_processor, context_len = load(path)

    assert isinstance(model, LlavaLlamaForCausalLM) and model.dtype == torch.float32
    assert model.config.mm_projector_type == projector_type and context_len == 2048
    assert model.get_vision_tower().is_loaded and image_processor is not None
    images = pixels(make_images(1), image_processor, model)
    assert model.encode_images(images).shape == (1, tokens, model.config.hidden_size)

    input_ids = prompt_ids(tokenizer, "What is in the image?").unsqueeze(0)
    output = model.generate(input_ids, images=images, image_sizes=[(40, 30)], do_sample=False, max_new_tokens=4)
    again = model.generate(input_ids, images=images, image_sizes=[(40, 30)], do_sample=False, max_new_tokens=4)
    assert 1 <= output.shape[1] <= 4  # only new tokens: the prompt is not echoed
    assert torch.equal(output, again)
    assert isinstance(tokenizer.batch_decode(output, skip_special_tokens=True)[0], str)


def test_checkpoint_is_in_upstream_format(tiny_llava_checkpoint) -> None:
    path = tiny_llava_checkpoint("mlp2x_gelu")
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llava_llama" and config["architectures"] == ["LlavaLlamaForCausalLM"]
    assert UPSTREAM_MM_KEYS <= set(config)
    keys = set(load_file(path / "model.safetensors"))
    assert {f"model.mm_projector.{i}.{p}" for i in (0, 2) for p in ("weight", "bias")} <= keys
    assert {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"} <= keys
    assert not any("vision_tower" in key for key in keys)
    assert (path / "tokenizer.model").is_file()


def test_model_type_llava_config_loads_as_llava_llama(tiny_llava_checkpoint) -> None:
    released_style = tiny_llava_checkpoint("mlp2x_gelu", model_type="llava")
    assert json.loads((released_style / "config.json").read_text())["model_type"] == "llava"
    assert LlavaConfig.from_pretrained(released_style).model_type == "llava_llama"

    tokenizer, model, image_processor, _ = load(released_style)
    _, reference, _, _ = load(tiny_llava_checkpoint("mlp2x_gelu"))  # same seed, so the same weights
    assert model.config.model_type == "llava_llama"
    input_ids = prompt_ids(tokenizer, "Describe it.").unsqueeze(0)
    images = pixels(make_images(1), image_processor, model)
    with torch.no_grad():
        logits = model(input_ids, images=images).logits
        expected = reference(input_ids, images=images).logits
    torch.testing.assert_close(logits, expected)
    assert model.generate(input_ids, images=images, do_sample=False, max_new_tokens=3).shape[0] == 1


@pytest.mark.parametrize("file_format", ["bin", "safetensors"])
def test_projector_only_checkpoint_loads_onto_base(tiny_projector_checkpoint, tiny_base_llm, file_format) -> None:
    path = tiny_projector_checkpoint("mlp2x_gelu", file_format)
    tokenizer, model, image_processor, _ = load(path, model_base=tiny_base_llm)

    stored = (
        torch.load(path / "mm_projector.bin", weights_only=True)
        if file_format == "bin"
        else load_file(path / "mm_projector.safetensors")
    )
    projector = model.get_model().mm_projector.state_dict()
    assert set(projector) == {key.removeprefix("model.mm_projector.") for key in stored}
    for key, value in stored.items():
        torch.testing.assert_close(projector[key.removeprefix("model.mm_projector.")], value, rtol=0, atol=0)
    base = load_file(tiny_base_llm / "model.safetensors")
    torch.testing.assert_close(model.lm_head.weight, base["lm_head.weight"], rtol=0, atol=0)

    input_ids = prompt_ids(tokenizer, "What is in the image?").unsqueeze(0)
    images = pixels(make_images(1), image_processor, model)
    assert model.generate(input_ids, images=images, do_sample=False, max_new_tokens=3).shape[0] == 1


def test_projector_only_checkpoint_with_wrong_keys(tiny_projector_checkpoint, tiny_base_llm, tmp_path) -> None:
    path = _copy_checkpoint(tiny_projector_checkpoint("mlp2x_gelu"), tmp_path / "llava-tiny-broken-pretrain")
    weights = torch.load(path / "mm_projector.bin", weights_only=True)
    weights["model.mm_projector.5.weight"] = weights.pop("model.mm_projector.2.bias")
    torch.save(weights, path / "mm_projector.bin")
    with pytest.raises(ValueError, match=r"missing keys: \['2\.bias'\]; unexpected keys: \['5\.weight'\]"):
        load(path, model_base=tiny_base_llm)


def test_projector_only_checkpoint_without_weights_file(tiny_projector_checkpoint, tiny_base_llm, tmp_path) -> None:
    path = _copy_checkpoint(tiny_projector_checkpoint("mlp2x_gelu"), tmp_path / "llava-tiny-empty-pretrain")
    (path / "mm_projector.bin").unlink()
    with pytest.raises(ValueError, match=r"has no mm_projector\.safetensors or mm_projector\.bin"):
        load(path, model_base=tiny_base_llm)


def test_full_checkpoint_with_missing_and_extra_projector_keys(tiny_llava_checkpoint, tmp_path) -> None:
    path = _copy_checkpoint(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-tiny-missing")
    weights = load_file(path / "model.safetensors")
    weights.pop("model.mm_projector.2.bias")
    weights["model.mm_projector.4.weight"] = torch.zeros(2, 2)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model\.mm_projector\.2\.bias.*model\.mm_projector\.4\.weight"):
        load(path)


def test_full_checkpoint_ignores_saved_vision_tower_weights(tiny_llava_checkpoint, tmp_path) -> None:
    path = _copy_checkpoint(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-tiny-with-clip")
    weights = load_file(path / "model.safetensors")
    weights["model.vision_tower.vision_tower.vision_model.post_layernorm.weight"] = torch.zeros(32)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    _, model, _, _ = load(path)
    # The tower comes from its own directory, not from the stale copy in the LLaVA checkpoint.
    assert not torch.equal(model.get_vision_tower().vision_tower.post_layernorm.weight, torch.zeros(32))


def test_missing_vision_tower_directory(tiny_llava_checkpoint, tmp_path) -> None:
    path = _copy_checkpoint(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-tiny-no-tower")
    missing = tmp_path / "nowhere" / "clip-vit"
    _edit_config(path, mm_vision_tower=str(missing))
    with pytest.raises(ValueError, match=rf"vision tower directory '{missing}' does not exist"):
        load(path)


def test_unknown_projector_type(tiny_llava_checkpoint, tmp_path) -> None:
    path = _copy_checkpoint(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-tiny-bad-projector")
    _edit_config(path, mm_projector_type="qformer_x")
    with pytest.raises(ValueError, match=r"unknown mm_projector_type 'qformer_x'; known projector types: linear"):
        load(path)


@pytest.mark.parametrize("projector_type, extra_config, tokens", [p for p in PROJECTORS if "braco" in p.id])
def test_non_persistent_projector_buffers_are_rebuilt(tiny_llava_checkpoint, projector_type, extra_config, tokens) -> None:
    # transformers 5 materialises never-saved buffers with torch.empty_like; the loader must recompute them.
    _, model, _, _ = load(tiny_llava_checkpoint(projector_type, extra_config=extra_config))
    coder = model.get_model().mm_projector[0]
    assert coder.temperature_cur.item() == pytest.approx(coder.config.temperature)


def test_dtype_override_and_quantisation_guard(tiny_llava_checkpoint) -> None:
    path = tiny_llava_checkpoint("mlp2x_gelu")
    _, model, _, _ = load(path, torch_dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16 and model.get_vision_tower().dtype == torch.bfloat16
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="load_4bit needs the bitsandbytes package"):
            load(path, load_4bit=True)


def test_plain_language_model_has_no_image_processor(tiny_base_llm) -> None:
    tokenizer, model, image_processor, context_len = load(tiny_base_llm)
    assert image_processor is None and context_len == 2048
    assert type(model).__name__ == "LlamaForCausalLM" and tokenizer.bos_token_id == 1


def test_absent_im_patch_flag_adds_the_patch_token(tiny_llava_checkpoint, tmp_path) -> None:
    path = _copy_checkpoint(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-tiny-old-config")
    config = json.loads((path / "config.json").read_text())
    del config["mm_use_im_patch_token"]
    (path / "config.json").write_text(json.dumps(config))
    tokenizer, model, _, _ = load(path)
    assert "<im_patch>" in tokenizer.get_vocab() and len(tokenizer) == config["vocab_size"] + 1
    assert model.get_input_embeddings().weight.shape[0] == model.lm_head.weight.shape[0] == len(tokenizer)
