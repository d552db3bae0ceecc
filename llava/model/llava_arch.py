"""The LLaVA architecture on top of any decoder-only LLM: vision tower → projector → visual tokens spliced
into the text embeddings at each ``<image>`` marker (``IMAGE_TOKEN_INDEX``, -200).

``LlavaMetaModel`` is mixed into the LLM's base model (it owns ``vision_tower``, ``mm_projector`` and, for
``spatial_unpad`` merging, ``image_newline``); ``LlavaMetaForCausalLM`` is mixed into the causal-LM head
class and owns image encoding and the splice. The number of visual tokens per image, K, is whatever the
projector returns (576 for ``mlp2x_gelu`` on CLIP-L/336, the budget of a compressor), never a constant.

The mixins keep upstream's public names and delegate the work to focused modules:

- :mod:`llava.model.weights_io`: weight files and the projector's state dict (``load_weights_file``,
  ``projector_state_dict``, ``load_projector_weights``);
- :mod:`llava.model.image_encoding`: tower → projector and a compressor plugin's inputs (``attention_layer_for``);
- :mod:`llava.model.compressor_text`: the question or prompt a text-reading compressor gets (``question_ids``);
- :mod:`llava.model.patch_merge`: ``mm_patch_merge_type``, AnyRes stitching, ``unpad_image``, ``image_newline``;
- :mod:`llava.model.splice`: input ids with markers + visual tokens → ``inputs_embeds``, labels, mask, positions;
- :mod:`llava.model.vision_token_setup`: ``<im_patch>`` / ``<im_start>`` / ``<im_end>`` tokens;
- :mod:`llava.model.output_hooks`: transformers' ``output_hidden_states`` hooks on the LLM's layers only (not the tower's).

Those names stay importable from here, where upstream users look for them.

Why this file is over 500 lines: the two mixins are upstream's public classes, and every method a LLaVA-NeXT or
lmms-eval caller reaches (``prepare_inputs_labels_for_multimodal``, ``encode_images``, ``initialize_vision_modules``,
``initialize_vision_tokenizer``) has to be a method here; each one delegates its work to the modules above.
"""

from __future__ import annotations

import copy
import functools
import logging
from abc import ABC
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any, ClassVar

import torch
import torch.nn as nn
from transformers import PreTrainedModel
from transformers import initialization as hf_init

from llava.constants import IMAGE_TOKEN_INDEX
from llava.model.cache_argument import cache_argument, take_cache

from . import image_encoding, patch_merge, splice
from .compressor_text import QuestionIds, text_per_image
from .context_length import check_prompt_lengths, cut_training_sequences, prompt_limit
from .fast_generation import CAPTURED_IMAGES, fast_path
from .greedy import greedy_decode, greedy_plan
from .image_encoding import TextPerImage, attention_layer_for, check_needs, encode_views, grid_shape
from .multimodal_encoder.builder import build_vision_tower
from .multimodal_encoder.clip_encoder import CLIPVisionTower
from .multimodal_projector.builder import build_vision_projector
from .multimodal_projector.plugins import plugin_for, projector_needs, settings_in
from .output_hooks import keep_capture_off_nested_models
from .patch_merge import MergeLayout, new_image_newline, unpad_image, uses_unpad
from .reducers import active_reducer, prompt_reduction, set_reducer
from .reduction import STATE_KEY
from .splice import PADDING_SIDES
from .video import check_modalities, features_with_videos, next_argument_order, prompts_per_frame, video_layout, video_positions
from .vision_token_setup import add_vision_tokens
from .weights_io import (
    PROJECTOR_KEY,
    load_projector_weights,
    load_weights_file,
    non_persistent_buffers,
    projector_state_dict,
)

logger = logging.getLogger(__name__)

