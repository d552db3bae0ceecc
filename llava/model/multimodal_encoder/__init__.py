"""Vision encoders that turn pixels into patch features for the projector, found through a registry."""

from .base import BaseVisionTower, TowerOutputs
from .builder import build_vision_tower, tower_model_type
from .clip_encoder import CLIPVisionTower
from .location import config_tower_path, resolve_tower_path
from .registry import list_vision_towers, register_vision_tower, resolve_vision_tower
from .siglip_encoder import SigLipVisionTower, SiglipVisionTower

__all__ = [
    "BaseVisionTower",
    "CLIPVisionTower",
    "SigLipVisionTower",
    "SiglipVisionTower",
    "TowerOutputs",
    "build_vision_tower",
    "config_tower_path",
    "list_vision_towers",
    "register_vision_tower",
    "resolve_tower_path",
    "resolve_vision_tower",
    "tower_model_type",
]
