"""Prefill FLOPs of a video: T sampled frames, each through the tower and the projector, then one LLM prefill.

A LLaVA-NeXT / OneVision video is T frames of one view each (no AnyRes). The model (:mod:`llava.model.video`)
encodes every frame in one tower → projector call, so a compressor gives its K tokens per frame; a projector that
keeps the patch grid is followed by NeXT's 2-D pool (``mm_spatial_pool_mode`` / ``_stride``, default ``bilinear``
stride 2: 24 x 24 → 12 x 12 = 144 for CLIP-L/336, 27 x 27 → 14 x 14 = 196 for SigLIP-384); newlines go in only
under a ``spatial*`` merge (``mm_newline_position``). The LLM then runs once over the video's tokens plus the
prompt. So, per video:

- tower, compressor and projector: T times their one-frame count (the projector runs on every patch token
  of a frame before the pool);
- LLM: one prefill over :func:`llava.model.video.video_token_count` tokens + the prompt;
- the 2-D pool and the newline insertion are not counted (no matrix product; see :data:`.flops.CONVENTION`).

The token count is the model's own function, so this module cannot drift from what the model feeds the LLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from llava.model.patch_merge import uses_unpad
from llava.model.video import VideoLayout, video_layout, video_token_count

from .presets import InputSpec, PipelineSpec

__all__ = ["Video", "check_frames", "frame_inputs", "video_setting"]


def check_frames(frames: Any) -> int:
    """``frames`` as a frame count: an integer >= 1.

    Raises:
        ValueError: One sentence naming the bad value.
    """
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise ValueError(f"a video needs a whole number of frames >= 1, got {frames!r}")
    return frames


@dataclass(frozen=True)
class Video:
    """``frames`` frames laid out as the model lays them out (``layout``, from the checkpoint's config keys)."""

    frames: int
    layout: VideoLayout

    def __post_init__(self) -> None:
        check_frames(self.frames)

    def tokens(self, per_frame: int) -> int:
        """Visual tokens the LLM gets for ``per_frame`` projector tokens per frame (pool and newlines applied)."""
        return video_token_count(self.frames, per_frame, self.layout)

    def describe(self) -> str:
        """One line for a table header: what a row covers."""
        layout = self.layout
        pool = f"{layout.pool_mode} pool, stride {layout.pool_stride}" if layout.pool_stride > 1 else "no pool"
        newline = f"newline {layout.newline_position}" if layout.adds_newlines else "no newline tokens"
        return (f"per video of {self.frames} frames: tower, compressor and projector x {self.frames}; grid-keeping "
                f"projector: NeXT's {pool} per frame; {newline} ({layout.merge} merge)")


def video_setting(frames: int, grid: tuple[int, int], config: Any = None) -> Video:
    """The :class:`Video` of ``frames`` frames on a tower of ``grid`` patches, for a model of ``config``.

    Args:
        frames: T, the sampled frames.
        grid: ``(rows, cols)`` of the tower per frame.
        config: The checkpoint's config values (attributes ``mm_spatial_pool_mode``, ``mm_spatial_pool_stride``,
            ``mm_newline_position``, ``mm_patch_merge_type``), or ``None`` for NeXT's model-side defaults and a
            ``flat`` merge.

    Raises:
        ValueError: For a bad frame count, or the config key values the model itself refuses.
    """
    config = SimpleNamespace() if config is None else config
    # Counting needs only whether the model has an image_newline (it has one under *unpad merges), not its value.
    newline = torch.zeros(1) if uses_unpad(config) else None
    return Video(check_frames(frames), video_layout(config, grid, newline))


def frame_inputs(spec: PipelineSpec, label: str | None = None) -> tuple[InputSpec, ...]:
    """The inputs a video frame of ``spec`` can be: one view at each of its inputs' image sizes (frames get no
    AnyRes), labelled by their patch count; only the one labelled ``label`` when given.

    Raises:
        ValueError: When no frame input has the token count ``label``.
    """
    frames: dict[str, InputSpec] = {}
    for inp in spec.inputs:
        rows, cols = spec.grid(inp)
        frames.setdefault(str(rows * cols), InputSpec(str(rows * cols), inp.image_size))
    if label is None:
        return tuple(frames.values())
    if str(label) not in frames:
        raise ValueError(
            f"{spec.name} has no {label}-token frame (video frames are one view each, without AnyRes); "
            f"expected --input-tokens {' or '.join(frames)}"
        )
    return (frames[str(label)],)
