"""What the vLLM plugin takes from this package, with no vLLM import (so the default test run checks it):

* :func:`check_servable`: whether a checkpoint can be served, decided from what its projector's plugin declares
  (its token count must be fixed by the config, and it must not read the question through the LLM), in one
  sentence when it cannot;
* :func:`tokens_per_view` / :func:`image_token_count`: how many placeholder tokens an image becomes, before the
  model runs (vLLM needs it in the front end): the plugin's declared count per view, laid out by
  :func:`llava.visual_tokens.visual_token_count`, the rule the model itself is checked against;
* :class:`VisionSide`: the tower, the projector (built through the one registry, ``build_vision_projector``) and
  ``image_newline``, turning pixels into each image's visual tokens exactly as
  :meth:`llava.model.llava_arch.LlavaMetaForCausalLM.image_features` does for images;
* :func:`route_weight`: where each tensor of a checkpoint goes (the LLM, the projector, ``image_newline``, or nowhere
  for the tower copy that self-trained checkpoints hold: the tower loads from its own folder, as in ``llava``);
* :func:`language_architecture`: the plain LLM's architecture name, which vLLM implements.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn as nn

from llava.utils import UserError

logger = logging.getLogger(__name__)

#: Where a checkpoint tensor goes (:func:`route_weight`).
LANGUAGE, PROJECTOR, NEWLINE, SKIP = "language_model", "projector", "image_newline", "skip"
_PROJECTOR_PREFIX, _NEWLINE_KEY, _TOWER_PREFIX = "model.mm_projector.", "model.image_newline", "model.vision_tower."


def check_servable(config: Any, source: str = "the checkpoint") -> None:
    """Refuse, in one sentence, a checkpoint the plugin cannot serve.

    Raises:
        UserError: When the config names no vision tower or a tower folder that does not exist, an unknown
            projector type, a projector whose plugin reads the question through the LLM (``ModelNeeds.text``) or
            whose token count depends on the image (``tokens_depend_on_image``), or ``mm_use_im_start_end``.
    """
    from llava.model.multimodal_encoder.builder import tower_model_type
    from llava.model.multimodal_projector.plugins import resolve_projector, tokens_depend_on_image

    tower = getattr(config, "mm_vision_tower", None)
    if not tower:
        raise UserError(f"{source} names no vision tower (mm_vision_tower), so it is a plain language model; serve it with vLLM's own model support")
    try:
        tower_model_type(os.path.expanduser(str(tower)))
        registration, _ = resolve_projector(getattr(config, "mm_projector_type", None) or "linear")
    except ValueError as error:
        raise UserError(f"{source}: {error}") from None
    projector_type, plugin = config.mm_projector_type, registration.plugin
    if plugin.needs.text is not None:
        reader = "the vision tower's paired text encoder" if plugin.needs.text_encoder == "tower" else "the language model"
        raise UserError(
            f"{source}: mm_projector_type {projector_type!r} reads the {plugin.needs.text} through {reader} before the "
            "image is encoded, which vLLM's one-pass multimodal encoder cannot do; answer with llava's own loaders "
            "(--backend local)"
        )
    if tokens_depend_on_image(config):
        raise UserError(
            f"{source}: mm_projector_type {projector_type!r} keeps a number of tokens that depends on the image, but vLLM "
            "must know each image's token count before the model runs; serve a fixed-count setting instead"
        )
    if getattr(config, "mm_use_im_start_end", False):
        raise UserError(f"{source} was trained with mm_use_im_start_end, which the vLLM plugin does not serve; use llava's own loaders")


def _cost_setting(config: Any) -> Any:
    from llava.cost.flops import LMDims
    from llava.cost.module import CostSetting
    from llava.cost.presets import projector_depth
    from llava.model.multimodal_projector.builder import tower_shape

    shape = tower_shape(config)
    return CostSetting(mm_hidden=int(config.mm_hidden_size), lm=LMDims.from_config(config), grid=tuple(shape.grid),
                       projector_depth=projector_depth(config.mm_projector_type))


def tokens_per_view(config: Any) -> int:
    """The visual tokens the projector gives one tower-sized view, as its plugin declares (``CostModel``).

    Raises:
        UserError: When the plugin declares no count.
    """
    from llava.cost.module import module_cost

    projector_type = getattr(config, "mm_projector_type", None) or "linear"
    try:
        tokens = module_cost(projector_type, _cost_setting(config), config).tokens
    except ValueError as error:
        raise UserError(f"the vLLM plugin needs each image's token count before the model runs: {error}") from None
    if getattr(config, "mm_vision_select_feature", "patch") == "cls_patch":
        from llava.model.multimodal_projector.builder import tower_shape

        shape = tower_shape(config)
        if tokens == shape.grid[0] * shape.grid[1]:
            tokens += 1  # a grid-keeping projector keeps the CLS token too
    return int(tokens)


def tower_side(config: Any) -> int:
    """The tower's square input side in pixels (what AnyRes canvases are measured in).

    Raises:
        UserError: For a tower whose input is not square.
    """
    from llava.model.multimodal_encoder.builder import tower_model_type
    from llava.model.multimodal_encoder.registry import resolve_vision_tower

    name = os.path.expanduser(str(config.mm_vision_tower))
    vision = resolve_vision_tower(tower_model_type(name), source=name).config_class.from_pretrained(name)
    side = getattr(vision, "vision_config", None) or vision
    height, width = side.image_size if isinstance(side.image_size, (list, tuple)) else (side.image_size, side.image_size)
    if int(height) != int(width):
        raise UserError(f"vision tower {name!r} takes {height}x{width}-pixel inputs; the vLLM plugin serves square towers")
    return int(height)


def image_token_count(config: Any, image_size: Sequence[int], per_view: int, side: int, grid: Sequence[int]) -> int:
    """Placeholder tokens for one image of ``image_size`` = (width, height): the model's own rule."""
    from llava.visual_tokens import visual_token_count

    grid_keeping = per_view == grid[0] * grid[1]
    return visual_token_count(
        image_size, getattr(config, "image_grid_pinpoints", None), side, tuple(grid), None if grid_keeping else per_view,
        getattr(config, "mm_patch_merge_type", None) or "flat", image_aspect_ratio=getattr(config, "image_aspect_ratio", None),
    )


