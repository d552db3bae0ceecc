"""Videos in the LLM input, LLaVA-NeXT's way: per-frame features → 2-D pool → newlines → one token sequence.

A video is one item of ``images`` (``[F, 3, H, W]``, its frames) tagged ``"video"`` in ``modalities``. Its frames go
through the same tower → projector call as images (:func:`llava.model.image_encoding.encode_views`), so a
compressor gives its K tokens per frame. Then, as LLaVA-NeXT's ``prepare_inputs_labels_for_multimodal`` does:

1. **2-D pool** (:func:`pool_frames`, config ``mm_spatial_pool_mode`` / ``mm_spatial_pool_stride``): each frame's
   ``gh × gw`` grid is pooled with stride s: ``bilinear`` resizes to ``⌈gh/s⌉ × ⌈gw/s⌉`` (SigLIP-384: 27² → 14² =
   196), ``average`` / ``max`` pool with kernel s (27² → 13² = 169). Only a projector that keeps the grid
   (K = gh·gw) is pooled: compressed tokens are not a grid, and the compressor already set the per-frame budget,
   so they are **not pooled** (docs/VIDEO.md).
2. **Newlines** (:func:`video_tokens`, config ``mm_newline_position``), only when ``mm_patch_merge_type`` is
   ``spatial*`` (NeXT flattens ``flat`` videos with no newline): ``grid`` puts ``image_newline`` after every row
   of every (pooled) frame, ``frame`` after every frame, ``one_token`` once after the video (``*unpad`` merges
   only), ``no_token`` nowhere. For compressed frames ``grid`` has no rows and becomes one newline per frame.
3. The frames' tokens are concatenated in frame order.

Defaults for keys a config lacks are NeXT's model-side ones: ``bilinear``, stride 2, ``one_token``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

#: The ``modalities`` tags (LLaVA-NeXT's): ``text`` marks the stand-in image of a text-only training sample.
MODALITIES = ("image", "video", "text")
POOL_MODES = ("bilinear", "average", "max")
NEWLINE_POSITIONS = ("grid", "frame", "one_token", "no_token")

DEFAULT_POOL_MODE = "bilinear"
DEFAULT_POOL_STRIDE = 2
DEFAULT_NEWLINE_POSITION = "one_token"


@dataclass(frozen=True)
class VideoLayout:
    """How a video's frame features become its tokens (the config keys, checked).

    Attributes:
        pool_mode: ``mm_spatial_pool_mode``.
        pool_stride: ``mm_spatial_pool_stride`` (1 or less: no pooling).
        newline_position: ``mm_newline_position``.
        merge: ``mm_patch_merge_type``.
        grid: The tower's ``(rows, cols)`` patch grid per frame.
        newline: The model's ``image_newline`` ``[hidden]``, or ``None``.
    """

    pool_mode: str
    pool_stride: int
    newline_position: str
    merge: str
    grid: tuple[int, int]
    newline: torch.Tensor | None

    @property
    def adds_newlines(self) -> bool:
        """Whether any newline goes into the video's tokens (NeXT adds them under ``spatial*`` merges only)."""
        if not self.merge.startswith("spatial") or self.newline_position == "no_token":
            return False
        return self.newline_position != "one_token" or "unpad" in self.merge


def check_video_keys(config: Any) -> tuple[str, int, str]:
    """``(pool mode, pool stride, newline position)`` of ``config``, checked (NeXT's defaults for absent keys);
    the loader calls it when a model loads, so a bad value is named before the first video.

    Raises:
        ValueError: For an unknown pool mode or newline position, or a stride that is not an integer.
    """
    mode = getattr(config, "mm_spatial_pool_mode", None) or DEFAULT_POOL_MODE
    if mode not in POOL_MODES:
        raise ValueError(f"unknown mm_spatial_pool_mode {mode!r}; expected one of {', '.join(POOL_MODES)}")
    stride = getattr(config, "mm_spatial_pool_stride", None)
    stride = DEFAULT_POOL_STRIDE if stride is None else stride
    if isinstance(stride, bool) or not isinstance(stride, int):
        raise ValueError(f"mm_spatial_pool_stride must be an integer (NeXT uses 2), got {stride!r}")
    position = getattr(config, "mm_newline_position", None) or DEFAULT_NEWLINE_POSITION
    if position not in NEWLINE_POSITIONS:
        raise ValueError(f"unknown mm_newline_position {position!r}; expected one of {', '.join(NEWLINE_POSITIONS)}")
    return mode, stride, position


