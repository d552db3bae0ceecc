"""SigLIP vision tower (``model_type`` ``siglip`` / ``siglip_vision_model``): an N x N patch grid, no CLS token.

Covers SigLIP (e.g. so400m-patch14-384: 27 x 27 = 729 tokens, the last 6 pixel rows/columns unseen by the
stride-14 patches) and fixed-resolution SigLIP2 checkpoints, which transformers stores in the same format
(``model_type "siglip"``, e.g. so400m-patch16-512: 32 x 32 = 1024 tokens). Nothing is dropped for ``patch``;
``cls_patch`` is refused. The processor resizes straight to the square input side (no crop, aspect not kept)
and normalises with mean = std = 0.5; its resample filter comes from ``preprocessor_config.json`` (bicubic for
SigLIP, bilinear for the SigLIP2 fixed-resolution releases). The attention-pool head feeds only
``pooler_output``, which LLaVA never reads, so it is not built.

``SigLipVisionTower`` (LLaVA-NeXT's name) is this class. Unlike NeXT's tower, nothing is hard-coded: the grid,
width and layer come from the checkpoint and ``mm_vision_select_layer`` (NeXT drops the last layer and reads the
new last one, which is ``-2`` here).
"""

from __future__ import annotations

from typing import Any

from transformers import SiglipImageProcessorPil, SiglipVisionConfig, SiglipVisionModel

from .base import BaseVisionTower
from .registry import register_vision_tower


@register_vision_tower("siglip", "siglip_vision_model")
class SiglipVisionTower(BaseVisionTower):
    """A frozen ``SiglipVisionModel``; full ``SiglipModel`` checkpoints load their vision half."""

    model_class = SiglipVisionModel
    config_class = SiglipVisionConfig
    processor_class = SiglipImageProcessorPil
    has_cls_token = False
    family = "siglip"
    model_overrides = {"vision_use_head": False}

    @classmethod
    def default_processor(cls, image_size: int) -> Any:
        """Resize to ``image_size`` x ``image_size`` (bicubic), mean = std = 0.5."""
        return SiglipImageProcessorPil(
            size={"height": image_size, "width": image_size}, image_mean=[0.5] * 3, image_std=[0.5] * 3
        )


#: LLaVA-NeXT's spelling (``llava.model.multimodal_encoder.siglip_encoder.SigLipVisionTower``): the same class.
SigLipVisionTower = SiglipVisionTower
