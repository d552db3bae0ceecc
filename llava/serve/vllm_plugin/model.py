"""The vLLM model of this project's checkpoints (``LlavaLlamaForCausalLM``, ``LlavaQwenForCausalLM``,
``LlavaMistralForCausalLM``): vLLM's own implementation of the plain LLM, this package's vision side.

* The LLM is vLLM's (``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ... built by ``init_vllm_registered_model`` from the
  checkpoint's config, which is the plain LLM's config plus the flat ``mm_*`` keys): paged KV cache, continuous
  batching and ``--tensor-parallel-size`` are vLLM's.
* The vision side is :class:`~llava.serve.vllm_plugin.support.VisionSide`: the tower from its folder, the projector
  built by the one registry (``build_vision_projector``), the AnyRes merge; it runs on every tensor-parallel rank.
* The front end (:class:`LlavaProcessor`) preprocesses images as ``llava.mm_utils.process_images`` does and gives each
  image the token count its projector's plugin declares; it re-tokenizes each prompt the way
  ``llava.mm_utils.tokenizer_image_token`` does (each text chunk between ``<image>`` markers on its own), so the
  LLM reads the token ids the checkpoint was trained on.

Imported only inside vLLM processes (the plugin registers it by name); nothing else in ``llava`` imports vLLM.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any

import torch
import torch.nn as nn
from transformers import BatchFeature
from vllm.config import VllmConfig
from vllm.model_executor.models.interfaces import SupportsMultiModal, SupportsPP
from vllm.model_executor.models.utils import init_vllm_registered_model, maybe_prefix
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.multimodal.inputs import MultiModalFieldConfig
from vllm.multimodal.parse import ImageProcessorItems, ImageSize
from vllm.multimodal.processing import BaseDummyInputsBuilder, BaseMultiModalProcessor, BaseProcessingInfo, PromptReplacement

from llava.constants import DEFAULT_IMAGE_TOKEN

from . import support

logger = logging.getLogger(__name__)


class LlavaProcessingInfo(BaseProcessingInfo):
    """What the front end knows of a checkpoint: its geometry, image processor and placeholder token."""

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": None}

    @cached_property
    def geometry(self) -> tuple[int, int, tuple[int, int]]:
        """``(tokens per view, tower side, tower grid)``, after checking that the checkpoint can be served."""
        from llava.model.multimodal_projector.builder import tower_shape

        config = self.get_hf_config()
        support.check_servable(config)
        return support.tokens_per_view(config), support.tower_side(config), tuple(tower_shape(config).grid)

    @cached_property
    def image_processor(self) -> Any:
        from llava.model.multimodal_encoder.builder import build_vision_tower

        return build_vision_tower(self.get_hf_config(), delay_load=True).load_image_processor()

    @cached_property
    def placeholder_id(self) -> int:
        return support.placeholder_token_id(self.get_tokenizer(), int(self.get_hf_config().vocab_size))

    def get_num_image_tokens(self, *, image_width: int, image_height: int) -> int:
        per_view, side, grid = self.geometry
        return support.image_token_count(self.get_hf_config(), (image_width, image_height), per_view, side, grid)

    def get_image_size_with_most_features(self) -> ImageSize:
        width, height = support.largest_image(self.get_hf_config(), self.geometry[1])
        return ImageSize(width=width, height=height)


class LlavaDummyInputsBuilder(BaseDummyInputsBuilder[LlavaProcessingInfo]):
    """Profiling inputs: one ``<image>`` marker per image, images of the size with the most tokens."""

    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        return DEFAULT_IMAGE_TOKEN * mm_counts.get("image", 0)

    def get_dummy_mm_data(self, seq_len: int, mm_counts: Mapping[str, int], mm_options: Any = None) -> Mapping[str, Any]:
        size = self.info.get_image_size_with_most_features()
        overrides = mm_options.get("image") if mm_options else None
        return {"image": self._get_dummy_images(width=size.width, height=size.height, num_images=mm_counts.get("image", 0),
                                                overrides=overrides)}


class LlavaProcessor(BaseMultiModalProcessor[LlavaProcessingInfo]):
    """Pixels as ``llava.mm_utils.process_images``; prompts re-tokenized as ``tokenizer_image_token``; each
    ``<image>`` marker becomes the image's token count of placeholder ids."""

    def _call_hf_processor(self, hf_data: Mapping[str, object], hf_kwargs: Mapping[str, object]) -> BatchFeature:
        from llava.mm_utils import process_images

        images = list(hf_data.get("images") or [])
        config = self.info.get_hf_config()
        pixels = [process_images([image], self.info.image_processor, config)[0] for image in images]
        sizes = torch.tensor([image.size for image in images], dtype=torch.long).reshape(-1, 2)
        return BatchFeature({"pixel_values": pixels, "image_sizes": sizes})

    def _get_mm_fields_config(self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]) -> Mapping[str, MultiModalFieldConfig]:
        return {"pixel_values": MultiModalFieldConfig.batched("image"), "image_sizes": MultiModalFieldConfig.batched("image")}

    def _postprocess_prompt(self, prompt: list[int]) -> list[int]:
        return support.relay_prompt(prompt, self.info.get_tokenizer(), self.info.placeholder_id)

    def _get_prompt_updates(self, mm_items: Any, hf_processor_mm_kwargs: Mapping[str, object], out_mm_kwargs: Any) -> Sequence[PromptReplacement]:
        placeholder = self.info.placeholder_id

        def replacement(index: int) -> list[int]:
            size = mm_items.get_items("image", ImageProcessorItems).get_image_size(index)
            return [placeholder] * self.info.get_num_image_tokens(image_width=size.width, image_height=size.height)

        return [PromptReplacement(modality="image", target=[placeholder], replacement=replacement)]


