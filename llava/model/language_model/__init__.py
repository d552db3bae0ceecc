"""LLaVA heads on top of language models, found through :mod:`.registry` by the checkpoint's ``model_type``."""

from .llava_llama import LlavaConfig, LlavaLlamaForCausalLM, LlavaLlamaModel
from .llava_mistral import LlavaMistralConfig, LlavaMistralForCausalLM, LlavaMistralModel
from .llava_qwen import LlavaQwenConfig, LlavaQwenForCausalLM, LlavaQwenModel
from .registry import list_language_models, register_language_model, resolve_language_model

__all__ = [
    "LlavaConfig",
    "LlavaLlamaForCausalLM",
    "LlavaLlamaModel",
    "LlavaMistralConfig",
    "LlavaMistralForCausalLM",
    "LlavaMistralModel",
    "LlavaQwenConfig",
    "LlavaQwenForCausalLM",
    "LlavaQwenModel",
    "list_language_models",
    "register_language_model",
    "resolve_language_model",
]
