"""How many visual tokens one image becomes in the LLM input: the one rule, for single views and AnyRes.

The model's merge (:func:`llava.model.patch_merge.spatial_merge`, run by
:meth:`llava.model.llava_arch.LlavaMetaForCausalLM.image_features`) checks its output against
:func:`visual_token_count`; cost tools and docs/BACKBONES.md use the same function.

Terms: a *view* is one tower-sized square (AnyRes: the whole image squashed, then the crops of the chosen canvas,
row-major); the tower gives a ``grid`` of gh × gw patch features per view; the projector turns them into K tokens
per view. A projector *keeps the grid* when K = gh · gw (``mlp2x_gelu``, ``linear``); a compressor gives its budget
K per view (a 16-token compressor on a 5-view image gives 80).

Merge rules (``mm_patch_merge_type``), V views per image:

* grid-keeping projectors, upstream LLaVA-1.6 / NeXT exactly:

  - ``flat``: V · gh·gw, views in order;
  - ``spatial``: the base view, then the crops stitched into one (rows·gh) × (cols·gw) map read row-major:
    again V · gh·gw tokens, in a different order;
  - ``spatial_unpad``: the base view, then the stitched map with the letterbox rows (or columns) removed and one
    ``image_newline`` after every remaining row: gh·gw + R · (C + 1). With ``anyres_max_<N>`` the unpadded map is
    first shrunk (bilinear) to about N views' worth when it holds more than 1.1² times that;
  - one view (no AnyRes): gh·gw, plus one newline under ``spatial_unpad``.

* compressors (K ≠ gh·gw): compressed tokens are not a spatial grid, so nothing can be stitched, unpadded or
  resized. Every view is compressed on its own to its K tokens (the budget is **per view**, as the paper's
  80 = 5 × 16 and 20 = 5 × 4), and the views keep upstream's order, base first, then crops row-major:

  - ``flat`` and ``spatial``: V · K;
  - ``spatial_unpad``: V · (K + 1), one ``image_newline`` after each view. The newline keeps its upstream role of
    marking where a 2-D unit ends (a row of the map there, a view here), so the LLM can tell the views apart, the
    trained ``image_newline`` of a ``spatial_unpad`` model keeps being used, and a single view gets K + 1 exactly as
    a grid-keeping single view gets gh·gw + 1. ``anyres_max_<N>`` does not shrink compressed views.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llava.mm_utils import anyres_max_views, get_anyres_image_grid_shape, is_anyres

PATCH_MERGE_TYPES = ("flat", "spatial", "spatial_unpad")

#: NeXT's anyres_max shrinks the unpadded map only when it is more than this factor (per side) too large.
ANYRES_MAX_SLACK = 1.1


def _grid_pair(grid: int | Sequence[int]) -> tuple[int, int]:
    rows, cols = (grid, grid) if isinstance(grid, int) else (int(grid[0]), int(grid[1]))
    if rows < 1 or cols < 1:
        raise ValueError(f"the tower's patch grid must be at least 1x1, got {grid!r}")
    return rows, cols


def unpadded_shape(height: int, width: int, image_size: Sequence[int]) -> tuple[int, int]:
    """``(rows, columns)`` of a stitched ``height`` × ``width`` feature map after the letterbox is cut away.

    The image of ``image_size`` = (W, H) was fitted into the canvas keeping its aspect ratio and centred, so the
    map keeps the centred rows (a wider image) or columns (a taller one) that the image covers.
    """
    image_width, image_height = int(image_size[0]), int(image_size[1])
    if image_width * height > image_height * width:  # wider than the map: padding above and below
        covered = int(image_height * (width / image_width))
        return height - 2 * ((height - covered) // 2), width
    covered = int(image_width * (height / image_height))
    return height, width - 2 * ((width - covered) // 2)


def anyres_max_shape(height: int, width: int, max_views: int, grid: tuple[int, int]) -> tuple[int, int]:
    """``anyres_max_<N>``: the ``(rows, columns)`` an unpadded map is shrunk to, or kept at, for N views of ``grid``."""
    scale = math.sqrt(height * width / (max_views * grid[0] * grid[1]))
    if scale > ANYRES_MAX_SLACK:
        return int(height // scale), int(width // scale)
    return height, width


def anyres_view_count(
    image_size: Sequence[int], grid_pinpoints: str | Sequence[Sequence[int]] | None, tower_side: int,
    image_aspect_ratio: str | None = "anyres",
) -> int:
    """Views one image becomes: 1 without AnyRes, else the base view plus the chosen canvas's crops."""
    if not is_anyres(image_aspect_ratio):
        return 1
    cols, rows = get_anyres_image_grid_shape(tuple(image_size), grid_pinpoints, tower_side)
    return 1 + cols * rows


