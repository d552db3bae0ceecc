"""The one seam between Braco and LLaVA: registers Braco projectors in LLaVA's projector registry.

Loaded through the ``llava.projectors`` entry point (setup.py), so upstream-style scripts need no import
edits. Registered projector types:

- ``braco_c{C}s{S}`` with an optional ``_coef``/``_idct``/``_randrot`` suffix (default ``auto``);
- ``braco_k{K}``: the paper's allocation for K ∈ {4, 9, 16, 25}, the documented rule for any other K;
- ``fourier_mlp{N}x_gelu``: the official implementation's type, configured by its ``mm_fourier_*`` keys with
  the official builder's defaults for absent keys (except that an absent ``mm_fourier_use_polar_pe`` means
  the paper's polar embedding).

Each builds ``Sequential(coder, Linear(mm_hidden, hidden), GELU, Linear(hidden, hidden))`` (indices 0–3,
the official checkpoint layout) and writes the resolved ``mm_*`` keys back into the model config, so
``config.json`` rebuilds the same module with no flags. It also registers a training-callback provider, so
``llava.train`` anneals the sparsemax temperature of every annealed coder in the model it trains.
"""

from __future__ import annotations

from typing import Any

import torch.nn as nn

from llava.model.multimodal_projector.builder import mlp_projector, register_projector
from llava.train.train_callbacks import register_callback_provider

from .coder import BracoCoder
from .config import (
    MM_KEYS,
    NAME_PATTERN,
    OFFICIAL_BUILDER_DEFAULTS,
    BracoConfig,
    fields_from_mm_keys,
    preset_from_match,
    to_mm_keys,
)
from .schedule import BracoAnnealCallback, annealed_coders

__all__ = ["braco_config_from_model_config", "build_braco_projector"]

_CONFIG_KEYS = tuple(MM_KEYS) + ("mm_fourier_use_polar_pe", "mm_fourier_low_idct", "mm_fourier_K_high", "mm_fourier_spatial_method")


def _stored_keys(config: Any) -> dict[str, Any]:
    return {key: getattr(config, key) for key in _CONFIG_KEYS if getattr(config, key, None) is not None}


def braco_config_from_model_config(config: Any, projector_type: str, **overrides: Any) -> BracoConfig:
    """Resolve a :class:`BracoConfig`: name preset < ``mm_*`` keys in ``config`` < ``overrides``.

    For ``braco_*`` names the name fixes C and S (and the coordinates when it has a suffix); stored keys
    that contradict it are an error rather than a silent override.
    """
    stored = fields_from_mm_keys(_stored_keys(config))
    if projector_type.startswith("fourier_mlp"):
        return BracoConfig(**{**OFFICIAL_BUILDER_DEFAULTS, **stored, **overrides})
    match = NAME_PATTERN.fullmatch(projector_type.removeprefix("braco_"))
    if match is None:
        raise ValueError(f"{projector_type!r} is not a Braco projector type; expected braco_c<C>s<S>[_mode] or braco_k<K>")
    preset = preset_from_match(match)
    fixed = ["cutoff", "residual_tokens"]
    if match.group("mode") or match.group("k"):
        fixed.append("coordinates")
    for field in fixed:
        if field in stored and _normalise(field, stored[field]) != preset[field]:
            raise ValueError(
                f"config.json says {field}={stored[field]!r} but mm_projector_type {projector_type!r} means "
                f"{field}={preset[field]!r}; fix one of them"
            )
    return BracoConfig(**{**stored, **preset, **overrides})


def _normalise(field: str, value: Any) -> Any:
    return "coef" if field == "coordinates" and value == "vanilla" else value


def build_braco_projector(config: Any, projector_type: str, mlp_depth: int = 2) -> nn.Sequential:
    """``Sequential(coder, Linear, GELU, Linear, ...)`` for a LLaVA model config; records its keys in it."""
    braco = braco_config_from_model_config(config, projector_type)
    for key, value in to_mm_keys(braco).items():
        setattr(config, key, value)
    coder = BracoCoder.from_config(int(config.mm_hidden_size), braco)
    return nn.Sequential(coder, *mlp_projector(int(config.mm_hidden_size), int(config.hidden_size), mlp_depth))


@register_projector(r"braco_c\d+s\d+(?:_(?:coef|idct|randrot|vanilla))?", "Braco: C x C DCT backbone + S residual tokens, then mlp2x_gelu")
def _braco_cs(config, match) -> nn.Module:
    return build_braco_projector(config, match.group(0))


@register_projector(r"braco_k\d+", "Braco with the paper's allocation for a total budget K, then mlp2x_gelu")
def _braco_k(config, match) -> nn.Module:
    return build_braco_projector(config, match.group(0))


@register_projector(r"fourier_mlp(\d+)x_gelu", "official Braco type, configured by mm_fourier_* keys")
def _fourier(config, match) -> nn.Module:
    return build_braco_projector(config, match.group(0), mlp_depth=int(match.group(1)))


@register_callback_provider
def _anneal_callback(model) -> BracoAnnealCallback | None:
    """LLaVA training adds this callback when the model has an annealed coder (temperature follows the step)."""
    return BracoAnnealCallback() if annealed_coders(model) else None
