"""``mm_patch_merge_type``: one image's projected views → the visual tokens that go into the LLM input.

``flat`` concatenates the views; ``spatial`` and ``spatial_unpad`` (LLaVA-NeXT's AnyRes) stitch the crops of a
grid-keeping projector into one map, and ``spatial_unpad`` also crops the letterbox padding (:func:`unpad_image`),
shrinks the map for ``anyres_max_<N>`` and ends every row with the learned ``image_newline``. The token counts
are the rules of :func:`llava.visual_tokens.visual_token_count`, which every spatial merge is checked against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from llava.mm_utils import anyres_max_views, get_anyres_image_grid_shape, is_anyres
from llava.visual_tokens import PATCH_MERGE_TYPES, anyres_max_shape, anyres_view_count, visual_token_count


@dataclass(frozen=True)
class MergeLayout:
    """What a spatial merge needs from the model besides the features.

    Attributes:
        newline: The base model's ``image_newline`` ``[hidden]``, or ``None`` if it has none.
        grid: The tower's ``(rows, cols)`` patch grid per view.
        tower_side: The tower's input side in pixels (``tower.image_size``).
        aspect: ``config.image_aspect_ratio`` (``anyres``, ``anyres_max_<N>``, ``pad``, ...).
        pinpoints: ``config.image_grid_pinpoints`` (the AnyRes canvases).
    """

    newline: torch.Tensor | None
    grid: tuple[int, int]
    tower_side: int
    aspect: str | None
    pinpoints: Any


def uses_unpad(config: Any) -> bool:
    """Whether ``config.mm_patch_merge_type`` asks for unpadding, and so for an ``image_newline``."""
    return "unpad" in (getattr(config, "mm_patch_merge_type", None) or "")


def new_image_newline(hidden_size: int) -> nn.Parameter:
    """A fresh ``image_newline`` ``[hidden_size]`` ~ N(0, 1/hidden_size)."""
    return nn.Parameter(torch.randn(hidden_size) * hidden_size**-0.5)


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


def merge_views(
    encoded: Sequence[torch.Tensor | list[torch.Tensor]],
    image_sizes: Sequence[Sequence[int]] | None,
    merge: str,
    layout: MergeLayout | None,
) -> list[torch.Tensor]:
    """Merge each image's views per ``merge`` (``config.mm_patch_merge_type``).

    Args:
        encoded: Per image ``[V, K, D]``, or a list of V ``[K_v, D]`` for a projector whose count depends on the
            image (see :func:`llava.model.image_encoding.split_views`).
        image_sizes: ``(width, height)`` per image; needed for the spatial merges.
        merge: ``flat``, ``spatial`` or ``spatial_unpad``.
        layout: The model's geometry; only read by the spatial merges (``None`` is fine for ``flat``).

    Returns:
        N tensors ``[K_i, D]``.

    Raises:
        ValueError: For an unknown ``merge``, a spatial merge of views with different counts, or
            ``image_sizes`` that do not give one size per image.
    """
    if merge not in PATCH_MERGE_TYPES:
        raise ValueError(f"unknown mm_patch_merge_type {merge!r}; expected one of {', '.join(PATCH_MERGE_TYPES)}")
    if merge == "flat":
        return [
            feature.flatten(0, 1) if isinstance(feature, torch.Tensor) else torch.cat(feature) for feature in encoded
        ]
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
    return [spatial_merge(feature, size, merge, layout) for feature, size in zip(encoded, image_sizes)]


def spatial_merge(feature: torch.Tensor, image_size: Sequence[int], merge: str, layout: MergeLayout) -> torch.Tensor:
    """Assemble one image's ``[V, K, D]`` views (base view first) into ``[tokens, D]`` per ``merge``.

    A projector that keeps the patch grid (K = gh·gw) gets upstream's stitching (and, for ``spatial_unpad``,
    unpadding, ``anyres_max_<N>`` shrinking and a newline per row); compressed views are kept whole, in view
    order, with one newline after each view under ``spatial_unpad``. The rules and counts are those of
    :func:`llava.visual_tokens.visual_token_count`, which the result is checked against.
    """
    unpad = merge == "spatial_unpad"
    newline = layout.newline if unpad else None
    if unpad and newline is None:
        raise RuntimeError(f"mm_patch_merge_type {merge!r} needs model.image_newline, which this model lacks")
    grid, aspect = layout.grid, layout.aspect
    views, per_view = feature.shape[0], feature.shape[1]
    if views > 1 and not is_anyres(aspect):
        raise ValueError(
            f"mm_patch_merge_type {merge!r} with several views per image needs image_aspect_ratio 'anyres' or "
            f"'anyres_max_<N>', got {aspect!r}"
        )
    pinpoints = layout.pinpoints if views > 1 else None
    expected_views = anyres_view_count(image_size, pinpoints, layout.tower_side, aspect if views > 1 else None)
    if views != expected_views:
        raise ValueError(
            f"an image of size {tuple(image_size)} gives {expected_views} anyres views with image_grid_pinpoints "
            f"{pinpoints!r}, but {views} were given"
        )
    if views == 1 or per_view != grid[0] * grid[1]:
        merged = merge_compressed(feature, newline)
    else:
        merged = merge_grid(feature, image_size, layout, newline)
    expected = visual_token_count(
        image_size, pinpoints, layout.tower_side, grid, per_view, merge,
        image_aspect_ratio=aspect if views > 1 else None,
    )
    if merged.shape[0] != expected:
        raise RuntimeError(f"the {merge} merge gave {merged.shape[0]} visual tokens, but the rule says {expected}")
    return merged


def merge_compressed(feature: torch.Tensor, newline: torch.Tensor | None) -> torch.Tensor:
    """``[V, K, D]`` → ``[V·K, D]`` in view order, or ``[V·(K + 1), D]`` with ``newline`` after each view."""
    if newline is not None:
        ends = newline.to(feature)[None, None].expand(feature.shape[0], 1, -1)
        feature = torch.cat([feature, ends], dim=1)
    return feature.flatten(0, 1)


def merge_grid(
    feature: torch.Tensor, image_size: Sequence[int], layout: MergeLayout, newline: torch.Tensor | None
) -> torch.Tensor:
    """Upstream's stitching of grid-keeping views: base view, then the crops as one map (see :func:`spatial_merge`).

    Args:
        feature: ``[1 + rows·cols, gh·gw, D]``, the base view first, then the crops row by row.
        image_size: ``(width, height)`` of the original image.
        layout: The model's geometry.
        newline: ``[D]`` to end every row of the unpadded map with (``spatial_unpad``), or ``None`` (``spatial``).

    Returns:
        ``[gh·gw + tokens of the map, D]``.
    """
    grid_rows, grid_cols = layout.grid
    cols, rows = get_anyres_image_grid_shape(image_size, layout.pinpoints, layout.tower_side)
    base, tiles = feature[0], feature[1:]
    tiles = tiles.view(rows, cols, grid_rows, grid_cols, -1)
    if newline is None:
        return torch.cat([base, tiles.permute(0, 2, 1, 3, 4).flatten(0, 3)], dim=0)
    stitched = tiles.permute(4, 0, 2, 1, 3).flatten(1, 2).flatten(2, 3)  # [D, rows*gh, cols*gw]
    stitched = unpad_image(stitched, image_size)
    max_views = anyres_max_views(layout.aspect)
    if max_views is not None:
        height, width = anyres_max_shape(stitched.shape[1], stitched.shape[2], max_views, layout.grid)
        if (height, width) != tuple(stitched.shape[1:]):
            stitched = nn.functional.interpolate(stitched[None], size=(height, width), mode="bilinear")[0]
    row_ends = newline[:, None, None].expand(*stitched.shape[:-1], 1).to(stitched)
    stitched = torch.cat([stitched, row_ends], dim=-1)
    return torch.cat([base, stitched.flatten(1, 2).transpose(0, 1)], dim=0)


__all__ = [
    "MergeLayout", "merge_compressed", "merge_grid", "merge_views", "new_image_newline", "spatial_merge", "unpad_image",
    "uses_unpad",
]
