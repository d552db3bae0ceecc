"""Image encoding: vision tower → projector, and what a compressor plugin gets besides the select layer.

:func:`encode_images` is the body of :meth:`llava.model.llava_arch.LlavaMetaForCausalLM.encode_images`: upstream's
``projector(tower(images))``, or, for a plugin whose :class:`ModelNeeds` asks for more (other tower layers, one
layer's attention, the question or the prompt), ``projector(features, inputs)`` with a :class:`CompressorInputs`
(:mod:`llava.model.multimodal_projector.plugins`). The needs were resolved when the projector was built and are
read from it (:func:`~llava.model.multimodal_projector.plugins.projector_needs`); the text arrives as an argument
(:data:`TextPerImage`). :func:`encode_views` runs it over images of several views (AnyRes) and hands each
image's views to :func:`llava.model.patch_merge.merge_views`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn

from .multimodal_projector.plugins import CompressorInputs, ModelNeeds, projector_needs

#: Per image, the embedded text a compressor asked for ``[L_i, hidden]`` and its ids ``[L_i]`` (see
#: ``CompressorInputs.prompt``): ``(embeds per image, ids per image)``.
TextPerImage = tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]]


def to_projector(tensor: torch.Tensor, projector: nn.Module) -> torch.Tensor:
    """``tensor`` on the projector's device and in its dtype (unchanged for a projector without parameters)."""
    weight = next(projector.parameters(), None)
    return tensor if weight is None else tensor.to(device=weight.device, dtype=weight.dtype)


def attention_layer_for(select_layer: int, num_layers: int, offset: int = 0, projector_type: str | None = None) -> int:
    """The encoder layer (1-based, as ``tower.encode``'s ``attention_layer``) ``offset`` layers after the one that
    produced ``hidden_states[select_layer]``.

    ``offset`` 0 is the layer that produced those features (``-2`` on a 24-layer tower: layer 23); ``offset`` 1
    is the next layer, whose input they are (``-2`` on 24 layers: layer 24, the last; a one-layer tower's ``-2``,
    the embedding output: layer 1). See :attr:`ModelNeeds.attention`.

    Raises:
        ValueError: If that layer does not exist (the embedding output was produced by no layer; the last layer
            has no next one), naming ``mm_vision_select_layer`` and what to choose instead.
    """
    position = select_layer % (num_layers + 1)  # 0 = the embedding output, L = the last layer's output
    layer = position + offset
    if 1 <= layer <= num_layers:
        return layer
    who = f"mm_projector_type {projector_type!r}" if projector_type else "the projector"
    if offset > 0:
        raise ValueError(
            f"{who} reads the attention of the encoder layer {offset} after mm_vision_select_layer {select_layer}, "
            f"which the {num_layers}-layer vision tower does not have; select an earlier layer "
            f"(at most {num_layers - offset} or {-(offset + 1)}), e.g. LLaVA's -2"
        )
    raise ValueError(
        f"{who} reads the attention of the encoder layer that produced mm_vision_select_layer {select_layer}, but "
        f"that is the embedding output, which no layer produced; select an encoder layer (1..{num_layers} or "
        f"-1..-{num_layers})"
    )


def check_needs(tower: Any, config: Any, needs: ModelNeeds) -> None:
    """Refuse, with one sentence, a tower that cannot give what ``needs`` asks for (checked when the model is built).

    Raises:
        ValueError: For a non-square grid where ``needs.square_grid``, or an attention layer the tower lacks.
    """
    if needs.square_grid:
        check_square_grid(tower, config)
    if needs.attention is not None:
        attention_layer_for(
            int(getattr(config, "mm_vision_select_layer", -2)), int(tower.config.num_hidden_layers), needs.attention,
            getattr(config, "mm_projector_type", None),
        )


def grid_shape(tower: Any) -> tuple[int, int]:
    """``(H, W)`` patch grid of the tower: ``tower.grid_shape`` where the tower has it, else a square grid."""
    shape = getattr(tower, "grid_shape", None)
    if shape is not None:
        return int(shape[0]), int(shape[1])
    side = int(tower.num_patches_per_side)
    return side, side


def check_square_grid(tower: Any, config: Any) -> None:
    """Raise ``ValueError`` if the projector needs a square patch grid and the tower's is not."""
    rows, cols = grid_shape(tower)
    if rows != cols:
        raise ValueError(
            f"mm_projector_type {getattr(config, 'mm_projector_type', None)!r} needs a square patch grid, but the "
            f"vision tower gives {rows}x{cols}; use a tower with square inputs"
        )


