"""CLIPVisionTower and build_vision_tower on a tiny local CLIP directory."""

from __future__ import annotations

import argparse

import pytest
import torch
from transformers import CLIPVisionModel

from llava.model.multimodal_encoder.builder import build_vision_tower
from llava.model.multimodal_encoder.clip_encoder import CLIPVisionTower

from ._support import GRID
from ._towers import offline_hub  # noqa: F401  (fixture)


def _args(tower, **overrides) -> argparse.Namespace:
    return argparse.Namespace(mm_vision_tower=str(tower), mm_vision_select_layer=-2, **overrides)


@pytest.mark.parametrize("select_feature, tokens", [("patch", GRID * GRID), ("cls_patch", GRID * GRID + 1)])
def test_features_are_the_selected_hidden_layer(tiny_tower_dir, select_feature, tokens) -> None:
    tower = build_vision_tower(_args(tiny_tower_dir, mm_vision_select_feature=select_feature))
    reference = CLIPVisionModel.from_pretrained(tiny_tower_dir)
    images = torch.randn(2, 3, 48, 48, dtype=torch.float64)

    features = tower(images)
    expected = reference(images.float(), output_hidden_states=True).hidden_states[-2]
    expected = expected[:, 1:] if select_feature == "patch" else expected
    assert features.shape == (2, tokens, 32) and features.dtype == torch.float64  # back in the input dtype
    torch.testing.assert_close(features.float(), expected)
    assert not any(param.requires_grad for param in tower.parameters())
    assert (tower.hidden_size, tower.num_patches_per_side, tower.num_patches) == (32, GRID, GRID * GRID)
    assert tower.dtype == torch.float32 and tower.device.type == "cpu" and tower.image_processor.crop_size["height"] == 48

    as_list = tower(list(images))
    assert [item.shape for item in as_list] == [(1, tokens, 32)] * 2
    torch.testing.assert_close(torch.cat(as_list), features)


def test_loading_a_tower_logs_no_load_report(tiny_tower_dir) -> None:
    # Quietening transformers' per-key report made transformers 5.24 list every tower layer as "not sharded".
    import logging

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    messages: list[str] = []
    root, handler = logging.getLogger("transformers"), Collect(logging.WARNING)
    before = logging.getLogger("transformers.modeling_utils").level
    root.addHandler(handler)
    try:
        build_vision_tower(_args(tiny_tower_dir))
    finally:
        root.removeHandler(handler)
    assert not [m for m in messages if "not sharded" in m or "TP rules" in m]
    assert logging.getLogger("transformers.modeling_utils").level == before


def test_delay_load_reads_only_the_config(tiny_tower_dir) -> None:
    tower = CLIPVisionTower(str(tiny_tower_dir), _args(tiny_tower_dir), delay_load=True)
    assert not tower.is_loaded and tower.hidden_size == 32 and tower.num_patches == GRID * GRID
    with pytest.raises(RuntimeError, match="call load_model"):
        tower(torch.zeros(1, 3, 48, 48))
    tower.load_model()
    assert tower.is_loaded and tower(torch.zeros(1, 3, 48, 48)).shape == (1, GRID * GRID, 32)


def test_unknown_select_feature(tiny_tower_dir) -> None:
    with pytest.raises(ValueError, match=r"unknown mm_vision_select_feature 'cls'; expected one of patch, cls_patch"):
        build_vision_tower(_args(tiny_tower_dir, mm_vision_select_feature="cls"), delay_load=True)


def test_tower_names(tmp_path, offline_hub) -> None:
    with pytest.raises(ValueError, match=r"vision tower 'my-org/vit' is not a local directory and could not be downloaded"):
        build_vision_tower(argparse.Namespace(vision_tower="my-org/vit"))
    missing = tmp_path / "clip"
    with pytest.raises(ValueError, match=rf"vision tower directory '{missing}' does not exist"):
        build_vision_tower(argparse.Namespace(mm_vision_tower=str(missing)))
    with pytest.raises(ValueError, match="no vision tower given"):
        build_vision_tower(argparse.Namespace(mm_vision_tower=None))
