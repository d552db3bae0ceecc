"""LLaVA on LLaMA / Vicuna: ``LlavaConfig`` (model_type ``llava_llama``), ``LlavaLlamaModel`` and
``LlavaLlamaForCausalLM``.

Parameter names match upstream checkpoints: ``model.embed_tokens``, ``model.layers.*``, ``model.norm``,
``lm_head``, ``model.mm_projector.*``, ``model.image_newline``. Released LLaVA-1.5 configs say
``model_type: "llava"`` (a registered alias); ``LlavaConfig`` reads them as ``llava_llama`` (transformers' own
Auto ``llava`` is a different, incompatible model and is never used for them). A plain ``llama`` directory
(Vicuna) selects this class too.
"""

from __future__ import annotations

from transformers import LlamaConfig, LlamaModel
from transformers.models.llama.modeling_llama import LlamaForCausalLM

from ..llava_arch import LlavaMetaForCausalLM, LlavaMetaModel
from .base import LlavaConfigMixin
from .registry import register_language_model

#: ``model_type`` values of upstream checkpoints that are this architecture under another name.
LEGACY_MODEL_TYPES = ("llava",)


class LlavaConfig(LlavaConfigMixin, LlamaConfig):
    """A ``LlamaConfig`` that also carries LLaVA's flat ``mm_*`` keys."""

    model_type = "llava_llama"


class LlavaLlamaModel(LlavaMetaModel, LlamaModel):
    """``LlamaModel`` plus the vision tower, projector and ``image_newline`` of :class:`LlavaMetaModel`."""

    config_class = LlavaConfig


class LlavaLlamaForCausalLM(LlavaMetaForCausalLM, LlamaForCausalLM):
    """LLaVA causal LM on LLaMA: ``forward`` and ``generate`` accept ``images`` and ``image_sizes``
    (see :class:`LlavaMetaForCausalLM`; ``generate`` returns the new tokens only)."""

    config_class = LlavaConfig
    llava_model_class = LlavaLlamaModel


register_language_model("llava_llama", LlavaConfig, LlavaLlamaForCausalLM, base_model_type="llama", aliases=LEGACY_MODEL_TYPES)