def encode_images(
    tower: Any,
    projector: nn.Module,
    images: torch.Tensor,
    config: Any,
    *,
    text: TextPerImage | None = None,
    run_language_model: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor | list[torch.Tensor]:
    """Vision tower, then projector, called the way the projector's plugin declared (see the module docstring).

    Args:
        tower: The vision tower.
        projector: The model's ``mm_projector`` (built by ``build_vision_projector``, which kept its needs on it).
        images: ``[N, 3, H, W]`` pixels.
        config: The model config (``mm_projector_type``, ``mm_vision_select_layer``).
        text: Each image's text (the question or the prompt, as the plugin asked), for a plugin that reads text;
            ``None`` when the images come without one.
        run_language_model: ``[B, L, hidden]`` embeddings → the LLM's last hidden states, for such plugins.

    Returns:
        ``[N, K, hidden_size]``, or a list of N ``[K_i, hidden_size]`` for a projector whose count depends on the
        image.
    """
    needs = projector_needs(projector)
    if needs.square_grid:
        check_square_grid(tower, config)
    if not needs.extra:
        return projector(to_projector(tower(images), projector))
    inputs = compressor_inputs(tower, projector, images, needs, config, text, run_language_model)
    return projector(inputs.features, inputs)


def compressor_inputs(
    tower: Any,
    projector: nn.Module,
    images: torch.Tensor,
    needs: ModelNeeds,
    config: Any,
    text: TextPerImage | None,
    run_language_model: Callable[[torch.Tensor], torch.Tensor] | None,
) -> CompressorInputs:
    """Ask the tower for what ``needs`` lists and package it, cast once to the projector's dtype/device.

    Raises:
        ValueError: If the tower cannot give other layers or attention, or ``text`` does not hold one entry
            per image.
    """
    inputs = CompressorInputs(
        features=images, grid_shape=grid_shape(tower), has_cls_token=bool(getattr(tower, "has_cls_token", True))
    )
    if needs.tower_layers or needs.attention is not None:
        if not callable(getattr(tower, "encode", None)):
            raise ValueError(
                f"mm_projector_type {config.mm_projector_type!r} needs the vision tower's other layers or "
                f"attention, which {type(tower).__name__} does not provide (it has no encode method)"
            )
        attention_layer = None
        if needs.attention is not None:
            attention_layer = attention_layer_for(
                int(getattr(config, "mm_vision_select_layer", -2)), int(tower.config.num_hidden_layers),
                needs.attention, getattr(config, "mm_projector_type", None),
            )
        out = tower.encode(images, layers=tuple(needs.tower_layers), attention_layer=attention_layer)
        inputs.features = to_projector(out.features, projector)
        inputs.layers = {index: to_projector(value, projector) for index, value in (out.layers or {}).items()}
        inputs.attention = None if out.attention is None else to_projector(out.attention, projector)
        inputs.keys = None if out.keys is None else to_projector(out.keys, projector)
        queries = getattr(out, "queries", None)
        inputs.queries = None if queries is None else to_projector(queries, projector)
        cls_token = getattr(out, "cls_token", None)
        inputs.cls_token = None if cls_token is None else to_projector(cls_token, projector)
    else:  # only text: the tower call of upstream
        inputs.features = to_projector(tower(images), projector)
    if needs.text is not None:
        if text is not None:
            embeds, ids = text
            if len(embeds) != images.shape[0]:
                raise ValueError(
                    f"a text-conditioned projector needs one view per image: got {images.shape[0]} views for "
                    f"{len(embeds)} texts; use image_aspect_ratio 'pad' or 'square'"
                )
            inputs.prompt, inputs.prompt_ids = list(embeds), list(ids)
            if needs.text_encoder == "tower":  # float32 in the shared space; only the device follows the projector
                inputs.paired_features = tower.image_text_features(inputs.features).to(device=inputs.features.device)
        inputs.run_language_model = run_language_model
    return inputs


def encode_views(
    images: torch.Tensor | Sequence[torch.Tensor], encode: Callable[[torch.Tensor], torch.Tensor | list[torch.Tensor]]
) -> list[torch.Tensor | list[torch.Tensor]]:
    """Encode images of one or more views each, batching them into one ``encode`` call when their shapes agree.

    Args:
        images: ``[N, V, 3, H, W]``, or a list of ``[3, H, W]`` / ``[V, 3, H, W]`` tensors.
        encode: ``[M, 3, H, W]`` → ``[M, K, D]`` or M ``[K_m, D]`` (the model's ``encode_images``).

    Returns:
        Per image ``[V, K, D]``, or a list of V ``[K_v, D]`` when the views' counts differ (see :func:`stack_views`).

    Raises:
        ValueError: If ``images`` or one image has another shape.
    """
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
        return split_views(encode(torch.cat(views)), [image.shape[0] for image in views])
    return [stack_views(encode(image)) for image in views]


def stack_views(encoded: torch.Tensor | list[torch.Tensor]) -> torch.Tensor | list[torch.Tensor]:
    """One image's views as ``[V, K, D]``; views of different K (a data-dependent compressor) stay a list."""
    if isinstance(encoded, torch.Tensor):
        return encoded
    if len({tuple(view.shape) for view in encoded}) == 1:
        return torch.stack(list(encoded))
    return list(encoded)


def split_views(encoded: torch.Tensor | list[torch.Tensor], counts: Sequence[int]) -> list:
    """``encode_images`` output for all views → per image ``[V, K, D]`` (see :func:`stack_views`)."""
    if isinstance(encoded, torch.Tensor):
        return list(encoded.split(list(counts)))
    bounds = [0]
    for count in counts:
        bounds.append(bounds[-1] + count)
    return [stack_views(encoded[start:end]) for start, end in zip(bounds[:-1], bounds[1:])]


__all__ = [
    "TextPerImage", "attention_layer_for", "check_needs", "check_square_grid", "compressor_inputs", "encode_images",
    "encode_views", "grid_shape", "split_views", "stack_views", "to_projector",
]
