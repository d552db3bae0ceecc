"""Shared helpers for the LLaVA model tests: loading tiny checkpoints, prompts, images and padding."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from llava.constants import IMAGE_TOKEN_INDEX
from llava.conversation import conv_templates
from llava.mm_utils import get_model_name_from_path, process_images, tokenizer_image_token
from llava.model.multimodal_projector.builder import resolve_projector

from ...conftest import OFFICIAL_FOURIER_C3S7, TOWER_IMAGE_SIZE, TOWER_PATCH_SIZE


def _braco_installed() -> bool:
    try:
        resolve_projector("braco_c3s7")
    except ValueError:
        return False
    return True


BRACO = pytest.mark.skipif(not _braco_installed(), reason="braco plugin not installed")
GRID = TOWER_IMAGE_SIZE // TOWER_PATCH_SIZE  # 6x6 patch grid

#: (projector type, extra config.json keys, expected visual tokens per image K).
PROJECTORS = [
    pytest.param("mlp2x_gelu", None, GRID * GRID, id="mlp2x_gelu"),
    pytest.param("braco_c1s3", None, 1 + 3, id="braco_c1s3", marks=BRACO),
    pytest.param("braco_c2s5", None, 4 + 5, id="braco_c2s5", marks=BRACO),
    pytest.param("braco_c3s7", None, 9 + 7, id="braco_c3s7", marks=BRACO),
    pytest.param("braco_c4s9", None, 16 + 9, id="braco_c4s9", marks=BRACO),
    pytest.param("fourier_mlp2x_gelu", OFFICIAL_FOURIER_C3S7, 9 + 7, id="fourier_mlp2x_gelu", marks=BRACO),
]

QUESTIONS = [
    "What is in the image?",
    "Describe it.",
    "How many circles are there in this picture, and what colour are they?",
]


def load(path: Path, model_base: Path | None = None, **kwargs: Any) -> tuple[Any, Any, Any, int]:
    from llava.model.builder import load_pretrained_model

    name = get_model_name_from_path(str(path))
    return load_pretrained_model(str(path), None if model_base is None else str(model_base), name, device="cpu", **kwargs)


def make_images(count: int) -> list[Image.Image]:
    """Distinct RGB images of different sizes and colours."""
    sizes = [(40, 30), (32, 32), (24, 48), (50, 20)]
    colours = [(220, 30, 30), (30, 200, 60), (20, 40, 230), (128, 128, 0)]
    images = []
    for index in range(count):
        image = Image.new("RGB", sizes[index % 4], colours[index % 4])
        image.paste((255, 255, 255), (2, 2, 2 + index + 4, 2 + index + 3))
        images.append(image)
    return images


def prompt_ids(tokenizer: Any, question: str, num_images: int = 1, conv_mode: str = "vicuna_v1") -> torch.Tensor:
    """``[L]`` ids of a one-turn prompt with ``num_images`` leading ``<image>`` markers."""
    conv = conv_templates[conv_mode].copy()
    conv.append_message(conv.roles[0], "<image>\n" * num_images + question)
    conv.append_message(conv.roles[1], None)
    return tokenizer_image_token(conv.get_prompt(), tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt")


def pixels(images: Sequence[Image.Image], image_processor: Any, model: Any) -> torch.Tensor:
    return process_images(list(images), image_processor, model.config).to(dtype=model.dtype)


def left_pad(sequences: Sequence[torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B, L]`` ids left-padded with ``pad_id`` and the matching attention mask."""
    width = max(len(seq) for seq in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, width - len(seq) :] = seq
        mask[row, width - len(seq) :] = 1
    return ids, mask
