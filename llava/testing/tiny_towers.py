"""Tiny random vision towers (CLIP, SigLIP, fixed-resolution SigLIP2) saved with ``save_pretrained`` (part of
:mod:`llava.testing.tiny`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .tiny_tokenizers import CLIP_SPECIAL_TOKENS, PathLike, prepare_dir, save_tiny_clip_tokenizer


def save_tiny_model(model_factory: Any, path: Path, seed: int) -> None:
    """Build ``model_factory()`` under ``seed`` (without touching the global RNG) and ``save_pretrained`` it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model_factory().save_pretrained(path)


def _check_tiling(image_size: int, patch_size: int, exact: bool) -> None:
    if image_size < patch_size or (exact and image_size % patch_size):
        need = "a multiple of" if exact else "at least"
        raise ValueError(f"image_size {image_size} must be {need} patch_size {patch_size}")


#: Context length of the tiny text towers (CLIP's is 77): short, so that a question spans several segments.
TINY_TEXT_CONTEXT = 16


def _tiny_text_config(config_class: Any, hidden: int, heads: int, vocab_size: int = 64, **extra: Any) -> Any:
    """A one-layer text tower config (the whole CLIP/SigLIP checkpoint a release ships).

    ``eos_token_id`` 2 is the released CLIP configs' value, with which CLIP pools at the highest id in each row (its
    end token, last in the vocabulary).
    """
    return config_class(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
                        num_attention_heads=heads, vocab_size=vocab_size, max_position_embeddings=TINY_TEXT_CONTEXT,
                        bos_token_id=1, eos_token_id=2, pad_token_id=0, **extra)