def video_layout(config: Any, grid: tuple[int, int], newline: torch.Tensor | None) -> VideoLayout:
    """Read and check the video keys of ``config`` (:func:`check_video_keys`).

    Raises:
        ValueError: For a key :func:`check_video_keys` refuses, or a newline position that needs
            ``image_newline`` on a model without one.
    """
    mode, stride, position = check_video_keys(config)
    merge = getattr(config, "mm_patch_merge_type", None) or "flat"
    layout = VideoLayout(mode, stride, position, merge, (int(grid[0]), int(grid[1])), newline)
    if layout.adds_newlines and newline is None:
        raise ValueError(
            f"mm_newline_position {position!r} with mm_patch_merge_type {merge!r} puts image_newline into videos, "
            "but this model has none (only '*unpad' merges create it); use mm_newline_position 'no_token' or "
            "mm_patch_merge_type 'spatial_unpad'"
        )
    return layout


def keeps_grid(frames: torch.Tensor | Sequence[torch.Tensor], grid: tuple[int, int]) -> bool:
    """Whether the projector returned one token per patch (``[F, gh·gw, D]``), i.e. the frames are grids."""
    return isinstance(frames, torch.Tensor) and frames.shape[1] == grid[0] * grid[1]


def pooled_grid(grid: tuple[int, int], mode: str, stride: int) -> tuple[int, int]:
    """The per-frame grid after :func:`pool_frames`: ``⌈g/s⌉`` for ``bilinear``, ``⌊g/s⌋`` for the pools."""
    if stride <= 1:
        return grid
    if mode == "bilinear":
        return math.ceil(grid[0] / stride), math.ceil(grid[1] / stride)
    return grid[0] // stride, grid[1] // stride


def pool_frames(frames: torch.Tensor, grid: tuple[int, int], mode: str, stride: int) -> torch.Tensor:
    """NeXT's 2-D pool of each frame's token grid.

    Args:
        frames: ``[F, gh·gw, D]`` projected frame tokens, row-major over the grid.
        grid: ``(gh, gw)``.
        mode: ``bilinear`` (resize to :func:`pooled_grid`, ``align_corners=False``), ``average`` or ``max``
            (kernel = stride = ``stride``).
        stride: Pool stride; 1 or less returns ``frames`` unchanged.

    Returns:
        ``[F, gh'·gw', D]`` with ``(gh', gw') = pooled_grid(grid, mode, stride)``.
    """
    if stride <= 1:
        return frames
    count, _, dim = frames.shape
    maps = frames.view(count, grid[0], grid[1], dim).permute(0, 3, 1, 2)
    if mode == "average":
        maps = F.avg_pool2d(maps, stride)
    elif mode == "max":
        maps = F.max_pool2d(maps, stride)
    else:
        maps = F.interpolate(maps, size=pooled_grid(grid, mode, stride), mode="bilinear")
    return maps.permute(0, 2, 3, 1).reshape(count, -1, dim)


def video_tokens(frames: torch.Tensor | Sequence[torch.Tensor], layout: VideoLayout) -> torch.Tensor:
    """One video's visual tokens: pool (grid-keeping projectors), newlines, frames in order.

    Args:
        frames: ``[F, K, D]`` projected frame tokens, or F ``[K_f, D]`` for a projector whose count depends on the
            frame.
        layout: From :func:`video_layout`.

    Returns:
        ``[tokens, D]``; the count is :func:`video_token_count`'s.
    """
    grid_kept = keeps_grid(frames, layout.grid)
    if grid_kept:
        frames = pool_frames(frames, layout.grid, layout.pool_mode, layout.pool_stride)
    per_frame = list(frames)
    newline = layout.newline
    if not layout.adds_newlines or newline is None:
        return torch.cat(per_frame)
    newline = newline.to(per_frame[0])[None]
    if layout.newline_position == "one_token":
        return torch.cat([*per_frame, newline])
    if layout.newline_position == "grid" and grid_kept:
        rows, cols = pooled_grid(layout.grid, layout.pool_mode, layout.pool_stride)
        stacked = torch.stack(per_frame).view(len(per_frame), rows, cols, -1)
        ends = newline.view(1, 1, 1, -1).expand(len(per_frame), rows, 1, -1)
        return torch.cat([stacked, ends], dim=2).reshape(-1, stacked.shape[-1])
    return torch.cat([piece for frame in per_frame for piece in (frame, newline)])


def video_token_count(frames: int, per_frame: int, layout: VideoLayout) -> int:
    """Tokens :func:`video_tokens` gives for ``frames`` frames of ``per_frame`` projector tokens each."""
    grid_kept = per_frame == layout.grid[0] * layout.grid[1]
    rows, cols = pooled_grid(layout.grid, layout.pool_mode, layout.pool_stride) if grid_kept else (1, per_frame)
    tokens = frames * rows * cols
    if not layout.adds_newlines:
        return tokens
    if layout.newline_position == "one_token":
        return tokens + 1
    if layout.newline_position == "grid" and grid_kept:
        return tokens + frames * rows
    return tokens + frames


