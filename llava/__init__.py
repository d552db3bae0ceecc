"""LLaVA-compatible vision-language models for transformers 5.x.

Importing ``llava`` is cheap: the model classes pull in torch and transformers, so they are loaded on
first attribute access (``from llava import LlavaLlamaForCausalLM``) rather than at import time.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llava.model.language_model.llava_llama import LlavaLlamaForCausalLM

def lazy_exports(package: str, attributes: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module ``__getattr__`` / ``__dir__`` for ``package`` that import each public name from its module
    (``attributes``: name -> module) on first access and cache it on the package."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module_name = attributes.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(attributes))

    return __getattr__, __dir__


__all__ = ["LlavaLlamaForCausalLM"]
__getattr__, __dir__ = lazy_exports(__name__, {"LlavaLlamaForCausalLM": "llava.model.language_model.llava_llama"})
