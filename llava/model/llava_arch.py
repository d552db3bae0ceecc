"""The LLaVA architecture on top of any decoder-only LLM: vision tower → projector → visual tokens spliced
into the text embeddings at each ``<image>`` marker (``IMAGE_TOKEN_INDEX``, -200).

``LlavaMetaModel`` is mixed into the LLM's base model (it owns ``vision_tower``, ``mm_projector`` and, for
``spatial_unpad`` merging, ``image_newline``); ``LlavaMetaForCausalLM`` is mixed into the causal-LM head
class and owns image encoding and the splice. The number of visual tokens per image, K, is whatever the
projector returns (576 for ``mlp2x_gelu`` on CLIP-L/336, the budget of a compressor), never a constant.
"""

from __future__ import annotations

import copy
import logging
import os
from abc import ABC
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import torch
import torch.nn as nn
from transformers import PreTrainedModel
from transformers import initialization as hf_init

from llava.constants import (
    DEFAULT_IM_END_TOKEN,
    DEFAULT_IM_START_TOKEN,
    DEFAULT_IMAGE_PATCH_TOKEN,
    IGNORE_INDEX,
    IMAGE_TOKEN_INDEX,
)
from llava.mm_utils import anyres_max_views, get_anyres_image_grid_shape, is_anyres
from llava.visual_tokens import PATCH_MERGE_TYPES, anyres_max_shape, anyres_view_count, visual_token_count

from .greedy import greedy_decode, greedy_plan
from .multimodal_encoder.builder import build_vision_tower
from .multimodal_encoder.clip_encoder import CLIPVisionTower
from .multimodal_projector.builder import build_vision_projector
from .multimodal_projector.plugins import CompressorInputs, ModelNeeds, needs_for_config, plugin_for, settings_in

logger = logging.getLogger(__name__)

PROJECTOR_KEY = "mm_projector"
PADDING_SIDES = ("left", "right")

ImageInput = torch.Tensor | Sequence[torch.Tensor]


# ---------------------------------------------------------------------------------------------- weights


def load_weights_file(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Read a state dict from ``.safetensors`` or, otherwise, a ``torch.save`` file (``weights_only=True``).

    Raises:
        ValueError: If the file does not exist; ``UserError`` if it cannot be read.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"weights file {path!r} does not exist")
    from .checks import weights_file_error

    try:
        if path.endswith(".safetensors"):
            from safetensors.torch import load_file

            return load_file(path, device="cpu")
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # unpickling, zip and header errors alike: the file is unusable
        # Never pass on torch's advice to retry with weights_only=False: the file may be hostile.
        raise weights_file_error(path, error) from None


