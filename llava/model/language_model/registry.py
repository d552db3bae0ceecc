"""Language-model registry, keyed by the LLaVA checkpoint's ``config.json`` ``model_type``.

Same shape as the projector and vision-tower registries: each built-in LLM module (``llava_llama``,
``llava_qwen``, ``llava_mistral``) registers itself with :func:`register_language_model` when imported, like a
plugin; installed plugins register through the ``llava.language_models`` entry-point group (each entry point
names a module whose import calls :func:`register_language_model`). An entry records

* ``model_type``: the LLaVA checkpoint's type (``llava_qwen``), also its ``AutoConfig`` key;
* ``config_class`` / ``causal_lm_class``: the LLaVA config and causal-LM classes;
* ``base_model_type``: the plain LLM's type (``qwen2``), so a plain model directory (a ``model_base``, or
  ``--model_name_or_path`` in training) finds its LLaVA class;
* ``aliases``: other ``model_type`` values of released checkpoints that are this architecture (upstream
  LLaVA-1.5 writes ``llava`` for ``llava_llama``);
* ``next_layout``: its checkpoints come from LLaVA-NeXT (``llava_qwen``: OneVision and NeXT's Qwen runs), so the
  loader answers as NeXT's does where the two differ (the context length it returns).

Adding an LLM is one file (config subclass, base-model subclass, causal-LM subclass) plus one registration.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from typing import Any

from llava.utils import load_entry_points

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "llava.language_models"

#: Modules of the built-in LLMs; each registers itself on import (imported on the first lookup).
BUILTIN_MODULES = (
    "llava.model.language_model.llava_llama",
    "llava.model.language_model.llava_qwen",
    "llava.model.language_model.llava_mistral",
)


@dataclass(frozen=True)
class LanguageModelEntry:
    """One registered LLaVA language model (see the module docstring for the fields)."""

    model_type: str
    config_class: type
    causal_lm_class: type
    base_model_type: str
    aliases: tuple[str, ...] = ()
    next_layout: bool = False

    @property
    def model_types(self) -> tuple[str, ...]:
        """Every ``model_type`` that selects this entry: its own, the aliases and the plain base type."""
        return (self.model_type, *self.aliases, self.base_model_type)


_REGISTRY: dict[str, LanguageModelEntry] = {}
_LOADED = False


def register_language_model(
    model_type: str,
    config_class: type,
    causal_lm_class: type,
    base_model_type: str,
    aliases: tuple[str, ...] = (),
    next_layout: bool = False,
) -> LanguageModelEntry:
    """Register a LLaVA LLM and announce it to transformers' ``AutoConfig`` / ``AutoModelForCausalLM``.

    Registering a ``model_type`` again replaces the earlier entry (so a plugin can override a built-in).

    Raises:
        ValueError: If ``config_class.model_type`` is not ``model_type``, or an alias or base type is already
            claimed by another entry.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    if getattr(config_class, "model_type", None) != model_type:
        raise ValueError(
            f"{config_class.__name__}.model_type is {getattr(config_class, 'model_type', None)!r}, but it is being "
            f"registered as {model_type!r}; the two must be equal"
        )
    entry = LanguageModelEntry(model_type, config_class, causal_lm_class, base_model_type, tuple(aliases), next_layout)
    for other in _REGISTRY.values():
        clash = set(entry.model_types) & set(other.model_types)
        if other.model_type != model_type and clash:
            raise ValueError(
                f"model_type {sorted(clash)[0]!r} is already registered for {other.model_type!r}; "
                f"cannot register it again for {model_type!r}"
            )
    _REGISTRY[model_type] = entry
    AutoConfig.register(model_type, config_class, exist_ok=True)
    AutoModelForCausalLM.register(config_class, causal_lm_class, exist_ok=True)
    return entry


def _load_builtins_and_plugins() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    load_entry_points(ENTRY_POINT_GROUP, "language-model")


