"""LLaVA on Mistral, as LLaVA-1.6-Mistral: ``LlavaMistralConfig`` (model_type ``llava_mistral``),
``LlavaMistralModel`` and ``LlavaMistralForCausalLM``; weight names as for LLaMA. A plain ``mistral``
directory (e.g. Mistral-7B-Instruct-v0.2) selects this class too.
"""

from __future__ import annotations

from transformers import MistralConfig, MistralForCausalLM, MistralModel

from ..llava_arch import LlavaMetaForCausalLM, LlavaMetaModel
from .base import LlavaConfigMixin
from .registry import register_language_model


class LlavaMistralConfig(LlavaConfigMixin, MistralConfig):
    """A ``MistralConfig`` that also carries LLaVA's flat ``mm_*`` keys."""

    model_type = "llava_mistral"


class LlavaMistralModel(LlavaMetaModel, MistralModel):
    """``MistralModel`` plus the vision tower, projector and ``image_newline`` of :class:`LlavaMetaModel`."""

    config_class = LlavaMistralConfig


class LlavaMistralForCausalLM(LlavaMetaForCausalLM, MistralForCausalLM):
    """LLaVA causal LM on Mistral."""

    config_class = LlavaMistralConfig
    llava_model_class = LlavaMistralModel


register_language_model("llava_mistral", LlavaMistralConfig, LlavaMistralForCausalLM, base_model_type="mistral")
