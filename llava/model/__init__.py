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
    from .language_model.llava_mistral import LlavaMistralConfig, LlavaMistralForCausalLM, LlavaMistralModel
    from .language_model.llava_qwen import LlavaQwenConfig, LlavaQwenForCausalLM, LlavaQwenModel
    from .language_model.registry import list_language_models, register_language_model, resolve_language_model

_LAZY_ATTRIBUTES: dict[str, str] = {
    "LlavaConfig": "llava.model.language_model.llava_llama",
    "LlavaLlamaForCausalLM": "llava.model.language_model.llava_llama",
    "LlavaLlamaModel": "llava.model.language_model.llava_llama",
    "LlavaMistralConfig": "llava.model.language_model.llava_mistral",
    "LlavaMistralForCausalLM": "llava.model.language_model.llava_mistral",
    "LlavaMistralModel": "llava.model.language_model.llava_mistral",
    "LlavaQwenConfig": "llava.model.language_model.llava_qwen",
    "LlavaQwenForCausalLM": "llava.model.language_model.llava_qwen",
    "LlavaQwenModel": "llava.model.language_model.llava_qwen",
    "list_language_models": "llava.model.language_model.registry",
    "load_pretrained_model": "llava.model.builder",
    "register_language_model": "llava.model.language_model.registry",
    "resolve_language_model": "llava.model.language_model.registry",
}

__all__ = sorted(_LAZY_ATTRIBUTES)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY_ATTRIBUTES)
