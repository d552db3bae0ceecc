"""LLaVA models and the checkpoint loader.

The public names are resolved on first access, so importing a light submodule (e.g. the projector registry)
does not import the language-model classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llava import lazy_exports

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
__getattr__, __dir__ = lazy_exports(__name__, _LAZY_ATTRIBUTES)
