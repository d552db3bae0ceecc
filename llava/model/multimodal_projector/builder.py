"""``build_vision_projector(config)``: upstream LLaVA's signature, on the one projector registry (:mod:`.registry`).

A projector type (``config.mm_projector_type``, default ``linear``) is resolved by the registry's rule (exact names
before patterns). The builder then, in this order: checks and normalises the owning plugin's ``config.json`` keys;
gives the factory a typed :class:`~llava.plugin_api.BuildContext` (widths, select layer, the tower's grid, depth and CLS,
made by :func:`.registry.build_context`, which makes the cost model's too);
writes the config keys the factory returned into the config, so ``config.json`` rebuilds the same module; and keeps
what the projector needs from the model on the module (:func:`~.needs.projector_needs`).

The tower's shape comes from the tower object when the model passes it, from a transformers vision config
(``vision_cfg=``, as LLaVA-NeXT passes it), or from the tower that ``config.mm_vision_tower`` names, read once
here when a factory asks for it (factories read no files).
"""

from __future__ import annotations

import os
from typing import Any

import torch.nn as nn

from llava.plugin_api import BuiltProjector, TowerShape, mlp_projector

from .needs import attach_needs
from .registry import build_context, list_projectors, resolve_projector

__all__ = ["build_vision_projector", "list_projectors", "mlp_projector", "resolve_projector", "tower_shape"]


def build_vision_projector(config: Any, delay_load: bool = False, *, vision_tower: Any = None, vision_cfg: Any = None,
                           **kwargs: Any) -> nn.Module:
    """Build the projector named by ``config.mm_projector_type`` (see the module docstring).

    Args:
        config: The whole model config (``mm_hidden_size``, ``hidden_size``, the plugin's keys, the tower's name).
        delay_load: Upstream's argument; projectors have nothing to load later, so it changes nothing.
        vision_tower: The model's vision tower, when it is built (its grid and depth are then read from it).
        vision_cfg: A transformers vision config (LLaVA-NeXT's keyword), used when no tower object is given.
        **kwargs: Upstream passes other keywords through; they are ignored.

    Raises:
        ValueError: For an unknown name, plugin keys that are unknown or invalid, or a type the tower cannot give.
    """
    registration, context = build_context(
        config, mm_hidden=config.mm_hidden_size, hidden=config.hidden_size,
        tower_loader=lambda: tower_shape(config, vision_tower=vision_tower, vision_cfg=vision_cfg),
    )
    built = registration.entry.factory(context)
    if not isinstance(built, BuiltProjector):
        raise TypeError(f"the factory of {context.projector_type!r} returned {type(built).__name__}, not a BuiltProjector")
    for key, value in built.config_keys.items():
        setattr(config, key, value)
    return attach_needs(built.module, built.needs if built.needs is not None else registration.plugin.needs)


def tower_shape(config: Any, *, vision_tower: Any = None, vision_cfg: Any = None) -> TowerShape | None:
    """The shape of the tower a projector is built for, or ``None`` when the config names no tower.

    Raises:
        ValueError: When the named tower's config cannot be read (one sentence from the tower registry).
    """
    if vision_tower is not None:
        return TowerShape(tuple(vision_tower.grid_shape), int(vision_tower.config.num_hidden_layers),
                          bool(getattr(vision_tower, "has_cls_token", True)))
    if vision_cfg is not None:
        return _shape_of_config(vision_cfg, _tower_class_for(getattr(vision_cfg, "model_type", "")))
    name = getattr(config, "mm_vision_tower", None) or getattr(config, "vision_tower", None)
    if not name:
        return None
    name = os.path.expanduser(os.fspath(name))
    tower_class = _tower_class(name)
    return _shape_of_config(_read_tower_config(name, tower_class), tower_class)


def _tower_class(name: str) -> Any:
    from llava.model.multimodal_encoder.builder import tower_model_type
    from llava.model.multimodal_encoder.registry import resolve_vision_tower

    return resolve_vision_tower(tower_model_type(name), source=name)


def _tower_class_for(model_type: str) -> Any:
    from llava.model.multimodal_encoder.registry import resolve_vision_tower

    return resolve_vision_tower(model_type, source="vision_cfg")


def _read_tower_config(name: str, tower_class: Any) -> Any:
    """A tower's vision config: a local folder, or a published tower whose dimensions are built in (no network)."""
    if not os.path.isdir(name):
        from llava.model.published import KNOWN_TOWERS

        if name in KNOWN_TOWERS:
            return KNOWN_TOWERS[name]()
    return tower_class.config_class.from_pretrained(name)


def _pair(value: Any) -> tuple[int, int]:
    return (int(value[0]), int(value[1])) if isinstance(value, (list, tuple)) else (int(value), int(value))


def _shape_of_config(vision: Any, tower_class: Any) -> TowerShape:
    vision = getattr(vision, "vision_config", None) or vision  # a whole CLIP/SigLIP config: its vision half
    (height, width), (patch_h, patch_w) = _pair(vision.image_size), _pair(vision.patch_size)
    return TowerShape((height // patch_h, width // patch_w), int(vision.num_hidden_layers),
                      bool(getattr(tower_class, "has_cls_token", True)))

