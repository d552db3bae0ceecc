"""Vision-tower registry, keyed by the tower checkpoint's own ``config.json`` ``model_type``.

Same shape as the projector registry: built-in towers register with :func:`register_vision_tower` like any
plugin, and installed plugins register themselves through the ``llava.vision_towers`` entry-point group (each
entry point names a module whose import calls :func:`register_vision_tower`). Adding a tower is one file with
one decorated class.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from llava.utils import load_entry_points

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "llava.vision_towers"

#: ``factory(vision_tower_name, args, delay_load=...) -> tower`` (usually the tower class itself).
TowerFactory = Callable[..., Any]

_REGISTRY: dict[str, TowerFactory] = {}

#: model_types that are known but deliberately not towers here, with the reason (shown instead of the list).
_NOT_SUPPORTED = {
    "siglip2_vision_model": "NaFlex SigLIP2 towers give a variable, usually non-square token grid from pre-patchified "
    "inputs; use a fixed-resolution SigLIP2 checkpoint (stored as model_type 'siglip')",
    "siglip2": "NaFlex SigLIP2 towers give a variable, usually non-square token grid from pre-patchified inputs; use a "
    "fixed-resolution SigLIP2 checkpoint (stored as model_type 'siglip')",
}


def register_vision_tower(*model_types: str) -> Callable[[TowerFactory], TowerFactory]:
    """Register ``factory`` for towers whose checkpoint ``config.json`` has one of ``model_types``.

    Registering a model_type again replaces the earlier factory (so a plugin can override a built-in).
    """
    if not model_types:
        raise ValueError("register_vision_tower needs at least one model_type, got none")

    def decorator(factory: TowerFactory) -> TowerFactory:
        for model_type in model_types:
            _REGISTRY[model_type] = factory
        return factory

    return decorator


def _load_plugins() -> None:
    load_entry_points(ENTRY_POINT_GROUP, "vision-tower")


def list_vision_towers() -> list[str]:
    """The registered tower ``model_type`` values, built-ins first, in registration order."""
    _load_plugins()
    return list(_REGISTRY)


def resolve_vision_tower(model_type: str, source: str = "") -> TowerFactory:
    """The factory registered for ``model_type``.

    Args:
        model_type: The tower config's ``model_type`` (e.g. ``"siglip_vision_model"``).
        source: Where the model_type came from (a directory or hub name), for the error message.

    Raises:
        ValueError: If nothing is registered for ``model_type``.
    """
    _load_plugins()
    if model_type in _REGISTRY:
        return _REGISTRY[model_type]
    where = f" of vision tower {source!r}" if source else ""
    if model_type in _NOT_SUPPORTED:
        raise ValueError(f"model_type {model_type!r}{where} is not supported: {_NOT_SUPPORTED[model_type]}")
    known = ", ".join(list_vision_towers())
    raise ValueError(f"unknown vision tower model_type {model_type!r}{where}; registered model_types: {known}")