def language_architecture(config: Any) -> str:
    """The plain causal LM class name of a LLaVA config (``LlamaForCausalLM`` for ``llava_llama``), which vLLM
    implements under the same name."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from llava.model.language_model.registry import resolve_language_model

    base = resolve_language_model(getattr(config, "model_type", None)).base_model_type
    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[base]


def route_weight(name: str) -> tuple[str, str]:
    """``(part, name within the part)`` of a checkpoint tensor (see the module docstring)."""
    if name.startswith(_PROJECTOR_PREFIX):
        return PROJECTOR, name[len(_PROJECTOR_PREFIX):]
    if name == _NEWLINE_KEY:
        return NEWLINE, ""
    if name.startswith(_TOWER_PREFIX):
        return SKIP, name
    return LANGUAGE, name


class VisionSide(nn.Module):
    """Tower → projector (→ AnyRes merge) of a LLaVA config, as ``LlavaMetaForCausalLM.image_features`` for images.

    The tower loads its weights from its own folder (``mm_vision_tower``); the projector and ``image_newline`` come
    from the checkpoint through :meth:`load_checkpoint_tensors`.

    Raises:
        UserError: See :func:`check_servable`; also when the built projector reads text (a factory's own needs).
    """

    def __init__(self, config: Any) -> None:
        super().__init__()
        from llava.model.image_encoding import check_needs
        from llava.model.multimodal_encoder.builder import build_vision_tower
        from llava.model.multimodal_projector.builder import build_vision_projector
        from llava.model.multimodal_projector.plugins import projector_needs
        from llava.model.patch_merge import new_image_newline, uses_unpad

        check_servable(config)
        self.config = config
        try:
            self.vision_tower = build_vision_tower(config)
        except ValueError as error:
            raise UserError(f"the checkpoint's vision tower cannot be loaded: {error}") from None
        self.mm_projector = build_vision_projector(config, vision_tower=self.vision_tower)
        needs = projector_needs(self.mm_projector)
        if needs.text is not None:
            raise UserError(f"mm_projector_type {config.mm_projector_type!r} reads the {needs.text} through the language model, "
                            "which the vLLM plugin cannot serve")
        check_needs(self.vision_tower, config, needs)
        self.image_newline = new_image_newline(config.hidden_size) if uses_unpad(config) else None

    def load_checkpoint_tensors(self, projector: dict[str, torch.Tensor], newline: torch.Tensor | None, source: str) -> None:
        """Load the projector's tensors (names without ``model.mm_projector.``) and ``image_newline``."""
        from llava.model.weights_io import load_projector_weights

        load_projector_weights(self.mm_projector, projector, source)
        if self.image_newline is not None:
            if newline is None:
                raise UserError(f"{source} has no model.image_newline, which its mm_patch_merge_type {self.config.mm_patch_merge_type!r} needs")
            with torch.no_grad():
                self.image_newline.copy_(newline.to(self.image_newline.dtype))

    def encode(self, pixels: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        """``[N, 3, H, W]`` → ``[N, K, hidden]``."""
        from llava.model.image_encoding import encode_images

        return encode_images(self.vision_tower, self.mm_projector, pixels, self.config)

    def features(self, pixels: Sequence[torch.Tensor], image_sizes: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Each image's visual tokens ``[K_i, hidden]``: ``pixels`` holds ``[3, H, W]`` or ``[V, 3, H, W]`` per image."""
        from llava.model import patch_merge
        from llava.model.image_encoding import encode_views, grid_shape

        merge = getattr(self.config, "mm_patch_merge_type", None) or "flat"
        if all(image.ndim == 3 for image in pixels) and merge == "flat":
            return list(self.encode(torch.stack(list(pixels))))
        encoded = encode_views(list(pixels), self.encode)
        layout = None
        if merge != "flat":
            layout = patch_merge.MergeLayout(
                newline=self.image_newline, grid=grid_shape(self.vision_tower), tower_side=self.vision_tower.image_size,
                aspect=getattr(self.config, "image_aspect_ratio", None), pinpoints=getattr(self.config, "image_grid_pinpoints", None),
            )
        return patch_merge.merge_views(encoded, image_sizes, merge, layout)


def split_weights(weights: Iterable[tuple[str, torch.Tensor]]) -> tuple[list[tuple[str, torch.Tensor]], dict[str, torch.Tensor], torch.Tensor | None]:
    """A checkpoint's tensors as ``(LLM tensors, projector tensors, image_newline)``; the tower copy is dropped."""
    language: list[tuple[str, torch.Tensor]] = []
    projector: dict[str, torch.Tensor] = {}
    newline = None
    for name, tensor in weights:
        part, inner = route_weight(name)
        if part == LANGUAGE:
            language.append((inner, tensor))
        elif part == PROJECTOR:
            projector[inner] = tensor
        elif part == NEWLINE:
            newline = tensor
    return language, projector, newline


def largest_image(config: Any, side: int) -> tuple[int, int]:
    """``(width, height)`` of the image that becomes the most tokens: the largest AnyRes canvas, else the tower's square."""
    from llava.mm_utils import is_anyres, parse_grid_pinpoints

    pinpoints = getattr(config, "image_grid_pinpoints", None)
    if is_anyres(getattr(config, "image_aspect_ratio", None)) and pinpoints:
        return max((tuple(map(int, size)) for size in parse_grid_pinpoints(pinpoints, side)), key=lambda size: size[0] * size[1])
    return side, side


def placeholder_token_id(tokenizer: Any, vocab_size: int) -> int:
    """The id that stands for image tokens in vLLM's prompts (their embeddings are replaced by the visual tokens).

    A spare row of the embedding (one no text tokenizes to, as Qwen's padded vocabularies have), else the tokenizer's
    unknown token (which byte-fallback tokenizers never emit).

    Raises:
        UserError: When the model has neither.
    """
    if vocab_size > len(tokenizer):
        return vocab_size - 1
    if tokenizer.unk_token_id is not None:
        return int(tokenizer.unk_token_id)
    raise UserError("the checkpoint's vocabulary has no spare row and no unknown token to stand for image tokens in vLLM's prompts")


def relay_prompt(ids: list[int], tokenizer: Any, placeholder: int) -> list[int]:
    """vLLM's token ids of a whole prompt → the ids ``tokenizer_image_token`` gives the same text, one ``placeholder``
    per ``<image>`` marker (each text chunk tokenized on its own, and a BOS first when the tokenizer adds one: the
    HF path's ids).

    vLLM tokenizes a completion prompt with the tokenizer's special tokens and a rendered chat prompt without them;
    either way the text is recovered by decoding (a leading BOS set aside), and used only when encoding it again
    gives back exactly those ids. Otherwise, or when the prompt already holds placeholders, ``ids`` stay as they are.
    """
    from llava.mm_utils import tokenizer_image_token

    if placeholder in ids:
        return ids
    bos = tokenizer.bos_token_id
    body = ids[1:] if ids and bos is not None and ids[0] == bos else ids
    text = tokenizer.decode(body)
    if tokenizer(text, add_special_tokens=False).input_ids != body:
        logger.warning("a prompt's tokens do not decode to a text that encodes back to them; its image markers stay as "
                       "vLLM tokenized them")
        return ids
    return tokenizer_image_token(text, tokenizer, placeholder)


def per_image(value: Any) -> list[Any]:
    """A batched multimodal field (a tensor, or a list of per-image tensors) as one entry per image."""
    return list(value) if isinstance(value, (list, tuple)) else list(value.unbind(0))


def check_token_counts(config: Any, features: Sequence[torch.Tensor], image_sizes: Sequence[Sequence[int]], per_view: int,
                       vision: VisionSide) -> None:
    """Refuse visual tokens whose count is not the one the front end announced (a plugin's declared count is wrong).

    Raises:
        RuntimeError: Naming the projector type and both counts.
    """
    from llava.model.image_encoding import grid_shape

    tower = vision.vision_tower
    for feature, size in zip(features, image_sizes):
        announced = image_token_count(config, size, per_view, tower.image_size, grid_shape(tower))
        if feature.shape[0] != announced:
            raise RuntimeError(
                f"mm_projector_type {config.mm_projector_type!r} gave {feature.shape[0]} visual tokens for a {size[0]}x{size[1]} "
                f"image, but its plugin's declared count makes {announced}; the plugin's cost model must declare the real count"
            )


__all__ = [
    "LANGUAGE", "NEWLINE", "PROJECTOR", "SKIP", "VisionSide", "check_servable", "check_token_counts", "image_token_count",
    "language_architecture", "largest_image", "per_image", "placeholder_token_id", "relay_prompt", "route_weight", "split_weights",
    "tokens_per_view", "tower_side",
]
