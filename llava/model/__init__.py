"""LLaVA models and the checkpoint loader.

The public names are resolved on first access, so importing a light submodule (e.g. the projector registry)
does not import the language-model classes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .builder import load_pretrained_model
    from .language_model.llava_llama import LlavaConfig, LlavaLlamaForCausalLM, LlavaLlamaModel

_LAZY_ATTRIBUTES: dict[str, str] = {
    "LlavaConfig": "llava.model.language_model.llava_llama",
    "LlavaLlamaForCausalLM": "llava.model.language_model.llava_llama",
    "LlavaLlamaModel": "llava.model.language_model.llava_llama",
    "load_pretrained_model": "llava.model.builder",
}

__all__ = sorted(_LAZY_ATTRIBUTES)


def __getattr__(name: str) -> Any:
    module_name = _LAZY_ATTRIBUTES.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_ATTRIBUTES))
