"""Weight files and projector state dicts (:mod:`llava.model.weights_io`) on hand-built files and modules, and the
names ``llava.model.llava_arch`` keeps for upstream users."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn
from safetensors.torch import save_file

from llava.model import image_encoding, patch_merge, splice, weights_io
from llava.model.weights_io import (
    load_projector_weights,
    load_weights_file,
    non_persistent_buffers,
    projector_state_dict,
)


def _projector() -> nn.Sequential:
    return nn.Sequential(nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2))


@pytest.mark.parametrize("suffix", [".safetensors", ".bin"])
def test_load_weights_file_round_trip(tmp_path, suffix) -> None:
    weights = {"model.mm_projector.0.weight": torch.randn(4, 3), "model.embed_tokens.weight": torch.randn(5, 2)}
    path = tmp_path / f"mm_projector{suffix}"
    if suffix == ".safetensors":
        save_file(weights, str(path))
    else:
        torch.save(weights, path)
    loaded = load_weights_file(path)
    assert loaded.keys() == weights.keys()
    assert all(torch.equal(loaded[name], weights[name]) for name in weights)


def test_load_weights_file_missing(tmp_path) -> None:
    missing = tmp_path / "nope.bin"
    with pytest.raises(ValueError, match=re.escape(f"weights file '{missing}' does not exist")):
        load_weights_file(missing)


def test_projector_state_dict_strips_every_layout() -> None:
    value = torch.zeros(1)
    weights = {
        "model.mm_projector.0.weight": value,  # full or stage-1 checkpoint
        "base_model.model.model.mm_projector.2.bias": value,  # LoRA non_lora_trainables
        "model.layers.0.mlp.weight": value,
        "model.mm_projector_extra": value,  # no "mm_projector." marker
    }
    assert sorted(projector_state_dict(weights)) == ["0.weight", "2.bias"]


def test_load_projector_weights_strict() -> None:
    source, target = _projector(), _projector()
    load_projector_weights(target, source.state_dict(), "'hand-built'")
    assert all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), target.state_dict().values()))
    broken = dict(source.state_dict())
    broken["3.weight"] = broken.pop("2.weight")
    message = r"missing keys: \['2.weight'\]; unexpected keys: \['3.weight'\]"
    with pytest.raises(ValueError, match=rf"projector weights in 'x' do not match the Sequential .*{message}"):
        load_projector_weights(target, broken, "'x'")


def test_non_persistent_buffers_are_listed() -> None:
    module = _projector()
    module[0].register_buffer("cached", torch.ones(2), persistent=False)
    module.register_buffer("saved", torch.ones(2))
    module.register_buffer("unset", None, persistent=False)
    assert list(non_persistent_buffers(module)) == ["0.cached"]


def test_llava_arch_keeps_the_public_names() -> None:
    from llava.model import llava_arch

    homes = {
        "load_weights_file": weights_io, "projector_state_dict": weights_io, "load_projector_weights": weights_io,
        "PROJECTOR_KEY": weights_io, "unpad_image": patch_merge, "attention_layer_for": image_encoding,
        "PADDING_SIDES": splice,
    }
    for name, home in homes.items():
        assert getattr(llava_arch, name) is getattr(home, name), name
    for name in ("LlavaMetaModel", "LlavaMetaForCausalLM", "init_image_newline", "ImageInput"):
        assert name in llava_arch.__all__ and hasattr(llava_arch, name)
