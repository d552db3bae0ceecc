"""Tiny LLaVA-style configs on disk, shared by the ``braco cost`` tests."""

import json

import pytest

TINY_TOWER = {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "image_size": 56, "patch_size": 14}  # 4x4 grid + CLS = 17 tokens
TINY_LLM = {"hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 100}


def write_tiny_llava(folder, **llm):
    """Write an upstream-LLaVA-style ``config.json`` (the tiny LLM, ``llm`` overriding its values) whose
    ``mm_vision_tower`` is the tiny tower in a local folder; returns its path."""
    (folder / "tower").mkdir()
    (folder / "tower" / "config.json").write_text(json.dumps(TINY_TOWER))
    config = {"model_type": "llava_llama", **TINY_LLM, **llm, "mm_vision_tower": "tower", "mm_hidden_size": 32,
              "mm_projector_type": "mlp2x_gelu", "mm_vision_select_layer": -2}
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def tiny_llava(tmp_path):
    """An upstream-LLaVA-style ``config.json`` whose ``mm_vision_tower`` is a local folder."""
    return write_tiny_llava(tmp_path)
