"""Published vision towers whose dimensions are built in, so a config naming one needs no download.

``KNOWN_TOWERS`` maps an ``mm_vision_tower`` hub name to a function returning its transformers vision config. The
projector builder reads a named tower's shape from here when the name is not a local folder, and the cost engine's
presets (:mod:`llava.cost.presets`) build their pipelines on the same configs. transformers is imported when a config
is built, so importing this module stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import CLIPVisionConfig, SiglipVisionConfig

__all__ = ["KNOWN_TOWERS", "clip_vit_l14_336", "siglip2_so400m_512", "siglip_so400m_384"]


def clip_vit_l14_336() -> CLIPVisionConfig:
    """openai/clip-vit-large-patch14-336: 24 layers, d 1024, MLP 4096, 16 heads, 336 px / 14 → 577 tokens."""
    from transformers import CLIPVisionConfig

    return CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                            image_size=336, patch_size=14, projection_dim=768, hidden_act="quick_gelu")


def siglip_so400m_384() -> SiglipVisionConfig:
    """google/siglip-so400m-patch14-384: 27 layers, d 1152, MLP 4304, 16 heads, 384 px / 14 → 729 tokens.

    ``vision_use_head=False``: LLaVA-style towers read hidden states and drop the pooling head.
    """
    from transformers import SiglipVisionConfig

    return SiglipVisionConfig(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                              image_size=384, patch_size=14, hidden_act="gelu_pytorch_tanh", vision_use_head=False)


def siglip2_so400m_512() -> SiglipVisionConfig:
    """google/siglip2-so400m-patch16-512 (fixed resolution, stored as ``siglip``): so400m widths, 512 px / 16 → 32 x 32
    = 1024 tokens, no CLS; ``vision_use_head=False`` as above."""
    from transformers import SiglipVisionConfig

    return SiglipVisionConfig(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                              image_size=512, patch_size=16, hidden_act="gelu_pytorch_tanh", vision_use_head=False)


#: ``mm_vision_tower`` hub names whose published configs are built in.
KNOWN_TOWERS: dict[str, Callable[[], Any]] = {
    "openai/clip-vit-large-patch14-336": clip_vit_l14_336,
    "google/siglip-so400m-patch14-384": siglip_so400m_384,
    "google/siglip2-so400m-patch16-512": siglip2_so400m_512,
}