@MULTIMODAL_REGISTRY.register_processor(LlavaProcessor, info=LlavaProcessingInfo, dummy_inputs=LlavaDummyInputsBuilder)
class LlavaForVllm(nn.Module, SupportsMultiModal, SupportsPP):
    """A LLaVA checkpoint of this project in vLLM (see the module docstring)."""

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        if modality.startswith("image"):
            return DEFAULT_IMAGE_TOKEN
        raise ValueError(f"LLaVA checkpoints take images, not {modality}")

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config, self.source = config, str(vllm_config.model_config.model)
        with self._mark_tower_model(vllm_config, "image"):
            self.vision = support.VisionSide(config).to(dtype=vllm_config.model_config.dtype)
        with self._mark_language_model(vllm_config):
            self.language_model = init_vllm_registered_model(
                vllm_config=vllm_config, hf_config=config, prefix=maybe_prefix(prefix, "language_model"),
                architectures=[support.language_architecture(config)],
            )
        self.tokens_per_view = support.tokens_per_view(config)
        self.make_empty_intermediate_tensors = self.language_model.make_empty_intermediate_tensors

    def embed_multimodal(self, **kwargs: object) -> list[torch.Tensor]:
        pixels, sizes = kwargs.get("pixel_values"), kwargs.get("image_sizes")
        if pixels is None:
            return []
        images = support.per_image(pixels)
        image_sizes = [tuple(int(value) for value in size) for size in support.per_image(sizes)]
        weight = next(self.vision.parameters())
        features = self.vision.features([image.to(device=weight.device, dtype=weight.dtype) for image in images], image_sizes)
        support.check_token_counts(self.config, features, image_sizes, self.tokens_per_view, self.vision)
        return features

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor, intermediate_tensors: Any = None,
                inputs_embeds: torch.Tensor | None = None, **kwargs: object) -> Any:
        if intermediate_tensors is not None:
            inputs_embeds = None
        return self.language_model.model(input_ids, positions, intermediate_tensors, inputs_embeds=inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        return self.language_model.compute_logits(hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """The LLM's tensors to vLLM's LLM, the projector's and ``image_newline`` to the vision side (the tower has
        loaded from its own folder); returns every parameter name so loaded."""
        language, projector, newline = support.split_weights(weights)
        loaded = {f"language_model.{name}" for name in self.language_model.load_weights(language)}
        self.vision.load_checkpoint_tensors(projector, newline, self.source)
        return loaded | {f"vision.{name}" for name, _ in self.vision.named_parameters()}


__all__ = ["LlavaDummyInputsBuilder", "LlavaForVllm", "LlavaProcessingInfo", "LlavaProcessor"]