def projector_state_dict(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keep the entries whose name contains ``mm_projector`` and strip the name through ``mm_projector.``.

    ``model.mm_projector.0.weight`` (a full or stage-1 checkpoint) and
    ``base_model.model.model.mm_projector.0.weight`` (LoRA ``non_lora_trainables``) both become ``0.weight``.
    """
    marker = PROJECTOR_KEY + "."
    return {name.split(marker, 1)[1]: value for name, value in weights.items() if marker in name}


def load_projector_weights(projector: nn.Module, weights: Mapping[str, torch.Tensor], source: str) -> None:
    """Strictly load projector-relative ``weights`` (see :func:`projector_state_dict`) into ``projector``.

    Args:
        projector: The model's ``mm_projector``.
        weights: ``{"0.weight": ..., ...}``.
        source: Where the weights came from, for the error message.

    Raises:
        ValueError: If a key is missing or unexpected (the message names them all).
    """
    expected = set(projector.state_dict())
    given = set(weights)
    missing, unexpected = sorted(expected - given), sorted(given - expected)
    if missing or unexpected:
        raise ValueError(
            f"projector weights in {source} do not match the {type(projector).__name__} built for "
            f"mm_projector_type; missing keys: {missing or 'none'}; unexpected keys: {unexpected or 'none'}"
        )
    projector.load_state_dict(dict(weights), strict=True)


def _non_persistent_buffers(module: nn.Module) -> Iterator[str]:
    for prefix, child in module.named_modules():
        for name in child._non_persistent_buffers_set:
            if child._buffers.get(name) is not None:
                yield f"{prefix}.{name}" if prefix else name


# ---------------------------------------------------------------------------------------------- geometry


def unpad_image(tensor: torch.Tensor, original_size: Sequence[int]) -> torch.Tensor:
    """Crop the rows or columns that anyres letterboxing added around an image.

    Args:
        tensor: ``[C, H, W]`` feature grid of the padded image.
        original_size: ``(width, height)`` of the image before padding.

    Returns:
        ``[C, H', W]`` or ``[C, H, W']``.
    """
    original_width, original_height = int(original_size[0]), int(original_size[1])
    current_height, current_width = tensor.shape[1:]
    if original_width / original_height > current_width / current_height:
        scale = current_width / original_width
        new_height = int(original_height * scale)
        padding = (current_height - new_height) // 2
        return tensor[:, padding : current_height - padding, :]
    scale = current_height / original_height
    new_width = int(original_width * scale)
    padding = (current_width - new_width) // 2
    return tensor[:, :, padding : current_width - padding]


def _uses_unpad(config: Any) -> bool:
    return "unpad" in (getattr(config, "mm_patch_merge_type", None) or "")


def _images_per_sample(markers: Sequence[int], num_images: int) -> list[int]:
    """How many of the images each sample consumes, in batch order.

    One image per ``<image>`` marker. Upstream training also gives every text-only sample of a mixed batch a
    dummy image, which that sample consumes and drops; that layout is accepted too.

    Raises:
        ValueError: If the images cannot be matched to the markers.
    """
    total = sum(markers)
    if total == 0:
        raise ValueError(
            f"{num_images} image(s) were given but no prompt contains an <image> marker (token id "
            f"{IMAGE_TOKEN_INDEX}); put '<image>' in the prompt or pass images=None"
        )
    if num_images == total:
        return list(markers)
    text_only = sum(1 for count in markers if count == 0)
    if text_only and num_images == total + text_only:
        return [count if count else 1 for count in markers]
    if num_images < total:
        raise ValueError(
            f"the prompts hold {total} <image> markers but only {num_images} image(s) were given; "
            "give one image per <image> marker"
        )
    raise ValueError(
        f"{num_images} images were given for {total} <image> markers; give one image per <image> marker"
    )


# ---------------------------------------------------------------------------------------------- model


def _new_image_newline(hidden_size: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(hidden_size) * hidden_size**-0.5)


def init_image_newline(module: nn.Module) -> None:
    """``_init_weights`` step for the LLaVA base model: ``image_newline`` ~ N(0, 1/hidden_size).

    Called by the causal-LM class's ``_init_weights`` (transformers initialises through the top-level model's
    hook, so a hook on the mixed-in base model would never run)."""
    newline = getattr(module, "image_newline", None) if isinstance(module, LlavaMetaModel) else None
    if isinstance(newline, nn.Parameter):
        hf_init.normal_(newline, mean=0.0, std=module.config.hidden_size**-0.5)


class LlavaMetaModel:
    """Mixin for the LLM base model: owns the vision tower, the projector and ``image_newline``.

    With ``config.mm_vision_tower`` set, the tower is built with ``delay_load`` (config only; load the
    weights with ``get_vision_tower().load_model()``) and the projector from ``config.mm_projector_type``.
    """

    config: Any

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        if getattr(config, "mm_vision_tower", None):
            self.vision_tower = build_vision_tower(config, delay_load=True)
            self.mm_projector = build_vision_projector(config)
            if _uses_unpad(config):
                self.image_newline = _new_image_newline(config.hidden_size)

    def get_vision_tower(self) -> CLIPVisionTower | None:
        """The vision tower, unwrapped from the one-element list used under FSDP; ``None`` for a text LLM."""
        tower = getattr(self, "vision_tower", None)
        if isinstance(tower, list):
            tower = tower[0] if tower else None
        return tower

    def initialize_vision_modules(self, model_args: Any, fsdp: Sequence[Any] | None = None) -> None:
        """Attach (or reload) the vision tower and the projector from training arguments.

        Writes upstream's keys (``mm_vision_tower``, ``use_mm_proj``, ``mm_projector_type``,
        ``mm_hidden_size``, ``mm_vision_select_layer``, ``mm_vision_select_feature``,
        ``mm_patch_merge_type``) and every non-``None`` setting that the projector's compressor plugin declares
        (:func:`~llava.model.multimodal_projector.plugins.plugin_for`) into the config before building the
        projector, so ``config.json`` rebuilds it with no flags.

        Args:
            model_args: Training ``ModelArguments`` (``vision_tower``, ``mm_vision_select_layer``, ...,
                optionally ``pretrain_mm_mlp_adapter``: a stage-1 ``mm_projector.bin``/``.safetensors``).
            fsdp: The trainer's FSDP setting; when non-empty the tower is kept in a one-element list so FSDP
                does not wrap it.
        """
        config = self.config
        config.mm_vision_tower = model_args.vision_tower
        vision_tower = self.get_vision_tower()
        if vision_tower is None:
            vision_tower = build_vision_tower(model_args)
            self.vision_tower = [vision_tower] if fsdp else vision_tower
        else:
            vision_tower.load_model()

        config.use_mm_proj = True
        config.mm_projector_type = getattr(model_args, "mm_projector_type", None) or "linear"
        config.mm_hidden_size = vision_tower.hidden_size
        config.mm_vision_select_layer = model_args.mm_vision_select_layer
        config.mm_vision_select_feature = getattr(model_args, "mm_vision_select_feature", None) or "patch"
        config.mm_patch_merge_type = getattr(model_args, "mm_patch_merge_type", None) or "flat"
        plugin = plugin_for(config.mm_projector_type)
        if plugin is not None:
            for key, value in settings_in(vars(model_args), plugin).items():
                setattr(config, key, value)

        if getattr(self, "mm_projector", None) is None:
            self.mm_projector = build_vision_projector(config)
            if _uses_unpad(config):
                self.image_newline = _new_image_newline(config.hidden_size)
        else:
            self.mm_projector.requires_grad_(True)

        adapter = getattr(model_args, "pretrain_mm_mlp_adapter", None)
        if adapter:
            weights = projector_state_dict(load_weights_file(adapter))
            load_projector_weights(self.mm_projector, weights, repr(adapter))
            logger.info("loaded %d projector tensors from %s", len(weights), adapter)

    @torch.no_grad()
    def restore_projector_buffers(self) -> None:
        """Recompute the projector's non-persistent buffers after ``from_pretrained``.

        transformers 5 builds the model on the meta device and fills only tensors found in the checkpoint,
        so buffers that are never saved come back uninitialised. A reference projector is built on the CPU
        from the same config and its non-persistent buffers are copied over (cast to the loaded dtype).
        """
        projector = getattr(self, "mm_projector", None)
        names = list(_non_persistent_buffers(projector)) if projector is not None else []
        if not names:
            return
        with torch.device("cpu"):
            reference = build_vision_projector(copy.deepcopy(self.config))
        for name in names:
            target = projector.get_buffer(name)
            value = reference.get_buffer(name)
            if target.is_meta:
                raise RuntimeError(f"projector buffer {name!r} is still on the meta device after loading")
            target.copy_(value.to(device=target.device, dtype=target.dtype))


class LlavaMetaForCausalLM(ABC):
    """Mixin for the causal-LM class: construction, ``forward``, ``generate``, image encoding and the splice.

    Everything here is model-agnostic, so a new LLM is a thin subclass listed first in the bases (its
    ``forward``/``generate`` must win over the plain LLM's)::

        class LlavaQwenForCausalLM(LlavaMetaForCausalLM, Qwen2ForCausalLM):
            config_class = LlavaQwenConfig
            llava_model_class = LlavaQwenModel   # (LlavaMetaModel, Qwen2Model)

    Parameter names are the plain LLM's (``model.*``, ``lm_head``) plus ``model.mm_projector.*`` and
    ``model.image_newline``, as upstream and LLaVA-NeXT checkpoints store them.
    """

    config: Any
    #: The LLaVA base model class (``LlavaMetaModel`` mixed into the plain LLM's base model).
    llava_model_class: ClassVar[type[nn.Module]]
    # Self-trained checkpoints also hold the tower weights; the tower is always loaded from its own directory.
    _keys_to_ignore_on_load_unexpected = [r"^model\.vision_tower\."]

    def __init__(self, config: Any) -> None:
        # The plain causal LM's __init__ would build the plain base model; build the LLaVA one in its place,
        # with the same attribute names (``model``, ``lm_head``, no bias) so checkpoints load unchanged.
        PreTrainedModel.__init__(self, config)
        self.model = self.llava_model_class(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_model(self) -> LlavaMetaModel:
        """The base model that carries :class:`LlavaMetaModel`."""
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
    ) -> Any:
        """The plain LLM's forward on text with the images spliced in.

        Args:
            input_ids: ``[B, L]`` with ``IMAGE_TOKEN_INDEX`` (-200) where each image goes.
            attention_mask: ``[B, L]``, 1 for tokens, 0 for padding (either side).
            images: ``[N, 3, H, W]`` (or a list / 5-D tensor of views, see ``image_features``), one per marker.
            image_sizes: ``(width, height)`` per image (anyres).
            labels: ``[B, L]``; image positions get ``IGNORE_INDEX`` in the spliced labels.
            Other arguments: as the plain causal LM's ``forward``.

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

        The images are spliced into ``inputs_embeds`` and only those go to transformers' ``generate``, so the
        prompt is not echoed (upstream's behaviour). Plain greedy decoding (no sampling, one beam, no
        processors other than ``min_new_tokens``, no stopping criteria or streamer; see
        :func:`llava.model.greedy.greedy_plan`) runs as a short loop instead
        (:func:`llava.model.greedy.greedy_decode`: the same tokens without transformers' per-call and per-token
        bookkeeping, which cost a quarter of a small model's batch-1 answer).

        Args:
            inputs: ``[B, L]`` prompt ids with ``IMAGE_TOKEN_INDEX`` markers; a batch must be left-padded and
                come with ``attention_mask``.
            images: One image per marker, in batch order (see ``forward``).
            image_sizes: ``(width, height)`` per image.
            **kwargs: transformers generation options (``attention_mask``, ``max_new_tokens``,
                ``do_sample``, ``streamer``, ...). ``inputs_embeds`` is not accepted.
        """
        name = type(self).__name__
        if "inputs_embeds" in kwargs:
            raise ValueError(f"{name}.generate builds inputs_embeds itself; pass inputs (token ids) instead")
        if inputs is None:
            raise ValueError(f"{name}.generate needs prompt token ids in inputs, got None")
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
        plan = greedy_plan(self.generation_config, kwargs)
        if plan is not None:
            return greedy_decode(self._last_logits, inputs_embeds, attention_mask, position_ids, plan)
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        return super().generate(inputs_embeds=inputs_embeds, **kwargs)

    def _last_logits(
        self,
        input_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Any = None,
    ) -> tuple[torch.Tensor, Any]:
        """One cached forward for :func:`~llava.model.greedy.greedy_decode`: ``(logits [B, vocab] at the last
        position, past_key_values)``.

        The same computation as ``forward(..., logits_to_keep=1)`` on text (the base model, then ``lm_head``,
        as ``__init__`` builds them), without the causal-LM wrapper and its output object, which cost a fifth of
        a decoding step for a small model.
        """
        out = self.get_model()(
            input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
            position_ids=position_ids, past_key_values=past_key_values, use_cache=True,
        )
        return self.lm_head(out.last_hidden_state[:, -1]), out.past_key_values

    def get_vision_tower(self) -> CLIPVisionTower | None:
        return self.get_model().get_vision_tower()

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Vision tower, then projector, calling the projector the one documented way.

        When the projector's compressor plugin needs nothing beyond the select layer (built-ins, or
        :attr:`ModelNeeds.extra` false) this is upstream's ``projector(tower(images))``. Otherwise the tower
        is asked for what the plugin declared (``tower.encode(images, layers=..., attention_layer=...)`` when it
        needs other layers or the attention, ``tower(images)`` otherwise), and
        the projector is called as ``projector(features, inputs)`` with a :class:`CompressorInputs`
        (see :mod:`llava.model.multimodal_projector.plugins`). The prompt, for plugins that need it, is the one
        :meth:`prepare_inputs_labels_for_multimodal` sets for these images (``None`` when this is called on its
        own).

        Args:
            images: ``[N, 3, H, W]`` pixels.

        Returns:
            ``[N, K, hidden_size]``; K is the projector's output count (576 for mlp2x_gelu on CLIP-L/336, the
            budget of a compressor); or a list of N ``[K_i, hidden_size]`` for a projector whose count depends
            on the image.

        Raises:
            ValueError: If the plugin needs a square grid and the tower's is not, or the prompts set for these
                images do not match them one to one.
        """
        needs = needs_for_config(self.config)
        tower = self.get_vision_tower()
        projector = self.get_model().mm_projector
        if needs.square_grid:
            _check_square_grid(tower, self.config)
        if not needs.extra:
            return projector(_to_projector(tower(images), projector))
        inputs = self._compressor_inputs(tower, projector, images, needs)
        return projector(inputs.features, inputs)

    def _compressor_inputs(self, tower: Any, projector: nn.Module, images: torch.Tensor, needs: ModelNeeds) -> CompressorInputs:
        """Ask the tower for what ``needs`` lists and package it, cast once to the projector's dtype/device."""
        inputs = CompressorInputs(features=images, grid_shape=_grid_shape(tower), has_cls_token=bool(getattr(tower, "has_cls_token", True)))
        if needs.tower_layers or needs.attention:
            if not callable(getattr(tower, "encode", None)):
                raise ValueError(
                    f"mm_projector_type {self.config.mm_projector_type!r} needs the vision tower's other layers or "
                    f"attention, which {type(tower).__name__} does not provide (it has no encode method)"
                )
            select_layer = getattr(self.config, "mm_vision_select_layer", -2)
            attention_layer = attention_layer_for(select_layer, tower.config.num_hidden_layers) if needs.attention else None
            out = tower.encode(images, layers=tuple(needs.tower_layers), attention_layer=attention_layer)
            inputs.features = _to_projector(out.features, projector)
            inputs.layers = {index: _to_projector(value, projector) for index, value in (out.layers or {}).items()}
            inputs.attention = None if out.attention is None else _to_projector(out.attention, projector)
            inputs.keys = None if out.keys is None else _to_projector(out.keys, projector)
        else:  # only the prompt: the tower call of upstream
            inputs.features = _to_projector(tower(images), projector)
        if needs.prompt:
            prompt = getattr(self, "_compressor_prompt", None)
            if prompt is not None:
                embeds, ids = prompt
                if len(embeds) != images.shape[0]:
                    raise ValueError(
                        f"a prompt-conditioned projector needs one view per image: got {images.shape[0]} views for "
                        f"{len(embeds)} prompts; use image_aspect_ratio 'pad' or 'square'"
                    )
                inputs.prompt, inputs.prompt_ids = list(embeds), list(ids)
            inputs.run_language_model = self._run_language_model
        return inputs

    def _run_language_model(self, embeds: torch.Tensor) -> torch.Tensor:
        """The LLM's last hidden states ``[B, L, hidden]`` for ``[B, L, hidden]`` input embeddings (no cache)."""
        return self.get_model()(inputs_embeds=embeds, use_cache=False).last_hidden_state

    def _prompts_per_image(
        self, id_rows: Sequence[torch.Tensor], label_rows: Sequence[torch.Tensor], taken: Sequence[int]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each image's prompt: its sample's ids that are not training targets, image markers removed, embedded.

        Returns:
            ``(embeds [L_i, hidden] per image, ids [L_i] per image)``, in image order.
        """
        embed_tokens = self.get_model().embed_tokens
        embeds: list[torch.Tensor] = []
        ids: list[torch.Tensor] = []
        for row, row_labels, take in zip(id_rows, label_rows, taken):
            text = row[(row != IMAGE_TOKEN_INDEX) & (row_labels == IGNORE_INDEX)]
            embedded = embed_tokens(text)
            embeds.extend([embedded] * take)
            ids.extend([text] * take)
        return embeds, ids

    # ------------------------------------------------------------------------------------------ images

    def image_features(self, images: ImageInput, image_sizes: Sequence[Sequence[int]] | None = None) -> list[torch.Tensor]:
        """Projected visual tokens for each image.

        Args:
            images: ``[N, 3, H, W]``; or ``[N, V, 3, H, W]`` / a list of ``[3, H, W]`` or ``[V, 3, H, W]``
                tensors (V views per image, e.g. anyres), merged per ``config.mm_patch_merge_type``.
            image_sizes: ``(width, height)`` per image; needed for anyres ``spatial`` merging.

        Returns:
            N tensors ``[K_i, hidden_size]``.
        """
        if isinstance(images, torch.Tensor) and images.ndim == 4:
            return list(self.encode_images(images))
        if isinstance(images, torch.Tensor) and images.ndim != 5:
            raise ValueError(
                f"images must be [N, 3, H, W], [N, V, 3, H, W] or a list of [3, H, W] / [V, 3, H, W] tensors, "
                f"got shape {tuple(images.shape)}"
            )
        views = [image.unsqueeze(0) if image.ndim == 3 else image for image in images]
        for image in views:
            if image.ndim != 4:
                raise ValueError(f"each image must be [3, H, W] or [V, 3, H, W], got shape {tuple(image.shape)}")
        if len({tuple(image.shape[1:]) for image in views}) == 1:
            encoded = _split_views(self.encode_images(torch.cat(views)), [image.shape[0] for image in views])
        else:
            encoded = [_stack_views(self.encode_images(image)) for image in views]
        merge = getattr(self.config, "mm_patch_merge_type", None) or "flat"
        if merge not in PATCH_MERGE_TYPES:
            raise ValueError(f"unknown mm_patch_merge_type {merge!r}; expected one of {', '.join(PATCH_MERGE_TYPES)}")
        if merge == "flat":
            return [feature.flatten(0, 1) if isinstance(feature, torch.Tensor) else torch.cat(feature) for feature in encoded]
        if any(isinstance(feature, list) for feature in encoded):
            raise ValueError(
                f"mm_patch_merge_type {merge!r} needs the same token count in every view, but this projector's count "
                "depends on the image; use mm_patch_merge_type 'flat'"
            )
        if image_sizes is None or len(image_sizes) != len(encoded):
            raise ValueError(
                f"mm_patch_merge_type {merge!r} needs one (width, height) in image_sizes per image "
                f"({len(encoded)}), got {None if image_sizes is None else len(image_sizes)}"
            )
        return [self._spatial_merge(feature, size, merge) for feature, size in zip(encoded, image_sizes)]

    def _spatial_merge(self, feature: torch.Tensor, image_size: Sequence[int], merge: str) -> torch.Tensor:
        """Assemble one image's ``[V, K, D]`` views (base view first) into ``[tokens, D]`` per ``merge``.

        A projector that keeps the patch grid (K = gh·gw) gets upstream's stitching (and, for ``spatial_unpad``,
        unpadding, ``anyres_max_<N>`` shrinking and a newline per row); compressed views are kept whole, in view
        order, with one newline after each view under ``spatial_unpad``. The rules and counts are those of
        :func:`llava.visual_tokens.visual_token_count`, which the result is checked against.
        """
        unpad = merge == "spatial_unpad"
        newline = getattr(self.get_model(), "image_newline", None) if unpad else None
        if unpad and newline is None:
            raise RuntimeError(f"mm_patch_merge_type {merge!r} needs model.image_newline, which this model lacks")
        tower = self.get_vision_tower()
        grid = _grid_shape(tower)
        aspect = getattr(self.config, "image_aspect_ratio", None)
        views, per_view = feature.shape[0], feature.shape[1]
        if views > 1 and not is_anyres(aspect):
            raise ValueError(
                f"mm_patch_merge_type {merge!r} with several views per image needs image_aspect_ratio 'anyres' or "
                f"'anyres_max_<N>', got {aspect!r}"
            )
        pinpoints = getattr(self.config, "image_grid_pinpoints", None) if views > 1 else None
        expected_views = anyres_view_count(image_size, pinpoints, tower.image_size, aspect if views > 1 else None)
        if views != expected_views:
            raise ValueError(
                f"an image of size {tuple(image_size)} gives {expected_views} anyres views with image_grid_pinpoints "
                f"{pinpoints!r}, but {views} were given"
            )
        if views == 1 or per_view != grid[0] * grid[1]:
            merged = self._merge_compressed(feature, newline)
        else:
            merged = self._merge_grid(feature, image_size, grid, newline)
        expected = visual_token_count(
            image_size, pinpoints, tower.image_size, grid, per_view, merge, image_aspect_ratio=aspect if views > 1 else None
        )
        if merged.shape[0] != expected:
            raise RuntimeError(f"the {merge} merge gave {merged.shape[0]} visual tokens, but the rule says {expected}")
        return merged

    @staticmethod
    def _merge_compressed(feature: torch.Tensor, newline: torch.Tensor | None) -> torch.Tensor:
        """``[V, K, D]`` → ``[V·K, D]`` in view order, or ``[V·(K + 1), D]`` with ``newline`` after each view."""
        if newline is not None:
            ends = newline.to(feature)[None, None].expand(feature.shape[0], 1, -1)
            feature = torch.cat([feature, ends], dim=1)
        return feature.flatten(0, 1)

    def _merge_grid(
        self, feature: torch.Tensor, image_size: Sequence[int], grid: tuple[int, int], newline: torch.Tensor | None
    ) -> torch.Tensor:
        """Upstream's stitching of grid-keeping views: base view, then the crops as one map (see ``_spatial_merge``)."""
        tower = self.get_vision_tower()
        grid_rows, grid_cols = grid
        cols, rows = get_anyres_image_grid_shape(image_size, self.config.image_grid_pinpoints, tower.image_size)
        base, tiles = feature[0], feature[1:]
        tiles = tiles.view(rows, cols, grid_rows, grid_cols, -1)
        if newline is None:
            return torch.cat([base, tiles.permute(0, 2, 1, 3, 4).flatten(0, 3)], dim=0)
        stitched = tiles.permute(4, 0, 2, 1, 3).flatten(1, 2).flatten(2, 3)  # [D, rows*gh, cols*gw]
        stitched = unpad_image(stitched, image_size)
        max_views = anyres_max_views(getattr(self.config, "image_aspect_ratio", None))
        if max_views is not None:
            height, width = anyres_max_shape(stitched.shape[1], stitched.shape[2], max_views, grid)
            if (height, width) != tuple(stitched.shape[1:]):
                stitched = nn.functional.interpolate(stitched[None], size=(height, width), mode="bilinear")[0]
        row_ends = newline[:, None, None].expand(*stitched.shape[:-1], 1).to(stitched)
        stitched = torch.cat([stitched, row_ends], dim=-1)
        return torch.cat([base, stitched.flatten(1, 2).transpose(0, 1)], dim=0)

    # ------------------------------------------------------------------------------------------ splice

    def prepare_inputs_labels_for_multimodal(
        self,
        input_ids: torch.LongTensor | None,
        position_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None,
        past_key_values: Any,
        labels: torch.LongTensor | None,
        images: ImageInput | None,
        image_sizes: Sequence[Sequence[int]] | None = None,
        *,
        padding_side: str | None = None,
    ) -> tuple[None, torch.LongTensor | None, torch.Tensor | None, Any, torch.Tensor | None, torch.LongTensor | None]:
        """Replace every ``IMAGE_TOKEN_INDEX`` in ``input_ids`` with that image's K visual tokens.

        Padding (``attention_mask`` 0, on either side) is dropped, text is embedded, the next image's
        features go in at each marker (labels ``IGNORE_INDEX``), each sample is truncated to
        ``config.tokenizer_model_max_length`` (if set), and the batch is re-padded with zero embeddings on
        ``padding_side`` (default ``config.tokenizer_padding_side``, else right). Without images, or for a
        one-token (cached) decoding step, the inputs come back unchanged.

        Args:
            input_ids: ``[B, L]`` with ``IMAGE_TOKEN_INDEX`` at each image.
            position_ids: ``[B, L]`` or ``None``.
            attention_mask: ``[B, L]`` (1 = token) or ``None``.
            past_key_values: Passed through.
            labels: ``[B, L]`` or ``None``.
            images: See :meth:`image_features`; one image per marker, in batch order.
            image_sizes: ``(width, height)`` per image (anyres only).
            padding_side: ``"left"`` or ``"right"``; overrides the config (``generate`` uses left).

        Returns:
            ``(None, position_ids, attention_mask, past_key_values, inputs_embeds, labels)`` with
            ``inputs_embeds`` ``[B, L', hidden]``. ``labels`` is ``None`` if it was; ``position_ids`` is
            ``None`` if it was and the padding is on the right; ``attention_mask`` is ``None`` if it was and
            no padding was needed.

        Raises:
            ValueError: If markers and images do not match (no marker in any prompt, or more markers than
                images), or the model has no vision tower but images were given.
        """
        if input_ids is None or input_ids.shape[1] == 1 or images is None:
            if input_ids is not None and input_ids.shape[1] > 1 and bool((input_ids == IMAGE_TOKEN_INDEX).any()):
                count = int((input_ids == IMAGE_TOKEN_INDEX).sum())
                raise ValueError(
                    f"the prompts hold {count} <image> markers but no images were given; pass images= or "
                    "remove '<image>' from the prompt"
                )
            return input_ids, position_ids, attention_mask, past_key_values, None, labels
        if self.get_vision_tower() is None:
            raise ValueError("images were given but this model has no vision tower (config.mm_vision_tower is not set)")
        if getattr(self.config, "tune_mm_mlp_adapter", False) and getattr(self.config, "mm_use_im_start_end", False):
            raise NotImplementedError("mm_use_im_start_end together with tune_mm_mlp_adapter is not supported")

        keep = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
        all_labels = labels if labels is not None else torch.full_like(input_ids, IGNORE_INDEX)
        id_rows = [ids[mask] for ids, mask in zip(input_ids, keep)]
        label_rows = [row[mask] for row, mask in zip(all_labels, keep)]
        markers = [int((ids == IMAGE_TOKEN_INDEX).sum()) for ids in id_rows]
        num_images = images.shape[0] if isinstance(images, torch.Tensor) else len(images)
        taken = _images_per_sample(markers, num_images)

        if needs_for_config(self.config).prompt:
            self._compressor_prompt = self._prompts_per_image(id_rows, label_rows, taken)
        try:
            features = self.image_features(images, image_sizes)
        finally:
            self._compressor_prompt = None
        embed_tokens = self.get_model().embed_tokens
        sequences: list[torch.Tensor] = []
        sequence_labels: list[torch.Tensor] = []
        cursor = 0
        for ids, row_labels, count, take in zip(id_rows, label_rows, markers, taken):
            sample_features = features[cursor : cursor + count]
            cursor += take
            embeds, spliced_labels = self._splice_sample(ids, row_labels, sample_features, embed_tokens)
            sequences.append(embeds)
            sequence_labels.append(spliced_labels)

        max_length = getattr(self.config, "tokenizer_model_max_length", None)
        if max_length is not None:
            sequences = [seq[:max_length] for seq in sequences]
            sequence_labels = [seq[:max_length] for seq in sequence_labels]

        side = padding_side or getattr(self.config, "tokenizer_padding_side", None) or "right"
        if side not in PADDING_SIDES:
            raise ValueError(f"unknown padding side {side!r}; expected 'left' or 'right'")
        embeds, new_labels, new_mask, new_positions = _pad_batch(sequences, sequence_labels, side)

        padded = bool((~new_mask).any())
        if attention_mask is not None:
            out_mask = new_mask.to(attention_mask.dtype)
        else:
            out_mask = new_mask.long() if padded else None
        out_positions = new_positions if position_ids is not None or side == "left" else None
        if out_positions is not None and position_ids is not None:
            out_positions = out_positions.to(position_ids.dtype)
        return None, out_positions, out_mask, past_key_values, embeds, new_labels if labels is not None else None

    @staticmethod
    def _splice_sample(
        ids: torch.Tensor, labels: torch.Tensor, features: Sequence[torch.Tensor], embed_tokens: nn.Module
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One unpadded sample: ``[T]`` ids with len(features) markers → ``[T - markers + ΣK, D]`` and labels."""
        positions = torch.nonzero(ids == IMAGE_TOKEN_INDEX).flatten().tolist()
        bounds = [-1, *positions, ids.shape[0]]
        text_ids = [ids[start + 1 : end] for start, end in zip(bounds[:-1], bounds[1:])]
        text_labels = [labels[start + 1 : end] for start, end in zip(bounds[:-1], bounds[1:])]
        text_embeds = embed_tokens(torch.cat(text_ids)).split([chunk.shape[0] for chunk in text_ids])
        pieces: list[torch.Tensor] = []
        piece_labels: list[torch.Tensor] = []
        for index, (chunk, chunk_labels) in enumerate(zip(text_embeds, text_labels)):
            pieces.append(chunk)
            piece_labels.append(chunk_labels)
            if index < len(positions):
                visual = features[index].to(device=chunk.device, dtype=chunk.dtype)
                pieces.append(visual)
                piece_labels.append(torch.full((visual.shape[0],), IGNORE_INDEX, dtype=labels.dtype, device=labels.device))
        return torch.cat(pieces), torch.cat(piece_labels)

    # ------------------------------------------------------------------------------------------ tokenizer

    def initialize_vision_tokenizer(self, model_args: Any, tokenizer: Any) -> None:
        """Add ``<im_patch>`` / ``<im_start>``, ``<im_end>`` tokens as the training flags ask and resize
        the embeddings; new rows start at the mean of the existing ones."""
        if getattr(model_args, "mm_use_im_patch_token", False):
            tokenizer.add_tokens([DEFAULT_IMAGE_PATCH_TOKEN], special_tokens=True)
            self.resize_token_embeddings(len(tokenizer))
        if getattr(model_args, "mm_use_im_start_end", False):
            added = tokenizer.add_tokens([DEFAULT_IM_START_TOKEN, DEFAULT_IM_END_TOKEN], special_tokens=True)
            self.resize_token_embeddings(len(tokenizer))
            if added > 0:
                for weights in (self.get_input_embeddings().weight.data, self.get_output_embeddings().weight.data):
                    weights[-added:] = weights[:-added].mean(dim=0, keepdim=True)
            if getattr(model_args, "tune_mm_mlp_adapter", False):
                self.get_input_embeddings().requires_grad_(True)
                self.get_output_embeddings().requires_grad_(False)
            adapter = getattr(model_args, "pretrain_mm_mlp_adapter", None)
            if adapter and added > 0:
                self._load_new_token_rows(adapter, added)
        elif getattr(model_args, "mm_use_im_patch_token", False) and getattr(model_args, "tune_mm_mlp_adapter", False):
            self.get_input_embeddings().requires_grad_(False)
            self.get_output_embeddings().requires_grad_(False)

    @torch.no_grad()
    def _load_new_token_rows(self, adapter: str, added: int) -> None:
        """Copy the ``added`` newest input-embedding rows from a stage-1 adapter file."""
        key = "model.embed_tokens.weight"
        weights = load_weights_file(adapter)
        if key not in weights:
            raise ValueError(f"{adapter!r} has no {key!r}, which mm_use_im_start_end needs to restore the new tokens")
        source = weights[key]
        target = self.get_input_embeddings().weight
        if source.shape == target.shape:
            target[-added:] = source[-added:].to(target)
        elif source.shape[0] == added:
            target[-added:] = source.to(target)
        else:
            raise ValueError(
                f"{key} in {adapter!r} has shape {tuple(source.shape)}; expected {tuple(target.shape)} "
                f"or ({added}, {target.shape[1]})"
            )


def _stack_views(encoded: torch.Tensor | list[torch.Tensor]) -> torch.Tensor | list[torch.Tensor]:
    """One image's views as ``[V, K, D]``; views of different K (a data-dependent compressor) stay a list."""
    if isinstance(encoded, torch.Tensor):
        return encoded
    if len({tuple(view.shape) for view in encoded}) == 1:
        return torch.stack(list(encoded))
    return list(encoded)


def _split_views(encoded: torch.Tensor | list[torch.Tensor], counts: Sequence[int]) -> list:
    """``encode_images`` output for all views → per image ``[V, K, D]`` (see :func:`_stack_views`)."""
    if isinstance(encoded, torch.Tensor):
        return list(encoded.split(list(counts)))
    bounds = [0]
    for count in counts:
        bounds.append(bounds[-1] + count)
    return [_stack_views(encoded[start:end]) for start, end in zip(bounds[:-1], bounds[1:])]


def _to_projector(tensor: torch.Tensor, projector: nn.Module) -> torch.Tensor:
    """``tensor`` on the projector's device and in its dtype (unchanged for a projector without parameters)."""
    weight = next(projector.parameters(), None)
    return tensor if weight is None else tensor.to(device=weight.device, dtype=weight.dtype)


def attention_layer_for(select_layer: int, num_layers: int) -> int:
    """The encoder layer whose attention goes with ``hidden_states[select_layer]`` (1-based, as ``tower.encode``).

    That is the layer that produced those features (``-2`` on a 24-layer tower: layer 23). The embedding output
    (index 0, e.g. ``-2`` on a one-layer tower) has no attention of its own; the first layer, which attends over
    exactly those tokens, stands in for it.
    """
    return select_layer % (num_layers + 1) or 1


def _grid_shape(tower: Any) -> tuple[int, int]:
    """``(H, W)`` patch grid of the tower: ``tower.grid_shape`` where the tower has it, else a square grid."""
    shape = getattr(tower, "grid_shape", None)
    if shape is not None:
        return int(shape[0]), int(shape[1])
    side = int(tower.num_patches_per_side)
    return side, side


def _check_square_grid(tower: Any, config: Any) -> None:
    rows, cols = _grid_shape(tower)
    if rows != cols:
        raise ValueError(
            f"mm_projector_type {getattr(config, 'mm_projector_type', None)!r} needs a square patch grid, but the "
            f"vision tower gives {rows}x{cols}; use a tower with square inputs"
        )


def _pad_batch(
    sequences: Sequence[torch.Tensor], labels: Sequence[torch.Tensor], side: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad ``[T_i, D]`` sequences to ``[B, T, D]`` with zeros on ``side``.

    Returns:
        ``(embeds [B, T, D], labels [B, T] (IGNORE_INDEX on padding), mask [B, T] bool,
        positions [B, T] (0..T_i-1 on tokens, 0 on padding))``.
    """
    batch = len(sequences)
    length = max(seq.shape[0] for seq in sequences)
    first = sequences[0]
    embeds = first.new_zeros((batch, length, first.shape[-1]))
    out_labels = torch.full((batch, length), IGNORE_INDEX, dtype=labels[0].dtype, device=labels[0].device)
    mask = torch.zeros((batch, length), dtype=torch.bool, device=first.device)
    positions = torch.zeros((batch, length), dtype=torch.long, device=first.device)
    for row, (seq, seq_labels) in enumerate(zip(sequences, labels)):
        size = seq.shape[0]
        span = slice(length - size, length) if side == "left" else slice(0, size)
        embeds[row, span] = seq
        out_labels[row, span] = seq_labels
        mask[row, span] = True
        positions[row, span] = torch.arange(size, device=first.device)
    return embeds, out_labels, mask, positions
