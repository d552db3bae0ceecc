"""Fixtures shared by the model tests."""

from __future__ import annotations

from pathlib import Path

import pytest

#: The tiny OneVision-style checkpoint's SigLIP input side and patch: a 9 x 9 grid, the odd 27 x 27 in small.
OV_SIDE, OV_PATCH = 54, 6


@pytest.fixture(scope="session")
def ov_checkpoint(tmp_path_factory, tiny_qwen_tokenizer_dir) -> tuple[Path, Path]:
    """A tiny OneVision-style ``llava_qwen`` + SigLIP checkpoint (9 x 9 grid, spatial_unpad, NeXT's video keys)."""
    from llava.testing.tiny import build_tiny_llava_checkpoint, build_tiny_siglip_tower

    root = tmp_path_factory.mktemp("ov")
    tower = build_tiny_siglip_tower(root / "siglip", image_size=OV_SIDE, patch_size=OV_PATCH)
    path = build_tiny_llava_checkpoint(
        root / "llava-onevision-qwen2-tiny-ov", tower, tiny_qwen_tokenizer_dir, llm="qwen2",
        extra_config={"mm_patch_merge_type": "spatial_unpad", "image_aspect_ratio": "anyres_max_9"},
    )
    return path, tower


@pytest.fixture(scope="session")
def family(tmp_path_factory, tiny_tower_dir, tiny_tokenizer_dir, tiny_qwen_tokenizer_dir):
    """``family(llm) -> (tokenizer, model, image_processor, context_len)``: a tiny LLaVA checkpoint of the LLM family
    ``llm`` (``llama``, ``qwen2``, ``mistral``) on the tiny CLIP tower, built and loaded once per session. Tests must
    leave the model as they found it (e.g. switch a fast path they turned on back off)."""
    from llava.testing.tiny import build_tiny_llava_checkpoint

    from ._support import load

    cache: dict[str, tuple] = {}
    root = tmp_path_factory.mktemp("llm_family")
    tokenizers = {"llama": tiny_tokenizer_dir, "mistral": tiny_tokenizer_dir, "qwen2": tiny_qwen_tokenizer_dir}

    def get(llm: str):
        if llm not in cache:
            path = build_tiny_llava_checkpoint(Path(root) / f"llava-family-{llm}", tiny_tower_dir, tokenizers[llm], llm=llm)
            cache[llm] = load(path)
        return cache[llm]

    return get
