"""A vision tower's paired text encoder: CLIP's text tower and its image–text projection, for compressors that weigh
patches by their relevance to the text (``ModelNeeds(text_encoder="tower")``).

LLaVA loads only the vision half of a CLIP checkpoint; released towers (``openai/clip-vit-large-patch14-336``) are
whole ``CLIPModel`` folders that also hold the text tower, the two projections into the shared space and the
tokenizer. :func:`load_paired_text` reads those from the same folder, in float32, outside the LLaVA model's
module tree (so they are neither saved into a LLaVA checkpoint nor cast with it). Text longer than the text
tower's context is encoded in context-length segments, one embedding each (:func:`encode_segments`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

logger = logging.getLogger(__name__)

__all__ = ["PairedText", "encode_segments", "load_paired_text"]


@dataclass
class PairedText:
    """A loaded paired text encoder.

    Attributes:
        tokenizer: The tower's text tokenizer (BOS/EOS added, as CLIP's).
        text_model: ``ids [S, L], mask [S, L] -> text_embeds [S, C]`` (CLIP: ``CLIPTextModelWithProjection``).
        visual_projection: ``Linear(D, C)`` from the vision width into the shared space.
        context: The text tower's context length (``max_position_embeddings``: 77 for CLIP).
    """

    tokenizer: Any
    text_model: nn.Module
    visual_projection: nn.Module
    context: int

    def to(self, device: torch.device) -> "PairedText":
        self.text_model.to(device)
        self.visual_projection.to(device)
        return self


def load_paired_text(name: str, family: str, quiet: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext) -> PairedText:
    """The text tower, its projection, the visual projection and the tokenizer of the CLIP checkpoint ``name``.

    ``quiet``: the context the weights load in (the tower's :func:`~.base.quiet_loading`, passed by the tower so this
    module does not import it back: transformers' per-key report of the other half's weights folded away).

    Raises:
        ValueError: One sentence when the tower family has no paired encoder here, or the folder holds no text
            tower or tokenizer (e.g. a ``CLIPVisionModel``-only checkpoint).
    """
    if family != "clip":
        raise ValueError(
            f"this projector weighs patches by their relevance to the text with the vision tower's paired CLIP text encoder, "
            f"but the {family or 'unknown'} tower {name!r} has none here; use a CLIP tower (e.g. openai/clip-vit-large-patch14-336)"
        )
    from transformers import AutoConfig, AutoTokenizer, CLIPTextModelWithProjection, CLIPVisionModelWithProjection

    try:
        config = AutoConfig.from_pretrained(name)
        if getattr(config, "model_type", None) != "clip":
            raise OSError(f"its config.json is a {getattr(config, 'model_type', None)!r} model, not a whole CLIP model")
        tokenizer = AutoTokenizer.from_pretrained(name)
        with quiet():
            text_model = CLIPTextModelWithProjection.from_pretrained(name, dtype=torch.float32)
            projection = CLIPVisionModelWithProjection.from_pretrained(name, dtype=torch.float32).visual_projection
    except (OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(
            f"this projector needs the CLIP text tower and tokenizer stored with the vision tower, but {name!r} has none "
            f"({reason}); point mm_vision_tower at a whole CLIP checkpoint (text tower, projections and tokenizer files)"
        ) from None
    text_model.requires_grad_(False).eval()
    projection.requires_grad_(False)
    logger.info("loaded the paired CLIP text encoder of %s (context %d tokens)", name, config.text_config.max_position_embeddings)
    return PairedText(tokenizer, text_model, projection, int(config.text_config.max_position_embeddings))


def encode_segments(paired: PairedText, ids: torch.Tensor) -> torch.Tensor:
    """``[L]`` token ids → ``[⌈L / context⌉, C]`` float32 projected text embeddings.

    The ids are cut into context-length segments, the last one padded with id 0 under a zero attention mask
    (as instruction-conditioned pruners feed long instructions to CLIP); each segment gives one pooled, projected embedding.
    """
    ids = ids.reshape(-1).long()
    device = next(paired.text_model.parameters()).device
    segments = max(1, -(-ids.numel() // paired.context))
    padded = ids.new_zeros(segments * paired.context)
    padded[: ids.numel()] = ids
    mask = torch.zeros_like(padded)
    mask[: ids.numel()] = 1
    with torch.no_grad():
        out = paired.text_model(input_ids=padded.view(segments, -1).to(device), attention_mask=mask.view(segments, -1).to(device))
    return out.text_embeds.float()
