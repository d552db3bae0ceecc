"""CLIP vision tower (``model_type`` ``clip`` / ``clip_vision_model``): a CLS token plus an N x N patch grid.

Upstream LLaVA's tower: ``hidden_states[mm_vision_select_layer]`` (-2, the penultimate layer, before the
post-layernorm) with the CLS token dropped (``patch``, 576 tokens for CLIP-L/14 at 336 px) or kept
(``cls_patch``). The processor resizes the shortest edge and centre-crops (CLIP mean/std).
"""

from __future__ import annotations

from typing import Any

from transformers import CLIPImageProcessorPil, CLIPVisionConfig, CLIPVisionModel

from .base import BaseVisionTower
from .registry import register_vision_tower


@register_vision_tower("clip", "clip_vision_model")
class CLIPVisionTower(BaseVisionTower):
    """A frozen ``CLIPVisionModel``; full ``CLIPModel`` checkpoints load their vision half."""

    model_class = CLIPVisionModel
    config_class = CLIPVisionConfig
    processor_class = CLIPImageProcessorPil
    has_cls_token = True
    family = "clip"

    @classmethod
    def default_processor(cls, image_size: int) -> Any:
        """Shortest edge ``image_size`` (bicubic), centre crop ``image_size``, OpenAI CLIP mean/std."""
        return CLIPImageProcessorPil(
            size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
        )
