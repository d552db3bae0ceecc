"""Multimodal projector registry.

``build_vision_projector(config)`` keeps upstream LLaVA's signature but is a lookup: a projector type
(``config.mm_projector_type``) is matched against registered names, exact names first, then anchored
regular expressions, and the matching factory builds the module from the model config.

Built-ins (``linear``, ``mlp{N}x_gelu``, ``identity``) register here. Installed compressors register
themselves through the ``llava.projectors`` entry-point group: each entry point names a module whose
import calls :func:`llava.model.multimodal_projector.plugins.register_plugin` (which registers the plugin's
name patterns here, together with its settings, needs, callbacks and view). The entry points are imported
once, the first time a name is looked up. Building a projector of a plugin first checks the plugin's
``config.json`` keys (:func:`~llava.model.multimodal_projector.plugins.check_plugin_config`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable

import torch.nn as nn

from llava.utils import load_entry_points

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "llava.projectors"

ProjectorFactory = Callable[[object, "re.Match[str]"], nn.Module]


@dataclass(frozen=True)
class _Registration:
    pattern: str
    regex: re.Pattern
    factory: ProjectorFactory
    description: str


_REGISTRY: dict[str, _Registration] = {}


def register_projector(pattern: str, description: str = "") -> Callable[[ProjectorFactory], ProjectorFactory]:
    """Register ``factory(config, match) -> nn.Module`` for projector types that fully match ``pattern``.

    ``pattern`` is a regular expression matched against the whole name (``re.fullmatch``); a plain name
    such as ``"identity"`` is its own pattern. Registering the same pattern twice replaces the factory.
    """
    regex = re.compile(pattern)

    def decorator(factory: ProjectorFactory) -> ProjectorFactory:
        _REGISTRY[pattern] = _Registration(pattern, regex, factory, description or (factory.__doc__ or "").strip())
        return factory

    return decorator


def unregister_projector(pattern: str) -> None:
    """Remove a registered pattern (a no-op when it is not registered)."""
    _REGISTRY.pop(pattern, None)


def load_plugins() -> None:
    """Import every ``llava.projectors`` entry point once."""
    load_entry_points(ENTRY_POINT_GROUP, "projector")


def list_projectors() -> list[str]:
    """The registered projector patterns, built-ins first, in registration order."""
    load_plugins()
    return list(_REGISTRY)


def _is_exact(pattern: str) -> bool:
    return re.escape(pattern) == pattern


def resolve_projector(name: str) -> tuple[ProjectorFactory, "re.Match[str]"]:
    """Find the factory for ``name``: an exact registered name first, then the first matching pattern."""
    load_plugins()
    regs = sorted(_REGISTRY.values(), key=lambda r: not _is_exact(r.pattern))
    for reg in regs:
        match = reg.regex.fullmatch(name)
        if match is not None:
            return reg.factory, match
    known = ", ".join(list_projectors())
    raise ValueError(f"unknown mm_projector_type {name!r}; known projector types: {known}")


def build_vision_projector(config, delay_load: bool = False, **kwargs) -> nn.Module:
    """Build the projector named by ``config.mm_projector_type`` (default ``linear``).

    ``config`` is the whole model config: factories read ``mm_hidden_size``, ``hidden_size`` and any
    projector-specific keys from it.

    The module carries what its compressor plugin needs from the model (``compressor_needs``, a
    :class:`~llava.model.multimodal_projector.plugins.ModelNeeds`).

    Raises:
        ValueError: For an unknown name, or plugin keys in ``config`` that are unknown or invalid.
    """
    from .plugins import attach_needs, check_plugin_config

    name = getattr(config, "mm_projector_type", None) or "linear"
    factory, match = resolve_projector(name)
    check_plugin_config(config)
    # What the compressor needs from the model is resolved here, once (after the factory wrote back its
    # resolved keys), and kept on the module for encode_images.
    return attach_needs(factory(config, match), config)


def mlp_projector(in_features: int, out_features: int, depth: int) -> list[nn.Module]:
    """Upstream's ``mlp{depth}x_gelu`` layers: Linear, then (depth-1) x [GELU (exact), Linear]."""
    if depth < 1:
        raise ValueError(f"mlp projector depth must be at least 1, got {depth}")
    layers: list[nn.Module] = [nn.Linear(in_features, out_features)]
    for _ in range(depth - 1):
        layers += [nn.GELU(), nn.Linear(out_features, out_features)]
    return layers


@register_projector("linear", "Linear(mm_hidden_size, hidden_size)")
def _linear(config, match) -> nn.Module:
    return nn.Linear(config.mm_hidden_size, config.hidden_size)


@register_projector(r"mlp(\d+)x_gelu", "Linear, then (N-1) x [GELU, Linear]; weights at even indices")
def _mlp_gelu(config, match) -> nn.Module:
    return nn.Sequential(*mlp_projector(config.mm_hidden_size, config.hidden_size, int(match.group(1))))


@register_projector("identity", "no projection (mm_hidden_size must equal hidden_size)")
def _identity(config, match) -> nn.Module:
    return nn.Identity()
