"""Build the vision tower named by a model config (``mm_vision_tower``) or training args (``vision_tower``)."""

from __future__ import annotations

import os
from typing import Any

from .clip_encoder import CLIPVisionTower

# Hub names upstream LLaVA accepts without a local directory.
HUB_PREFIXES = ("openai", "laion")
HUB_MARKER = "ShareGPT4V"


def _looks_like_local_path(name: str) -> bool:
    return os.path.isabs(name) or name.startswith(("./", "../", "~", ".\\", "..\\"))


def build_vision_tower(vision_tower_cfg: Any, **kwargs: Any) -> CLIPVisionTower:
    """Return a :class:`CLIPVisionTower` for ``vision_tower_cfg.mm_vision_tower`` (or ``.vision_tower``).

    Accepted: an existing local directory, a hub name starting with ``openai`` or ``laion``, or a name
    containing ``ShareGPT4V`` (upstream's rule).

    Args:
        vision_tower_cfg: A model config or training arguments.
        **kwargs: Passed to :class:`CLIPVisionTower` (e.g. ``delay_load=True``).

    Raises:
        ValueError: If no tower is named, a local directory is missing, the name is not accepted, or S2
            towers are requested.
    """
    name = getattr(vision_tower_cfg, "mm_vision_tower", None) or getattr(vision_tower_cfg, "vision_tower", None)
    if not name:
        raise ValueError("no vision tower given; set mm_vision_tower (model config) or vision_tower (training args)")
    name = os.path.expanduser(str(name))
    if getattr(vision_tower_cfg, "s2", False):
        raise ValueError(f"S2 vision towers (s2=True for {name!r}) are not supported by this build; set s2 to False")
    if os.path.exists(name) or name.startswith(HUB_PREFIXES) or HUB_MARKER in name:
        return CLIPVisionTower(name, args=vision_tower_cfg, **kwargs)
    if _looks_like_local_path(name):
        raise ValueError(f"vision tower directory {name!r} does not exist; point mm_vision_tower at a saved CLIP model")
    raise ValueError(
        f"unknown vision tower {name!r}; expected an existing local directory, a hub name starting with "
        f"'openai' or 'laion', or a name containing {HUB_MARKER!r}"
    )