def visual_token_count(
    image_size: Sequence[int],
    grid_pinpoints: str | Sequence[Sequence[int]] | None,
    tower_side: int,
    grid: int | Sequence[int],
    tokens_per_view: int | None = None,
    merge_type: str = "flat",
    *,
    image_aspect_ratio: str | None = "anyres",
) -> int:
    """Visual tokens one image of ``image_size`` puts into the LLM input (see the module docstring for the rules).

    Args:
        image_size: ``(width, height)`` of the original image.
        grid_pinpoints: AnyRes canvases (a list of ``[width, height]``, its string form or ``"(1x1),...,(3x3)"``);
            unused without AnyRes.
        tower_side: The tower's input side in pixels (336 for CLIP-L/336, 384 for SigLIP so400m-384).
        grid: The tower's patch grid per view, ``N`` or ``(rows, cols)`` (24, 27, 32).
        tokens_per_view: K per view of a compressor; ``None`` (or gh·gw) for a projector that keeps the grid.
        merge_type: ``flat``, ``spatial`` or ``spatial_unpad``.
        image_aspect_ratio: ``anyres`` / ``anyres_max_<N>`` for AnyRes; anything else means one view.

    Returns:
        The token count, e.g. 2880 for a 1024² image on CLIP-336 with the five LLaVA-1.6 canvases and
        ``mlp2x_gelu`` (``flat``), 80 with a 16-token compressor, 2928 with ``spatial_unpad``.

    Raises:
        ValueError: For an unknown ``merge_type``, a bad grid or budget, or bad pinpoints.
    """
    if merge_type not in PATCH_MERGE_TYPES:
        raise ValueError(f"unknown mm_patch_merge_type {merge_type!r}; expected one of {', '.join(PATCH_MERGE_TYPES)}")
    grid_rows, grid_cols = _grid_pair(grid)
    per_grid = grid_rows * grid_cols
    if tokens_per_view is not None and tokens_per_view < 1:
        raise ValueError(f"tokens per view must be at least 1, got {tokens_per_view}")
    per_view = per_grid if tokens_per_view is None else tokens_per_view
    views = anyres_view_count(image_size, grid_pinpoints, tower_side, image_aspect_ratio)
    unpad = merge_type == "spatial_unpad"
    if per_view != per_grid or views == 1:
        return views * (per_view + (1 if unpad else 0))
    if not unpad:
        return views * per_grid
    cols, rows = get_anyres_image_grid_shape(tuple(image_size), grid_pinpoints, tower_side)
    height, width = unpadded_shape(rows * grid_rows, cols * grid_cols, image_size)
    max_views = anyres_max_views(image_aspect_ratio)
    if max_views is not None:
        height, width = anyres_max_shape(height, width, max_views, (grid_rows, grid_cols))
    return per_grid + height * (width + 1)


__all__ = [
    "PATCH_MERGE_TYPES",
    "anyres_max_shape",
    "anyres_view_count",
    "unpadded_shape",
    "visual_token_count",
]