def build_tiny_clip_tower(
    out_dir: PathLike,
    image_size: int = 32,
    patch_size: int = 8,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    intermediate: int | None = None,
    seed: int = 0,
    full_model: bool = False,
) -> Path:
    """Save a random CLIP vision tower and a matching CLIP image processor (resize + crop to ``image_size``).

    The patch grid is ``(image_size // patch_size)`` per side: 32/8 → 4x4 (16 tokens, plus CLS), 48/8 → 6x6.

    Args:
        full_model: Save a whole ``CLIPModel`` (``model_type "clip"``: text tower, both projections and a CLIP
            tokenizer, as the released ``openai/clip-vit-*`` checkpoints; see :func:`save_tiny_clip_tokenizer`)
            instead of a ``CLIPVisionModel`` (``clip_vision_model``).

    Returns:
        ``out_dir`` as a ``Path``.
    """
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPTextConfig, CLIPVisionConfig, CLIPVisionModel

    _check_tiling(image_size, patch_size, exact=True)
    vision = CLIPVisionConfig(
        hidden_size=hidden,
        intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        image_size=image_size,
        patch_size=patch_size,
        projection_dim=hidden,
    )
    path = prepare_dir(out_dir)
    if full_model:
        text = _tiny_text_config(CLIPTextConfig, hidden, heads, vocab_size=512 + len(CLIP_SPECIAL_TOKENS), projection_dim=hidden)
        config = CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=hidden)
        save_tiny_model(lambda: CLIPModel(config), path, seed)
        save_tiny_clip_tokenizer(path, TINY_TEXT_CONTEXT)
    else:
        save_tiny_model(lambda: CLIPVisionModel(vision), path, seed)
    processor = CLIPImageProcessorPil(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    processor.save_pretrained(path)
    return path


def build_tiny_siglip_tower(
    out_dir: PathLike,
    image_size: int = 54,
    patch_size: int = 6,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    intermediate: int | None = None,
    seed: int = 0,
    full_model: bool = False,
    resample: str = "bicubic",
) -> Path:
    """Save a random SigLIP vision tower (no CLS token) and its processor (resize to ``image_size``², mean/std 0.5).

    The grid is ``image_size // patch_size`` per side; as in so400m-patch14-384 (384 // 14 = 27) the size need
    not be a multiple of the patch: 54/6 → 9x9 (a "27x27-style" odd grid), 57/6 → 9x9 with 3 pixel rows and
    columns unseen, 64/8 → 8x8 (a "32x32-style" even grid).

    Args:
        full_model: Save a whole ``SiglipModel`` (``model_type "siglip"``, text tower included, as the
            released ``google/siglip*`` checkpoints) instead of a ``SiglipVisionModel`` (``siglip_vision_model``).
        resample: ``"bicubic"`` (SigLIP releases) or ``"bilinear"`` (SigLIP2 fixed-resolution releases).

    Returns:
        ``out_dir`` as a ``Path``.
    """
    from transformers import SiglipConfig, SiglipImageProcessorPil, SiglipModel, SiglipTextConfig, SiglipVisionConfig, SiglipVisionModel
    from transformers.image_utils import PILImageResampling

    filters = {"bicubic": PILImageResampling.BICUBIC, "bilinear": PILImageResampling.BILINEAR}
    if resample not in filters:
        raise ValueError(f"unknown resample {resample!r}; expected one of {', '.join(filters)}")
    _check_tiling(image_size, patch_size, exact=False)
    vision = SiglipVisionConfig(
        hidden_size=hidden,
        intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        image_size=image_size,
        patch_size=patch_size,
    )
    path = prepare_dir(out_dir)
    if full_model:
        text = _tiny_text_config(SiglipTextConfig, hidden, heads)
        config = SiglipConfig(text_config=text.to_dict(), vision_config=vision.to_dict())
        save_tiny_model(lambda: SiglipModel(config), path, seed)
    else:
        save_tiny_model(lambda: SiglipVisionModel(vision), path, seed)
    processor = SiglipImageProcessorPil(
        size={"height": image_size, "width": image_size}, resample=filters[resample],
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )
    processor.save_pretrained(path)
    return path


def build_tiny_siglip2_tower(out_dir: PathLike, image_size: int = 64, patch_size: int = 8, **kwargs: Any) -> Path:
    """A fixed-resolution SigLIP2-style tower: saved as SigLIP releases it (a whole ``SiglipModel``,
    ``model_type "siglip"``) with a bilinear processor and an exactly tiled even grid (64/8 → 8x8, like
    so400m-patch16-512's 32x32). NaFlex SigLIP2 (``siglip2_vision_model``) is a different, unsupported format.
    """
    kwargs.setdefault("full_model", True)
    kwargs.setdefault("resample", "bilinear")
    return build_tiny_siglip_tower(out_dir, image_size=image_size, patch_size=patch_size, **kwargs)


#: Tiny-tower builders by kind: every registered tower model_type, plus ``siglip2`` (fixed resolution).
TINY_TOWER_BUILDERS: dict[str, Any] = {
    "clip": lambda out_dir, **kw: build_tiny_clip_tower(out_dir, full_model=True, **kw),
    "clip_vision_model": build_tiny_clip_tower,
    "siglip": lambda out_dir, **kw: build_tiny_siglip_tower(out_dir, full_model=True, **kw),
    "siglip_vision_model": build_tiny_siglip_tower,
    "siglip2": build_tiny_siglip2_tower,
}


def build_tiny_vision_tower(kind: str, out_dir: PathLike, **kwargs: Any) -> Path:
    """Save a tiny tower of ``kind`` (a key of :data:`TINY_TOWER_BUILDERS`); kwargs go to its builder."""
    if kind not in TINY_TOWER_BUILDERS:
        raise ValueError(f"unknown tiny tower kind {kind!r}; expected one of {', '.join(TINY_TOWER_BUILDERS)}")
    return TINY_TOWER_BUILDERS[kind](out_dir, **kwargs)


__all__ = ["TINY_TOWER_BUILDERS", "build_tiny_clip_tower", "build_tiny_siglip2_tower", "build_tiny_siglip_tower",
           "build_tiny_vision_tower", "save_tiny_model"]
