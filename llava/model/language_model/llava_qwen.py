"""LLaVA on Qwen2 / Qwen2.5, in LLaVA-NeXT / OneVision's format: ``LlavaQwenConfig`` (model_type
``llava_qwen``), ``LlavaQwenModel`` and ``LlavaQwenForCausalLM``.

A NeXT checkpoint loads without renaming: ``architectures ["LlavaQwenForCausalLM"]``, Qwen2's config keys (an
older ``rope_theta`` becomes transformers 5's ``rope_parameters``) plus the flat ``mm_*`` keys; weights
``model.embed_tokens``, ``model.layers.*`` (q/k/v with bias), ``model.norm``, ``lm_head`` (absent when
``tie_word_embeddings``, as in Qwen2.5-3B), ``model.mm_projector.*``, ``model.image_newline``; the tower copy
under ``model.vision_tower.vision_tower.*`` is ignored (the tower loads from its own directory). A plain
``qwen2`` directory (e.g. ``Qwen/Qwen2.5-3B-Instruct``) selects this class too.
"""

from __future__ import annotations

from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2Model

from ..llava_arch import LlavaMetaForCausalLM, LlavaMetaModel
from .base import LlavaConfigMixin
from .registry import register_language_model


class LlavaQwenConfig(LlavaConfigMixin, Qwen2Config):
    """A ``Qwen2Config`` that also carries LLaVA's flat ``mm_*`` keys."""

    model_type = "llava_qwen"


class LlavaQwenModel(LlavaMetaModel, Qwen2Model):
    """``Qwen2Model`` plus the vision tower, projector and ``image_newline`` of :class:`LlavaMetaModel`."""

    config_class = LlavaQwenConfig


class LlavaQwenForCausalLM(LlavaMetaForCausalLM, Qwen2ForCausalLM):
    """LLaVA causal LM on Qwen2: ``lm_head`` is tied to ``model.embed_tokens`` when the config says so."""

    config_class = LlavaQwenConfig
    llava_model_class = LlavaQwenModel


register_language_model("llava_qwen", LlavaQwenConfig, LlavaQwenForCausalLM, base_model_type="qwen2", next_layout=True)