def list_language_models() -> list[str]:
    """The registered LLaVA ``model_type`` values, built-ins first, in registration order."""
    _load_builtins_and_plugins()
    return list(_REGISTRY)


def _describe() -> str:
    parts = []
    for entry in _REGISTRY.values():
        others = ", ".join((*entry.aliases, entry.base_model_type))
        parts.append(f"{entry.model_type} ({others})")
    return "; ".join(parts)


def resolve_language_model(model_type: str | None, source: str = "") -> LanguageModelEntry:
    """The entry for a LLaVA ``model_type``, one of its aliases, or a plain base ``model_type``.

    Args:
        model_type: From a checkpoint's ``config.json`` (``llava_qwen``, ``llava``, ``qwen2``, ...).
        source: Where it came from (a directory or hub name), for the error message.

    Raises:
        ValueError: If no registered entry claims ``model_type``; the message lists the registered ones.
    """
    _load_builtins_and_plugins()
    for entry in _REGISTRY.values():
        if model_type in entry.model_types:
            return entry
    where = f" of {source!r}" if source else ""
    raise ValueError(
        f"unknown language model_type {model_type!r}{where}; registered LLaVA model_types (with the aliases and "
        f"plain base types they accept): {_describe()}"
    )


def canonical_model_type(model_type: str | None) -> str | None:
    """The registered LLaVA ``model_type`` that ``model_type`` names, or ``None`` if none claims it."""
    try:
        return resolve_language_model(model_type).model_type
    except ValueError:
        return None


def checkpoint_model_type(path: str | os.PathLike[str], **kwargs: Any) -> str | None:
    """The raw ``model_type`` in the ``config.json`` of a local directory or hub name (before any remapping)."""
    from transformers import PretrainedConfig

    config_dict, _ = PretrainedConfig.get_config_dict(os.fspath(path), **kwargs)
    return config_dict.get("model_type")


def entry_for_architectures(config_dict: dict[str, Any]) -> LanguageModelEntry | None:
    """The entry whose causal-LM class ``config_dict["architectures"]`` names, if any."""
    _load_builtins_and_plugins()
    names = config_dict.get("architectures") or []
    for entry in _REGISTRY.values():
        if entry.causal_lm_class.__name__ in names:
            return entry
    return None


def entry_for_config(config_dict: dict[str, Any], source: str = "") -> LanguageModelEntry:
    """The entry for a checkpoint's ``config.json`` contents: by its ``model_type``, except that an *alias*
    (upstream LLaVA-1.5's ``llava``) gives way to the registered class its ``architectures`` names.

    LLaVA-OneVision's released files say ``"model_type": "llava"`` with ``"architectures": ["LlavaQwenForCausalLM"]``
    (LLaVA-NeXT picks the class by model name and never reads ``model_type``); those load as ``llava_qwen``. A
    registered LLaVA or base ``model_type`` is never overridden, and an unknown one stays an error.

    Raises:
        ValueError: If no registered entry claims the ``model_type``.
    """
    model_type = config_dict.get("model_type")
    by_type = resolve_language_model(model_type, source=source)
    by_class = entry_for_architectures(config_dict)
    if by_class is not None and by_class is not by_type and model_type in by_type.aliases:
        return by_class
    return by_type


def language_model_for_checkpoint(path: str | os.PathLike[str], **kwargs: Any) -> LanguageModelEntry:
    """The registry entry for the checkpoint (LLaVA or plain LLM) at ``path`` (:func:`entry_for_config`)."""
    from transformers import PretrainedConfig

    config_dict, _ = PretrainedConfig.get_config_dict(os.fspath(path), **kwargs)
    return entry_for_config(config_dict, source=os.fspath(path))


__all__ = [
    "ENTRY_POINT_GROUP",
    "LanguageModelEntry",
    "canonical_model_type",
    "checkpoint_model_type",
    "entry_for_architectures",
    "entry_for_config",
    "language_model_for_checkpoint",
    "list_language_models",
    "register_language_model",
    "resolve_language_model",
]
