"""LLaVA-compatible vision-language models for transformers 5.x.

Importing ``llava`` is cheap: the model classes pull in torch and transformers, so they are loaded on
first attribute access (``from llava import LlavaLlamaForCausalLM``) rather than at import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llava.model.language_model.llava_llama import LlavaLlamaForCausalLM

# Public name -> module that defines it; resolved lazily by ``__getattr__``.
_LAZY_ATTRIBUTES: dict[str, str] = {
    "LlavaLlamaForCausalLM": "llava.model.language_model.llava_llama",
}

__all__ = ["LlavaLlamaForCausalLM"]


def __getattr__(name: str) -> Any:
    module_name = _LAZY_ATTRIBUTES.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    # Cache on the package so later lookups skip this hook.
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_ATTRIBUTES))
