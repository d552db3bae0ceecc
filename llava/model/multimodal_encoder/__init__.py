"""Vision encoders that turn pixels into patch features for the projector."""

from .builder import build_vision_tower
from .clip_encoder import CLIPVisionTower

__all__ = ["CLIPVisionTower", "build_vision_tower"]
