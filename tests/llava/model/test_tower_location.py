"""Where ``mm_vision_tower`` is read from: the working directory first (upstream's meaning), then the checkpoint's own
folder, so a checkpoint naming its tower relative to itself loads from any folder and after being moved with it."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from llava.model.multimodal_encoder.location import resolve_tower_path

from ._support import load, make_images, pixels


def _layout(root: Path, tower_source: Path, checkpoint_source: Path) -> Path:
    """``root/models/clip`` and ``root/runs/a/ckpt`` whose config names the tower as ``../../../models/clip``."""
    shutil.copytree(tower_source, root / "models" / "clip")
    checkpoint = root / "runs" / "a" / "ckpt"
    shutil.copytree(checkpoint_source, checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    config["mm_vision_tower"] = "../../../models/clip"
    (checkpoint / "config.json").write_text(json.dumps(config))
    return checkpoint


def _tower_weights(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.get_vision_tower().vision_tower.state_dict().items()}


# ------------------------------------------------------------------------------------------------ the rule


def test_absolute_and_hub_names_are_unchanged(tmp_path):
    assert resolve_tower_path(str(tmp_path / "nowhere"), tmp_path) == str(tmp_path / "nowhere")
    assert resolve_tower_path("openai/clip-vit-large-patch14-336", tmp_path) == "openai/clip-vit-large-patch14-336"
    assert resolve_tower_path("openai/clip-vit-large-patch14-336") == "openai/clip-vit-large-patch14-336"


def test_working_directory_first_then_beside_the_checkpoint(tmp_path, monkeypatch, caplog):
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "tower").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert resolve_tower_path("tower", checkpoint) == str(checkpoint / "tower")
    (checkpoint / "config.json").write_text("{}")
    assert resolve_tower_path("tower", checkpoint / "config.json") == str(checkpoint / "tower")  # a config file's folder
    assert resolve_tower_path("tower") == "tower"  # training's --vision_tower: the working directory only
    (elsewhere / "tower").mkdir()
    with caplog.at_level(logging.WARNING):
        assert resolve_tower_path("tower", checkpoint) == "tower"  # upstream's meaning wins, with a warning
    assert "both in the working directory and beside the checkpoint" in caplog.text


def test_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "clip").mkdir()
    assert resolve_tower_path("~/clip", tmp_path / "x") == str(tmp_path / "clip")


# ------------------------------------------------------------------------------------------------ the loaders


def test_full_checkpoint_loads_from_another_folder_and_after_a_move(tmp_path, monkeypatch, tiny_llava_checkpoint, tiny_tower_dir):
    checkpoint = _layout(tmp_path / "project", tiny_tower_dir, tiny_llava_checkpoint("mlp2x_gelu"))
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    _, model, processor, _ = load(checkpoint)
    images = pixels(make_images(1), processor, model)
    reference = model.encode_images(images)
    weights = _tower_weights(model)
    assert json.loads((checkpoint / "config.json").read_text())["mm_vision_tower"] == "../../../models/clip"  # not rewritten

    moved = tmp_path / "moved" / "copy"
    shutil.move(str(tmp_path / "project"), moved)
    _, moved_model, _, _ = load(moved / "runs" / "a" / "ckpt")
    assert moved_model.config.mm_vision_tower == str(moved / "models" / "clip")
    torch.testing.assert_close(moved_model.encode_images(images), reference, rtol=0, atol=0)
    for key, value in _tower_weights(moved_model).items():
        torch.testing.assert_close(value, weights[key], rtol=0, atol=0)


def test_stage1_checkpoint_on_a_base_loads_from_another_folder(tmp_path, monkeypatch, tiny_projector_checkpoint,
                                                              tiny_tower_dir, tiny_base_llm):
    checkpoint = _layout(tmp_path / "project", tiny_tower_dir, tiny_projector_checkpoint("mlp2x_gelu"))
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    _, model, processor, _ = load(checkpoint, model_base=tiny_base_llm)  # the model is built from the base's folder
    assert model.get_vision_tower().is_loaded
    assert model.config.mm_vision_tower == str(tmp_path / "project" / "models" / "clip")


def test_a_missing_relative_tower_is_one_sentence(tmp_path, monkeypatch, tiny_llava_checkpoint):
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(tiny_llava_checkpoint("mlp2x_gelu"), checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    config["mm_vision_tower"] = "../models/clip"
    (checkpoint / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"'\.\./models/clip' does not exist \(a relative path is read from the working "
                                         r"directory, then from the checkpoint's folder\)"):
        load(checkpoint)


def test_eval_provenance_and_cost_read_the_same_tower(tmp_path, monkeypatch, tiny_llava_checkpoint, tiny_tower_dir):
    from llava.cost.presets import load_spec
    from llava.eval.provenance import model_fingerprint

    checkpoint = _layout(tmp_path / "project", tiny_tower_dir, tiny_llava_checkpoint("mlp2x_gelu"))
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    record = model_fingerprint(str(checkpoint))
    assert record["vision_tower"]["path"] == str((tmp_path / "project" / "models" / "clip").resolve())
    tower_config = json.loads((tiny_tower_dir / "config.json").read_text())
    assert load_spec(checkpoint / "config.json").vision.hidden_size == tower_config.get(
        "hidden_size", tower_config.get("vision_config", {}).get("hidden_size"))
