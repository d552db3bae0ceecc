"""Where ``load_pretrained_model`` puts the model (upstream's ``device`` / ``device_map``), transformers 4's
keywords, and the one-line tower load report."""

from __future__ import annotations

import logging

import pytest
import torch
from safetensors.torch import load_file, save_file

from llava.mm_utils import get_model_name_from_path
from llava.model.builder import load_pretrained_model, resolve_placement
from llava.model.multimodal_encoder.builder import build_vision_tower
from llava.testing.tiny import build_tiny_clip_tower, build_tiny_siglip_tower


@pytest.mark.parametrize(
    "device_map, device, expected",
    [
        ("auto", "cuda", ("auto", "cuda")),  # upstream's default: the LLM spread over the GPUs
        ("cpu", "cuda", ({"": "cpu"}, "cpu")),  # one device named by device_map takes LLM and tower
        ("cuda:1", "cuda", ({"": "cuda:1"}, "cuda:1")),
        ({"": "cuda:1"}, "cuda", ({"": "cuda:1"}, "cuda:1")),
        (1, "cuda", ({"": "cuda:1"}, "cuda:1")),
        ("auto", "cpu", ({"": "cpu"}, "cpu")),  # upstream: a device other than cuda maps everything to it
        ({"model.layers.0": 0, "lm_head": 1}, "cuda", ({"model.layers.0": 0, "lm_head": 1}, "cuda")),
    ],
)
def test_placement_follows_upstreams_two_arguments(device_map, device, expected):
    assert resolve_placement(device_map, device) == expected


def test_device_map_cpu_without_device_loads_and_generates_on_the_cpu(tiny_llava_checkpoint):
    path = tiny_llava_checkpoint("mlp2x_gelu")
    tokenizer, model, processor, _ = load_pretrained_model(str(path), None, get_model_name_from_path(str(path)), device_map="cpu")
    assert model.device.type == "cpu" and model.dtype == torch.float32  # float16 is for GPUs
    tower = model.get_vision_tower()
    assert tower.device.type == "cpu"
    ids = tokenizer("hello", return_tensors="pt").input_ids
    assert model.generate(ids, do_sample=False, max_new_tokens=2).shape[1] >= 1


def test_use_flash_attention_2_keyword_is_ignored_with_a_warning(tiny_llava_checkpoint, caplog):
    path = tiny_llava_checkpoint("mlp2x_gelu")
    with caplog.at_level(logging.WARNING, logger="llava.model.builder"):
        _, model, _, _ = load_pretrained_model(str(path), None, get_model_name_from_path(str(path)), device="cpu",
                                               use_flash_attention_2=True)
    assert model.config._attn_implementation != "flash_attention_2"
    assert any("use_flash_attention_2" in record.getMessage() for record in caplog.records)


def _tower_args(path):
    return type("Args", (), {"mm_vision_tower": str(path), "mm_vision_select_layer": -2})()


@pytest.mark.parametrize("builder", [build_tiny_clip_tower, build_tiny_siglip_tower])
def test_a_released_style_full_checkpoint_loads_with_one_line_at_most(builder, tmp_path, capfd, caplog):
    """Released towers are whole CLIP/SigLIP models: their text half is not listed key by key."""
    path = builder(tmp_path / "tower", full_model=True)
    capfd.readouterr()
    with caplog.at_level(logging.INFO):
        tower = build_vision_tower(_tower_args(path))
    out = capfd.readouterr()
    printed = out.out + out.err + "\n".join(record.getMessage() for record in caplog.records)
    assert "UNEXPECTED" not in printed and "text_model.encoder" not in printed
    assert sum("not used" in line for line in printed.splitlines()) == 1
    assert tower.is_loaded


def test_a_tower_missing_vision_weights_is_an_error_naming_them(tmp_path):
    path = build_tiny_clip_tower(tmp_path / "tower")
    weights = load_file(str(path / "model.safetensors"))
    dropped = sorted(key for key in weights if ".layers.1." in key)
    save_file({k: v for k, v in weights.items() if k not in dropped}, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=rf"lacks {len(dropped)} weights of its vision model .*layers\.1\."):
        build_vision_tower(_tower_args(path))