ImageInput = torch.Tensor | Sequence[torch.Tensor]


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
        # output_hidden_states / output_attentions hooks go on the LLM's layers only, never a second set on the tower
        self.register_forward_pre_hook(keep_capture_off_nested_models, with_kwargs=True)
        if getattr(config, "mm_vision_tower", None):
            self.vision_tower = build_vision_tower(config, delay_load=True)
            self.mm_projector = build_vision_projector(config, vision_tower=self.vision_tower)
            check_needs(self.vision_tower, config, projector_needs(self.mm_projector))
            if uses_unpad(config):
                self.image_newline = new_image_newline(config.hidden_size)

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
            self.mm_projector = build_vision_projector(config, vision_tower=vision_tower)
            check_needs(vision_tower, config, projector_needs(self.mm_projector))
            if uses_unpad(config):
                self.image_newline = new_image_newline(config.hidden_size)
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
        names = list(non_persistent_buffers(projector)) if projector is not None else []
        if not names:
            return
        with torch.device("cpu"):
            reference = build_vision_projector(copy.deepcopy(self.config), vision_tower=self.get_vision_tower())
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
        modalities: Sequence[str] | str | None = None,
        question_ids: QuestionIds | None = None,
        generated_tokens: int = 0,
        llava_reduction: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The plain LLM's forward on text with the images spliced in.

        Args:
            input_ids: ``[B, L]`` with ``IMAGE_TOKEN_INDEX`` (-200) where each image goes.
            attention_mask: ``[B, L]``, 1 for tokens, 0 for padding (either side).
            images: ``[N, 3, H, W]`` (or a list / 5-D tensor of views, see ``image_features``), one per marker.
            image_sizes: ``(width, height)`` per image (anyres).
            labels: ``[B, L]``; image positions get ``IGNORE_INDEX`` in the spliced labels.
            modalities: LLaVA-NeXT's tag per ``images`` item: ``"image"`` (default), ``"video"`` (the item is
                ``[F, 3, H, W]`` frames, see :mod:`llava.model.video`) or ``"text"``.
            question_ids: Per sample, its question's token ids, for a compressor that reads the question
                (:func:`llava.model.compressor_text.question_ids`); ignored otherwise.
            generated_tokens: With a reducer (:meth:`set_reducer`): the last ``generated_tokens`` tokens of each row
                are answer tokens of a full re-forward, not part of the prompt the reducer reads.
            llava_reduction: The prompt's reducer state on the decoding steps of transformers' ``generate`` (which hands
                every step the keyword arguments :meth:`generate` gave it); callers leave it out.
            Other arguments: as the plain causal LM's ``forward``.

        Returns:
            ``CausalLMOutputWithPast`` with ``logits`` ``[B, L', vocab]`` over the spliced sequence (with a reducer,
            over the rows its last layer kept).
        """
        past_key_values = take_cache(past_key_values, kwargs)
        if llava_reduction is not None:
            kwargs[STATE_KEY] = llava_reduction
        if inputs_embeds is None:
            visual: list[torch.Tensor] | None = [] if self.reducers_active() else None
            (input_ids, position_ids, attention_mask, past_key_values, inputs_embeds, labels) = (
                self.prepare_inputs_labels_for_multimodal(
                    input_ids, position_ids, attention_mask, past_key_values, labels, images, image_sizes,
                    modalities=modalities,
                    question_ids=question_ids,
                    visual_out=visual,
                )
            )
            state = prompt_reduction(self, visual[0] if visual else None, attention_mask, generated_tokens, labels)
            if state is not None:
                kwargs[STATE_KEY] = state
        return super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            labels=labels,
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
            **{cache_argument(type(self.get_model()).forward): past_key_values},
            **kwargs,
        )

    @torch.no_grad()
    def generate(
        self,
        inputs: torch.LongTensor | None = None,
        images: ImageInput | None = None,
        image_sizes: Sequence[Sequence[int]] | None = None,
        modalities: Sequence[str] | str | None = None,
        question_ids: QuestionIds | None = None,
        **kwargs: Any,
    ) -> torch.LongTensor:
        """Generate from prompts with images; returns only the new tokens, ``[B, new_tokens]``.

        The images are spliced into ``inputs_embeds`` and only those go to transformers' ``generate``, so the
        prompt is not echoed (upstream's behaviour). With the fast path on (``--fast``,
        :func:`llava.model.fast_generation.enable_fast_path`), greedy and sampled calls (with a streamer and stopping
        criteria too) run on a static cache in captured or compiled steps, the tower and a fixed-count projector
        captured as well (:mod:`llava.model.fast_generation`); other calls, and every call without it, run eagerly.
        Eager plain greedy decoding (no sampling, one beam, no processors other than ``min_new_tokens``, no stopping
        criteria or streamer; see :func:`llava.model.greedy.greedy_plan`) runs as a short loop
        (:func:`llava.model.greedy.greedy_decode`: the same tokens without transformers' per-call and per-token
        bookkeeping, which cost a quarter of a small model's batch-1 answer).

        Args:
            inputs: ``[B, L]`` prompt ids with ``IMAGE_TOKEN_INDEX`` markers; a batch must be left-padded and
                come with ``attention_mask``.
            images: One image per marker, in batch order (see ``forward``).
            image_sizes: ``(width, height)`` per image.
            modalities: ``"image"`` / ``"video"`` per ``images`` item, as LLaVA-NeXT's ``generate`` takes it.
            question_ids: Per prompt, its question's token ids, for a compressor that reads the question
                (``**llava.model.compressor_text.question_kwargs(model, tokenizer, prompts, conv_mode)``).
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
        fast = fast_path(self)
        with fast.call(kwargs) if fast is not None else nullcontext() as run:
            inputs_embeds, position_ids, attention_mask, state = self._prompt_embeds(
                inputs, position_ids, attention_mask, images, image_sizes, modalities, question_ids
            )
            tokens = None if run is None else run.decode(inputs_embeds, attention_mask, position_ids)
        if tokens is not None:
            return tokens
        plan = greedy_plan(self.generation_config, kwargs)
        if plan is not None:
            step = self._last_logits if state is None else functools.partial(self._last_logits, reduction=state)
            return greedy_decode(step, inputs_embeds, attention_mask, position_ids, plan)
        if state is not None:
            kwargs[STATE_KEY] = state
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        return super().generate(inputs_embeds=inputs_embeds, **kwargs)

    def _prompt_embeds(
        self,
        inputs: torch.LongTensor,
        position_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None,
        images: ImageInput | None,
        image_sizes: Sequence[Sequence[int]] | None,
        modalities: Sequence[str] | str | None,
        question_ids: QuestionIds | None,
    ) -> tuple[torch.Tensor, torch.LongTensor | None, torch.Tensor | None, Any]:
        """``(inputs_embeds [B, L, hidden], position_ids, attention_mask, reducer state)`` of left-padded prompts with
        images spliced in (or of text alone); the state is ``None`` without an in-LLM reducer (:meth:`set_reducer`)."""
        if images is None:
            splice.check_no_image_markers(inputs)
            return self.get_model().embed_tokens(inputs), position_ids, attention_mask, None
        visual: list[torch.Tensor] | None = [] if self.reducers_active() else None
        _, position_ids, attention_mask, _, inputs_embeds, _ = self.prepare_inputs_labels_for_multimodal(
            inputs, position_ids, attention_mask, None, None, images, image_sizes, padding_side="left",
            modalities=modalities,
            question_ids=question_ids,
            visual_out=visual,
        )
        state = prompt_reduction(self, visual[0] if visual else None, attention_mask)
        return inputs_embeds, position_ids, attention_mask, state

    def _last_logits(
        self,
        input_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Any = None,
        reduction: Any = None,
    ) -> tuple[torch.Tensor, Any]:
        """One cached forward for :func:`~llava.model.greedy.greedy_decode`: ``(logits [B, vocab] at the last
        position, past_key_values)``.

        The same computation as ``forward(..., logits_to_keep=1)`` on text (the base model, then ``lm_head``,
        as ``__init__`` builds them), without the causal-LM wrapper and its output object, which cost a fifth of
        a decoding step for a small model. ``reduction`` is the prompt's reducer state (:meth:`set_reducer`).
        """
        name = cache_argument(type(self.get_model()).forward)
        extra = {} if reduction is None else {STATE_KEY: reduction}
        out = self.get_model()(
            input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
            position_ids=position_ids, use_cache=True, **{name: past_key_values}, **extra,
        )
        return self.lm_head(out.last_hidden_state[:, -1]), getattr(out, name)

    def get_vision_tower(self) -> CLIPVisionTower | None:
        return self.get_model().get_vision_tower()

    def set_reducer(self, name: str | None) -> None:
        """Run the in-LLM reducer ``name`` (a registered type such as ``mydrop_k2_r50``; ``None`` or ``"none"``: no
        reducer) on every prompt with images from now on (:mod:`llava.model.reducers`)."""
        set_reducer(self, name)

    def reducers_active(self) -> bool:
        """Whether a reducer runs inside the LLM: the fast generation path (static cache) cannot run it."""
        return active_reducer(self) is not None

    # ------------------------------------------------------------------------------------------ images

    def encode_images(self, images: torch.Tensor, text: TextPerImage | None = None) -> torch.Tensor:
        """Vision tower, then projector, calling the projector the one documented way.

        When the projector's compressor plugin needs nothing beyond the select layer (built-ins, or
        :attr:`ModelNeeds.extra` false) this is upstream's ``projector(tower(images))``; otherwise
        ``projector(features, inputs)`` with a :class:`CompressorInputs` holding what the plugin declared (resolved
        when the projector was built). The work is :func:`llava.model.image_encoding.encode_images`.

        Args:
            images: ``[N, 3, H, W]`` pixels.
            text: For a compressor that reads text, each image's text ``(embeds [L_i, hidden], ids [L_i])``, as
                :meth:`prepare_inputs_labels_for_multimodal` passes it (:mod:`llava.model.compressor_text`);
                ``None`` when the images come without text (e.g. the demo's token count).

        Returns:
            ``[N, K, hidden_size]``; K is the projector's output count (576 for mlp2x_gelu on CLIP-L/336, the
            budget of a compressor); or a list of N ``[K_i, hidden_size]`` for a projector whose count depends
            on the image.

        Raises:
            ValueError: If the plugin needs a square grid and the tower's is not, or ``text`` does not match the
                images one to one.
        """
        captured = CAPTURED_IMAGES.get()  # set by the fast path for the generate call running in this thread
        if captured is not None and text is None and isinstance(images, torch.Tensor) and images.ndim == 4:
            features = captured(images)
            if features is not None:
                return features
        return image_encoding.encode_images(
            self.get_vision_tower(), self.get_model().mm_projector, images, self.config,
            text=text, run_language_model=self._run_language_model,
        )

    def _run_language_model(self, embeds: torch.Tensor) -> torch.Tensor:
        """The LLM's last hidden states ``[B, L, hidden]`` for ``[B, L, hidden]`` input embeddings (no cache)."""
        return self.get_model()(inputs_embeds=embeds, use_cache=False).last_hidden_state

    def image_features(
        self,
        images: ImageInput,
        image_sizes: Sequence[Sequence[int]] | None = None,
        modalities: Sequence[str] | str | None = None,
        *,
        text: TextPerImage | None = None,
    ) -> list[torch.Tensor]:
        """Projected visual tokens for each image or video.

        Args:
            images: ``[N, 3, H, W]``; or ``[N, V, 3, H, W]`` / a list of ``[3, H, W]`` or ``[V, 3, H, W]``
                tensors (V views per image, e.g. anyres), merged per ``config.mm_patch_merge_type``
                (:func:`llava.model.patch_merge.merge_views`). An item tagged ``"video"`` in ``modalities`` is
                ``[F, 3, H, W]`` frames, turned into tokens by :func:`llava.model.video.video_tokens`.
            image_sizes: ``(width, height)`` per image; needed for anyres ``spatial`` merging. With videos among
                the items, one entry per item (as LLaVA-NeXT; the videos' entries are not read).
            modalities: LLaVA-NeXT's tag per item (``"image"``, ``"video"``, ``"text"``); missing entries are images.
            text: Each image's text for a compressor that reads it (see :meth:`encode_images`); a video's text goes
                with each of its frames.

        Returns:
            N tensors ``[K_i, hidden_size]``.
        """
        count = images.shape[0] if isinstance(images, torch.Tensor) else len(images)
        videos = set(video_positions(check_modalities(modalities), count))
        if not videos:
            if isinstance(images, torch.Tensor) and images.ndim == 4:
                return list(self.encode_images(images, text))
            encoded = encode_views(images, lambda views: self.encode_images(views, text))
            merge = getattr(self.config, "mm_patch_merge_type", None) or "flat"
            return patch_merge.merge_views(encoded, image_sizes, merge, None if merge == "flat" else self._merge_layout())
        frame_text = None if text is None else prompts_per_frame(text, images, modalities)
        merge = getattr(self.config, "mm_patch_merge_type", None) or "flat"
        layout = video_layout(self.config, grid_shape(self.get_vision_tower()), getattr(self.get_model(), "image_newline", None))
        return features_with_videos(
            images, image_sizes, videos, lambda views: self.encode_images(views, frame_text),
            lambda encoded, sizes: patch_merge.merge_views(encoded, sizes, merge, None if merge == "flat" else self._merge_layout()),
            layout,
        )

    def _merge_layout(self) -> MergeLayout:
        """The model's geometry for a spatial merge: ``image_newline``, the tower's grid and side, AnyRes keys."""
        tower = self.get_vision_tower()
        return MergeLayout(
            newline=getattr(self.get_model(), "image_newline", None),
            grid=grid_shape(tower),
            tower_side=tower.image_size,
            aspect=getattr(self.config, "image_aspect_ratio", None),
            pinpoints=getattr(self.config, "image_grid_pinpoints", None),
        )

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
        *next_order: Any,
        padding_side: str | None = None,
        modalities: Sequence[str] | str | None = None,
        question_ids: QuestionIds | None = None,
        visual_out: list[torch.Tensor] | None = None,
    ) -> tuple[None, torch.LongTensor | None, torch.Tensor | None, Any, torch.Tensor | None, torch.LongTensor | None]:
        """Replace every ``IMAGE_TOKEN_INDEX`` in ``input_ids`` with that image's K visual tokens.

        Padding (``attention_mask`` 0, on either side) is dropped, text is embedded, the next image's
        features go in at each marker (labels ``IGNORE_INDEX``), a training sample (``labels`` given) is cut to
        ``config.tokenizer_model_max_length`` (if set) as upstream cuts it, while an inference input over it is
        refused (:mod:`llava.model.context_length`), and the batch is re-padded with zero embeddings on
        ``padding_side`` (default ``config.tokenizer_padding_side``, else right). Without images, or for a
        one-token (cached) decoding step, the inputs come back unchanged. The steps are in
        :mod:`llava.model.splice`.

        Args:
            input_ids: ``[B, L]`` with ``IMAGE_TOKEN_INDEX`` at each image.
            position_ids: ``[B, L]`` or ``None``.
            attention_mask: ``[B, L]`` (1 = token) or ``None``.
            past_key_values: Passed through.
            labels: ``[B, L]`` or ``None``.
            images: See :meth:`image_features`; one image per marker, in batch order.
            image_sizes: ``(width, height)`` per image (anyres only).
            next_order: LLaVA-NeXT's positional order ``(..., images, modalities, image_sizes)`` is accepted too:
                a string or list of strings in ``image_sizes``' place is read as ``modalities`` and the next
                positional argument as ``image_sizes``.
            padding_side: ``"left"`` or ``"right"``; overrides the config (``generate`` uses left).
            modalities: ``"image"`` / ``"video"`` / ``"text"`` per ``images`` item (see :meth:`image_features`).
            question_ids: Per sample, its question's token ids, for a compressor that reads the question; the
                text a compressor reads goes to :meth:`image_features` as an argument
                (:func:`llava.model.compressor_text.text_per_image`).
            visual_out: A list that receives the ``[B, L']`` bool image-token positions of the spliced batch (for an
                in-LLM reducer); ``None``: not computed.

        Returns:
            ``(None, position_ids, attention_mask, past_key_values, inputs_embeds, labels)`` with
            ``inputs_embeds`` ``[B, L', hidden]``. ``labels`` is ``None`` if it was; ``position_ids`` is
            ``None`` if it was and the padding is on the right; ``attention_mask`` is ``None`` if it was and
            no padding was needed.

        Raises:
            ValueError: If markers and images do not match (no marker in any prompt, or more markers than
                images), or the model has no vision tower but images were given.
            PromptTooLong: (a ValueError) If an inference input (no ``labels``) is longer than
                ``config.tokenizer_model_max_length`` once its visual tokens are in.
        """
        image_sizes, modalities = next_argument_order(image_sizes, next_order, modalities)
        if input_ids is None or input_ids.shape[1] == 1 or images is None:
            if input_ids is not None and input_ids.shape[1] > 1:
                splice.check_no_image_markers(input_ids)
            return input_ids, position_ids, attention_mask, past_key_values, None, labels
        if self.get_vision_tower() is None:
            raise ValueError("images were given but this model has no vision tower (config.mm_vision_tower is not set)")
        if getattr(self.config, "tune_mm_mlp_adapter", False) and getattr(self.config, "mm_use_im_start_end", False):
            raise NotImplementedError("mm_use_im_start_end together with tune_mm_mlp_adapter is not supported")

        id_rows, label_rows = splice.unpadded_rows(input_ids, attention_mask, labels)
        markers = [int((ids == IMAGE_TOKEN_INDEX).sum()) for ids in id_rows]
        num_images = images.shape[0] if isinstance(images, torch.Tensor) else len(images)
        taken = splice.images_per_sample(markers, num_images)

        embed_tokens = self.get_model().embed_tokens
        needs = projector_needs(self.get_model().mm_projector)
        text = text_per_image(
            needs.text, id_rows, label_rows, taken, embed_tokens, question_ids, getattr(self.config, "mm_projector_type", None),
            encode_question=self.get_vision_tower().encode_text if needs.text_encoder == "tower" else None,
        )
        features = self.image_features(images, image_sizes, modalities, text=text)
        sequences, sequence_labels = splice.splice_batch(id_rows, label_rows, features, markers, taken, embed_tokens)

        if labels is None:  # an inference input is never cut (llava.model.context_length)
            check_prompt_lengths([int(seq.shape[0]) for seq in sequences], self.config)
        else:
            sequences, sequence_labels = cut_training_sequences(sequences, sequence_labels, self.config)

        side = padding_side or getattr(self.config, "tokenizer_padding_side", None) or "right"
        if visual_out is not None:
            # the flags follow the sequences: training cuts them at the prompt limit, inference never cuts (refused above)
            visual_out.append(splice.visual_flags(id_rows, features, markers, taken, prompt_limit(self.config), side))
        out_positions, out_mask, embeds, out_labels = splice.padded_outputs(
            sequences, sequence_labels, side, attention_mask, position_ids, labels
        )
        return None, out_positions, out_mask, past_key_values, embeds, out_labels

    # ------------------------------------------------------------------------------------------ tokenizer

    def initialize_vision_tokenizer(self, model_args: Any, tokenizer: Any) -> None:
        """Add ``<im_patch>`` / ``<im_start>``, ``<im_end>`` tokens as the training flags ask and resize
        the embeddings; new rows start at the mean of the existing ones
        (:func:`llava.model.vision_token_setup.add_vision_tokens`)."""
        add_vision_tokens(self, model_args, tokenizer)


__all__ = [
    "PADDING_SIDES",
    "PROJECTOR_KEY",
    "ImageInput",
    "LlavaMetaForCausalLM",
    "LlavaMetaModel",
    "attention_layer_for",
    "init_image_newline",
    "load_projector_weights",
    "load_weights_file",
    "projector_state_dict",
    "unpad_image",
]
