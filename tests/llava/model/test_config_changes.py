"""LLaVA-NeXT's ``customized_config`` and ``overwrite_config`` keywords of ``load_pretrained_model``, checked at load
(fault cases N01 and N03-N06 of 2026-11-26), through the real loader on the tiny OneVision-style checkpoint."""

from __future__ import annotations

import json

import pytest

from llava.model.builder import load_pretrained_model
from llava.utils import UserError


def _load(path, **keywords):
    return load_pretrained_model(str(path), None, "llava_qwen", device="cpu", **keywords)


def _width(path) -> int:
    return json.loads((path / "config.json").read_text())["hidden_size"]


def test_n03_an_overwrite_that_contradicts_the_weights_is_named(ov_checkpoint) -> None:
    # Before: transformers' "You set ignore_mismatched_sizes to False ... look at the above report", naming no key.
    path = ov_checkpoint[0]
    width = _width(path)
    with pytest.raises(UserError, match=rf"^overwrite_config sets hidden_size={width * 2}, which contradicts the checkpoint's "
                                        rf"weights: they were saved with hidden_size={width} \(.*config.json\); leave hidden_size "
                                        "out of overwrite_config$"):
        _load(path, overwrite_config={"hidden_size": width * 2})
    with pytest.raises(UserError, match=r"^customized_config sets num_hidden_layers=9, which contradicts"):
        _load(path, customized_config={**json.loads((path / "config.json").read_text()), "num_hidden_layers": 9})


def test_n04_n05_a_customized_config_path_is_checked(ov_checkpoint, tmp_path) -> None:
    # Before: a missing path was taken for a hub id ("Repo id must be in the form ..."), a JSON list failed on .get.
    missing = tmp_path / "nope" / "config.json"
    with pytest.raises(UserError, match=rf"^customized_config '{missing}' does not exist; pass a config.json path"):
        _load(ov_checkpoint[0], customized_config=str(missing))
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2]")
    with pytest.raises(UserError, match=r"list.json holds a JSON list, but customized_config must be a JSON object$"):
        _load(ov_checkpoint[0], customized_config=listing)
    with pytest.raises(UserError, match=r"^customized_config must be a config.json path, a dict or a config object, got int$"):
        _load(ov_checkpoint[0], customized_config=5)
    with pytest.raises(UserError, match=r"^overwrite_config must be a dict of config keys to values, got list$"):
        _load(ov_checkpoint[0], overwrite_config=[("mm_spatial_pool_stride", 2)])


def test_n06_a_customized_config_dict_is_read_as_the_checkpoints_config(ov_checkpoint) -> None:
    # Before: the dict was used as the config object and the loader blamed the checkpoint's config.json.
    path = ov_checkpoint[0]
    config = json.loads((path / "config.json").read_text())
    _, model, processor, _ = _load(path, customized_config={**config, "mm_newline_position": "frame"})
    assert model.config.mm_newline_position == "frame" and processor is not None
    with pytest.raises(UserError, match=r"^customized_config \(a dict\) has no 'mm_vision_tower'"):
        _load(path, customized_config={key: value for key, value in config.items() if key != "mm_vision_tower"})


@pytest.mark.parametrize(("overwrite", "message"), [
    ({"mm_spatial_pool_stride": "2"}, r"^overwrite_config \['mm_spatial_pool_stride'\]: mm_spatial_pool_stride must be an "
                                      r"integer \(NeXT uses 2\), got '2'$"),
    ({"mm_spatial_pool_mode": "conv"}, r"^overwrite_config \['mm_spatial_pool_mode'\]: unknown mm_spatial_pool_mode 'conv'"),
    ({"mm_hidden_size": "32"}, r"^overwrite_config: key 'mm_hidden_size' must be an integer, got a string '32'"),
])
def test_n01_overwritten_values_are_checked_at_load_not_at_the_first_video(ov_checkpoint, overwrite, message) -> None:
    # Before: the string stride loaded, and was refused only at the first video generate.
    with pytest.raises(UserError, match=message):
        _load(ov_checkpoint[0], overwrite_config=overwrite)


def test_another_projector_type_is_let_through_and_its_weights_are_checked_when_they_load(ov_checkpoint) -> None:
    # mm_projector_type is how NeXT's overwrite_config (and --projector-type) puts a training-free compressor in front
    # of a checkpoint's projector; a type whose weights the checkpoint lacks is refused by the projector's own load,
    # naming the keys, not by the config check.
    path = ov_checkpoint[0]
    with pytest.raises((UserError, ValueError), match=r"braco_c2s5.*(missing|lacks)|(missing|lacks).*polar_proj"):
        _load(path, overwrite_config={"mm_projector_type": "braco_c2s5"})
