"""LLaVA heads on top of language models."""

from .llava_llama import LlavaConfig, LlavaLlamaForCausalLM, LlavaLlamaModel

__all__ = ["LlavaConfig", "LlavaLlamaForCausalLM", "LlavaLlamaModel"]