def check_modalities(modalities: Sequence[str] | str | None) -> list[str]:
    """``modalities`` as a list (a single string is one entry; ``None`` is empty), each value checked.

    Raises:
        ValueError: For a value other than ``image``, ``video`` or ``text``.
    """
    if modalities is None:
        return []
    if isinstance(modalities, str):
        modalities = [modalities]
    items = list(modalities)
    for value in items:
        if value not in MODALITIES:
            raise ValueError(f"unknown modality {value!r} in modalities; expected one of {', '.join(MODALITIES)}")
    return items


def video_positions(modalities: Sequence[str], num_items: int) -> list[int]:
    """Positions of the ``images`` items that are videos (``modalities`` indexes the items, as in LLaVA-NeXT).

    Entries past the last item are ignored (NeXT's default ``["image"]`` goes with any number of images).
    """
    return [index for index, value in enumerate(modalities[:num_items]) if value == "video"]


def next_argument_order(
    image_sizes: Any, rest: Sequence[Any], modalities: Sequence[str] | str | None
) -> tuple[Any, Sequence[str] | str | None]:
    """``(image_sizes, modalities)`` from upstream's order ``(..., images, image_sizes)`` or LLaVA-NeXT's
    ``(..., images, modalities, image_sizes)``: only NeXT's order puts strings in the seventh place."""
    names_modalities = isinstance(image_sizes, str) or (
        isinstance(image_sizes, (list, tuple)) and bool(image_sizes) and all(isinstance(value, str) for value in image_sizes)
    )
    if len(rest) > 1 or (rest and not names_modalities):
        raise TypeError(
            "prepare_inputs_labels_for_multimodal takes (input_ids, position_ids, attention_mask, past_key_values, "
            "labels, images, image_sizes) or LLaVA-NeXT's (..., images, modalities, image_sizes)"
        )
    if not names_modalities:
        return image_sizes, modalities
    if modalities is not None:
        raise TypeError("modalities was given both by position and by keyword")
    return (rest[0] if rest else None), image_sizes


def prompts_per_frame(prompts: tuple[list[Any], list[Any]], images: Any, modalities: Any) -> tuple[list[Any], list[Any]]:
    """Each image's prompt repeated for every frame of a video item, so that a prompt-conditioned compressor sees
    its video's prompt with each frame (the frames go through the encoder as views of one batch)."""
    count = images.shape[0] if isinstance(images, torch.Tensor) else len(images)
    videos = set(video_positions(check_modalities(modalities), count))
    if not videos:
        return prompts
    embeds, ids = prompts
    repeats = [int(images[index].shape[0]) if index in videos else 1 for index in range(len(embeds))]
    return (
        [embed for embed, times in zip(embeds, repeats) for _ in range(times)],
        [row for row, times in zip(ids, repeats) for _ in range(times)],
    )

def features_with_videos(
    images: Any,
    image_sizes: Sequence[Sequence[int]] | None,
    videos: set[int],
    encode: Callable[[torch.Tensor], Any],
    merge_images: Callable[[list[Any], Any], list[torch.Tensor]],
    layout: VideoLayout,
) -> list[torch.Tensor]:
    """Visual tokens per item when some items are videos: every frame and view in one ``encode`` call, images
    merged as without videos (``merge_images(encoded, sizes)``), videos through :func:`video_tokens`.

    Args:
        images: ``[N, 3, H, W]`` (N single views, never merged, as without videos), ``[N, V, 3, H, W]`` or a list of
            ``[3, H, W]`` / ``[V, 3, H, W]`` items; a video item is ``[F, 3, H, W]``.
        image_sizes: One ``(width, height)`` per item (the videos' entries are not read), or per image.
        videos: Positions of the video items.
        encode: ``[M, 3, H, W]`` → ``[M, K, D]`` (the model's ``encode_images``).
        merge_images: The model's view merge for the image items.
        layout: From :func:`video_layout`.

    Returns:
        One ``[K_i, D]`` per item, in item order.
    """
    from .image_encoding import encode_views

    single_views = isinstance(images, torch.Tensor) and images.ndim == 4
    items = list(images)
    encoded = encode_views(items, encode)
    features: list[Any] = [None] * len(items)
    others = [index for index in range(len(items)) if index not in videos]
    if others and single_views:
        for index in others:
            features[index] = encoded[index][0]
    elif others:
        sizes = image_sizes
        if image_sizes is not None and len(image_sizes) == len(items):
            sizes = [image_sizes[index] for index in others]
        for index, feature in zip(others, merge_images([encoded[index] for index in others], sizes)):
            features[index] = feature
    for index in sorted(videos):
        features[index] = video_tokens(encoded[index], layout)
    return features


__all__ = [
    "DEFAULT_NEWLINE_POSITION", "DEFAULT_POOL_MODE", "DEFAULT_POOL_STRIDE", "MODALITIES", "NEWLINE_POSITIONS",
    "POOL_MODES", "VideoLayout", "check_modalities", "features_with_videos", "next_argument_order", "prompts_per_frame", "keeps_grid",
    "check_video_keys", "pool_frames", "pooled_grid", "video_layout",
    "video_positions", "video_token_count", "video_tokens",
]
