"""LLaVA on LLaMA / Vicuna: ``LlavaConfig`` (model_type ``llava_llama``), ``LlavaLlamaModel`` and
``LlavaLlamaForCausalLM``, registered with ``AutoConfig`` / ``AutoModelForCausalLM``.

Parameter names match upstream checkpoints: ``model.embed_tokens``, ``model.layers.*``, ``model.norm``,
``lm_head``, ``model.mm_projector.*``, ``model.image_newline``. Released LLaVA-1.5 configs say
``model_type: "llava"``; ``LlavaConfig`` reads them as ``llava_llama`` (transformers' own Auto ``llava`` is a
different, incompatible model and is never used for them).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaModel
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.llama.modeling_llama import LlamaForCausalLM, LlamaPreTrainedModel

from llava.constants import IMAGE_TOKEN_INDEX

from ..llava_arch import ImageInput, LlavaMetaForCausalLM, LlavaMetaModel, init_image_newline

logger = logging.getLogger(__name__)

#: ``model_type`` values of upstream checkpoints that are this architecture under another name.
LEGACY_MODEL_TYPES = ("llava",)


def _remap_model_type(config_dict: dict[str, Any]) -> dict[str, Any]:
    model_type = config_dict.get("model_type")
    if model_type in LEGACY_MODEL_TYPES:
        logger.info("reading a config with model_type %r as %r", model_type, LlavaConfig.model_type)
        config_dict = {**config_dict, "model_type": LlavaConfig.model_type}
    return config_dict


class LlavaConfig(LlamaConfig):
    """A ``LlamaConfig`` that also carries LLaVA's flat ``mm_*`` keys (``mm_vision_tower``,
    ``mm_projector_type``, ``mm_hidden_size``, ...) as plain attributes, as upstream's ``config.json`` does."""

    model_type = "llava_llama"

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path: str | os.PathLike[str], **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        return _remap_model_type(config_dict), kwargs

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> "LlavaConfig":
        return super().from_dict(_remap_model_type(config_dict), **kwargs)


class LlavaLlamaModel(LlavaMetaModel, LlamaModel):
    """``LlamaModel`` plus the vision tower, projector and ``image_newline`` of :class:`LlavaMetaModel`."""

    config_class = LlavaConfig
    config: LlavaConfig

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__(config)


class LlavaLlamaForCausalLM(LlamaForCausalLM, LlavaMetaForCausalLM):
    """LLaVA causal LM: ``forward`` and ``generate`` accept ``images`` and ``image_sizes``.

    ``generate`` splices the images into ``inputs_embeds`` and hands only those to transformers' ``generate``,
    so it returns the new tokens only (not the prompt), for batch size 1 or a left-padded batch.
    """

    config_class = LlavaConfig
    config: LlavaConfig
    # Self-trained checkpoints also hold the CLIP weights; the tower is always loaded from its own directory.
    _keys_to_ignore_on_load_unexpected = [r"^model\.vision_tower\."]

    def __init__(self, config: LlamaConfig) -> None:
        LlamaPreTrainedModel.__init__(self, config)
        self.model = LlavaLlamaModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_model(self) -> LlavaLlamaModel:
        return self.model

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        init_image_newline(module)

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        """``PreTrainedModel.from_pretrained``, then :meth:`LlavaMetaModel.restore_projector_buffers`."""
        loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        model.get_model().restore_projector_buffers()
        return loaded

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Any = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        images: ImageInput | None = None,
        image_sizes: Sequence[Sequence[int]] | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        """The LLaMA forward on text with the images spliced in.

        Args:
            input_ids: ``[B, L]`` with ``IMAGE_TOKEN_INDEX`` (-200) where each image goes.
            attention_mask: ``[B, L]``, 1 for tokens, 0 for padding (either side).
            images: ``[N, 3, H, W]`` (or a list / 5-D tensor of views, see ``image_features``), one per marker.
            image_sizes: ``(width, height)`` per image (anyres).
            labels: ``[B, L]``; image positions get ``IGNORE_INDEX`` in the spliced labels.
            Other arguments: as ``LlamaForCausalLM.forward``.

        Returns:
            ``CausalLMOutputWithPast`` with ``logits`` ``[B, L', vocab]`` over the spliced sequence.
        """
        if inputs_embeds is None:
            (input_ids, position_ids, attention_mask, past_key_values, inputs_embeds, labels) = (
                self.prepare_inputs_labels_for_multimodal(
                    input_ids, position_ids, attention_mask, past_key_values, labels, images, image_sizes
                )
            )
        return super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            labels=labels,
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
            **kwargs,
        )

    @torch.no_grad()
    def generate(
        self,
        inputs: torch.LongTensor | None = None,
        images: ImageInput | None = None,
        image_sizes: Sequence[Sequence[int]] | None = None,
        **kwargs: Any,
    ) -> torch.LongTensor:
        """Generate from prompts with images; returns only the new tokens, ``[B, new_tokens]``.

        Args:
            inputs: ``[B, L]`` prompt ids with ``IMAGE_TOKEN_INDEX`` markers; a batch must be left-padded and
                come with ``attention_mask``.
            images: One image per marker, in batch order (see ``forward``).
            image_sizes: ``(width, height)`` per image.
            **kwargs: transformers generation options (``attention_mask``, ``max_new_tokens``,
                ``do_sample``, ``streamer``, ...). ``inputs_embeds`` is not accepted.
        """
        if "inputs_embeds" in kwargs:
            raise ValueError("LlavaLlamaForCausalLM.generate builds inputs_embeds itself; pass inputs (token ids) instead")
        if inputs is None:
            raise ValueError("LlavaLlamaForCausalLM.generate needs prompt token ids in inputs, got None")
        position_ids = kwargs.pop("position_ids", None)
        attention_mask = kwargs.pop("attention_mask", None)
        if images is not None:
            _, position_ids, attention_mask, _, inputs_embeds, _ = self.prepare_inputs_labels_for_multimodal(
                inputs, position_ids, attention_mask, None, None, images, image_sizes, padding_side="left"
            )
        else:
            if bool((inputs == IMAGE_TOKEN_INDEX).any()):
                raise ValueError(
                    f"the prompts hold {int((inputs == IMAGE_TOKEN_INDEX).sum())} <image> markers but no images "
                    "were given; pass images= or remove '<image>' from the prompt"
                )
            inputs_embeds = self.get_model().embed_tokens(inputs)
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        return super().generate(inputs_embeds=inputs_embeds, **kwargs)


AutoConfig.register(LlavaConfig.model_type, LlavaConfig)
AutoModelForCausalLM.register(LlavaConfig, LlavaLlamaForCausalLM)
