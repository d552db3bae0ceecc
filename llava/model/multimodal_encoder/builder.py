"""Build the vision tower named by a model config (``mm_vision_tower``) or training args (``vision_tower``).

The tower class comes from the registry (:mod:`.registry`), keyed by the tower checkpoint's own ``model_type``:

* a local directory (a relative one read from the working directory, then from the checkpoint's folder:
  :mod:`.location`): its ``config.json`` ``model_type`` (``clip``/``clip_vision_model`` → CLIP,
  ``siglip``/``siglip_vision_model`` → SigLIP and fixed-resolution SigLIP2);
* a hub name starting with ``openai`` or ``laion``, or containing ``ShareGPT4V``: CLIP without a lookup
  (upstream LLaVA's name rule, kept so released configs behave as before);
* any other name: resolved like every transformers name (``AutoConfig``), which needs the model hub.
"""

from __future__ import annotations

import json
import os
from typing import Any

from . import clip_encoder as _clip  # noqa: F401  (registers the built-in towers)
from . import siglip_encoder as _siglip  # noqa: F401
from .base import BaseVisionTower, hub_unreachable_message
from .location import config_tower_path, resolve_tower_path
from .registry import list_vision_towers, register_vision_tower, resolve_vision_tower

__all__ = [
    "build_vision_tower", "config_tower_path", "list_vision_towers", "register_vision_tower", "resolve_tower_path",
    "tower_model_type",
]

# Hub names upstream LLaVA treats as CLIP without reading their config.
HUB_PREFIXES = ("openai", "laion")
HUB_MARKER = "ShareGPT4V"
UPSTREAM_CLIP_TYPE = "clip"


def _looks_like_local_path(name: str) -> bool:
    return os.path.isabs(name) or name.startswith(("./", "../", "~", ".\\", "..\\"))


def _local_model_type(directory: str) -> str:
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise ValueError(
            f"vision tower directory {directory!r} has no config.json; expected a saved transformers vision model "
            f"(model_type one of {', '.join(list_vision_towers())})"
        )
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except json.JSONDecodeError as exc:
        raise ValueError(f"vision tower config {path!r} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not model_type:
        known = ", ".join(list_vision_towers())
        raise ValueError(f"vision tower config {path!r} has no model_type; expected one of {known}")
    return str(model_type)


def tower_model_type(name: str) -> str:
    """The ``model_type`` that selects the tower class for a tower directory or hub name.

    Raises:
        ValueError: For a missing local directory, a directory without a readable ``config.json``, or a hub
            name that cannot be resolved (no network here).
    """
    if os.path.isdir(name):
        return _local_model_type(name)
    if os.path.exists(name) or _looks_like_local_path(name):
        raise ValueError(
            f"vision tower directory {name!r} does not exist (a relative path is read from the working directory, "
            "then from the checkpoint's folder); point mm_vision_tower at a saved tower directory"
        )
    if name.startswith(HUB_PREFIXES) or HUB_MARKER in name:
        return UPSTREAM_CLIP_TYPE
    from transformers import AutoConfig

    try:
        return str(AutoConfig.from_pretrained(name).model_type)
    except (OSError, ValueError) as exc:
        raise ValueError(hub_unreachable_message(name)) from exc


def build_vision_tower(vision_tower_cfg: Any, **kwargs: Any) -> BaseVisionTower:
    """Build the tower for ``vision_tower_cfg.mm_vision_tower`` (or ``.vision_tower``) through the registry.

    Args:
        vision_tower_cfg: A model config or training arguments (also read for ``mm_vision_select_layer``,
            ``mm_vision_select_feature``, ``unfreeze_mm_vision_tower``).
        **kwargs: Passed to the tower class (e.g. ``delay_load=True``).

    Raises:
        ValueError: If no tower is named, the name cannot be resolved, its ``model_type`` is not registered,
            or S2 towers are requested.
    """
    name = config_tower_path(vision_tower_cfg)
    if not name:
        raise ValueError("no vision tower given; set mm_vision_tower (model config) or vision_tower (training args)")
    if getattr(vision_tower_cfg, "s2", False):
        raise ValueError(f"S2 vision towers (s2=True for {name!r}) are not supported by this build; set s2 to False")
    factory = resolve_vision_tower(tower_model_type(name), source=name)
    return factory(name, args=vision_tower_cfg, **kwargs)
