"""LLaVA-NeXT's video data settings for training: where video samples live, how their frames are sampled, and the
time sentence ``--add_time_instruction`` puts before the question."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llava.constants import DEFAULT_IMAGE_TOKEN
from llava.video import SampledVideo

from .preprocess import Turn

__all__ = ["VideoSettings", "time_instruction", "with_time_instruction"]


@dataclass(frozen=True)
class VideoSettings:
    """Where video samples live and how their frames are sampled (LLaVA-NeXT's data flags, NeXT's defaults).

    Attributes:
        video_folder: Root of the records' ``video`` paths (``--video_folder``).
        frames_upbound: At most this many frames, evenly spread; 0: no cap (``--frames_upbound``).
        force_sample: Always take ``frames_upbound`` frames (``--force_sample``).
        video_fps: Frames per second kept before the cap (``--video_fps``).
        add_time_instruction: Tell the model the video's length and frame times (``--add_time_instruction``,
            :func:`with_time_instruction`).
    """

    video_folder: str | None = None
    frames_upbound: int = 0
    force_sample: bool = False
    video_fps: float = 1.0
    add_time_instruction: bool = False

    @classmethod
    def from_args(cls, data_args: Any) -> VideoSettings:
        """The settings from training's data arguments; flags a version of them lacks keep NeXT's defaults."""
        defaults = cls()
        names = ("video_folder", "frames_upbound", "force_sample", "video_fps", "add_time_instruction")
        values = {name: getattr(data_args, name, None) for name in names}
        return cls(**{name: getattr(defaults, name) if value is None else value for name, value in values.items()})


def time_instruction(video: SampledVideo) -> str:
    """LLaVA-NeXT's ``--add_time_instruction`` sentence for a sampled video, in NeXT's exact wording (the text its
    video models were trained on; frame times in seconds as ``0.00s,1.00s,...``, no space before "Please")."""
    times = ",".join(f"{seconds:.2f}s" for seconds in video.frame_times)
    return (
        f"The video lasts for {video.duration:.2f} seconds, and {len(video)} frames are uniformly sampled from it. "
        f"These frames are located at {times}.Please answer the following questions related to this video."
    )


def with_time_instruction(turns: Sequence[Turn], video: SampledVideo) -> list[Turn]:
    """The turns with the first one rewritten as NeXT does: ``<image>\n<time instruction>\n<its text without the
    marker>`` (before the marker normalisation of :func:`preprocess_multimodal`)."""
    (speaker, text), rest = turns[0], list(turns[1:])
    return [(speaker, f"{DEFAULT_IMAGE_TOKEN}\n{time_instruction(video)}\n{text.replace(DEFAULT_IMAGE_TOKEN, '')}"), *rest]
