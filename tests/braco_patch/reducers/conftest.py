"""The tiny LLaVA checkpoint the reducer tests run through the real seam (one per test module that asks for it)."""

from __future__ import annotations

import pytest

from llava.testing.tiny import build_tiny_llava_checkpoint
from tests.llava.model._support import load

from .seam import LAYERS


@pytest.fixture(scope="module")
def tiny(request, tmp_path_factory, tiny_tower_dir, tiny_tokenizer_dir):
    """``(tokenizer, model, image_processor, context_len)`` of a Llama LLaVA with :data:`~.seam.LAYERS` decoder layers and
    an ``mlp2x_gelu`` projector, saved and loaded through ``load_pretrained_model``."""
    root = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    path = build_tiny_llava_checkpoint(root / "llava", tiny_tower_dir, tiny_tokenizer_dir, llm="llama", layers=LAYERS, projector_type="mlp2x_gelu")
    return load(path)
