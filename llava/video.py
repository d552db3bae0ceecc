"""Reading videos and sampling their frames, LLaVA-NeXT's way.

The frame rule is NeXT's (``process_video_with_decord`` in its ``llava/utils.py``), in
:func:`sample_frame_indices`: take one frame every ``round(fps / video_fps)`` frames (``video_fps`` frames per
second, 1 by default); when ``frames_upbound > 0`` and that gives more than ``frames_upbound`` frames, or
``force_sample`` is set, take ``frames_upbound`` frames evenly instead
(``numpy.linspace(0, total - 1, frames_upbound, dtype=int)``). One difference: for a clip slower than
``video_fps / 2`` frames per second NeXT's step rounds to 0 and its ``range`` fails; here the step is at least 1.

Decoding uses PyAV (the ``video`` extra: ``pip install -e ".[video]"``), imported only when a video is read. A
video becomes a :class:`SampledVideo`: ``[F, H, W, 3]`` uint8 RGB frames (the layout NeXT's decoders give),
the chosen indices and their times. In a model input it is one ``images`` item of ``[F, 3, side, side]`` pixels
tagged ``"video"`` (see :mod:`llava.model.video`).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from llava.utils import UserError

#: The setup.py extra that brings the decoder.
VIDEO_EXTRA = "video"
#: File suffixes treated as videos by the commands that take an image or a video.
VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpeg", ".mpg", ".gif")


class VideoUnreadable(ValueError):
    """A video that is missing, not decodable, or holds no frames (one sentence naming the file)."""


def import_av() -> Any:
    """The ``av`` module (PyAV).

    Raises:
        UserError: If PyAV is not installed, naming the extra that brings it.
    """
    try:
        import av
    except ImportError:
        raise UserError(
            f"reading videos needs PyAV, which is not installed; install the '{VIDEO_EXTRA}' extra with "
            f"pip install -e \".[{VIDEO_EXTRA}]\" (or pip install av)"
        ) from None
    return av


def is_video_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a video by its suffix (:data:`VIDEO_SUFFIXES`)."""
    return os.fspath(path).lower().endswith(VIDEO_SUFFIXES)


def refuse_video_as_image(path: str | os.PathLike[str]) -> None:
    """Stop a video given where an image is expected (``--image-file clip.mp4``), pointing at ``--video-file``.

    A ``.gif`` passes: PIL reads it as an image (its first frame), as upstream's ``--image-file`` does.

    Raises:
        UserError: If ``path`` names a video by its suffix (:data:`VIDEO_SUFFIXES`, ``.gif`` excepted).
    """
    if is_video_path(path) and not os.fspath(path).lower().endswith(".gif"):
        raise UserError(f"{os.fspath(path)!r} is a video file, not an image; pass it with --video-file instead")


def check_frame_flags(frames_upbound: int, force_sample: bool) -> None:
    """The one rule for ``--frames-upbound`` / ``--force-sample`` (every command that reads videos calls it first).

    Raises:
        UserError: For a negative ``frames_upbound``, or ``force_sample`` without a positive one.
    """
    if frames_upbound < 0:
        raise UserError(f"--frames-upbound must be >= 0 (0: one frame per second, no cap), got {frames_upbound}")
    if force_sample and frames_upbound == 0:
        raise UserError("--force-sample takes --frames-upbound evenly spread frames; give --frames-upbound N with N >= 1")


def sample_frame_indices(
    total: int, fps: float, *, video_fps: float = 1, frames_upbound: int = 0, force_sample: bool = False
) -> list[int]:
    """NeXT's frame choice (see the module docstring).

    Args:
        total: Frames in the video.
        fps: Its average frame rate.
        video_fps: Frames per second to keep (NeXT's ``--video_fps``, default 1).
        frames_upbound: At most this many frames, evenly spread (0: no cap; NeXT's ``--frames_upbound``).
        force_sample: Always take ``frames_upbound`` evenly spread frames (NeXT's ``--force_sample``).

    Returns:
        Increasing frame indices (repeats are possible when ``frames_upbound > total``, as with NeXT).

    Raises:
        ValueError: For ``total < 1``, a negative ``frames_upbound``, or ``video_fps <= 0``.
    """
    if total < 1:
        raise ValueError(f"a video needs at least one frame, got {total}")
    if frames_upbound < 0:
        raise ValueError(f"frames_upbound must be >= 0 (0: no cap), got {frames_upbound}")
    if not video_fps > 0:
        raise ValueError(f"video_fps must be > 0, got {video_fps}")
    step = max(round(fps / video_fps), 1)
    indices = list(range(0, total, step))
    if frames_upbound > 0 and (len(indices) > frames_upbound or force_sample):
        indices = np.linspace(0, total - 1, frames_upbound, dtype=int).tolist()
    return indices


@dataclass(frozen=True)
class SampledVideo:
    """A video's sampled frames.

    Attributes:
        frames: ``[F, H, W, 3]`` uint8 RGB.
        indices: The F frame indices taken.
        fps: The video's average frame rate.
        total_frames: Frames in the video.
        path: Where it was read from (``""`` for frames given directly).
    """

    frames: np.ndarray
    indices: list[int]
    fps: float
    total_frames: int
    path: str = ""

    @property
    def duration(self) -> float:
        """Seconds (NeXT's ``video_time`` = total frames / fps)."""
        return self.total_frames / self.fps if self.fps else 0.0

    @property
    def frame_times(self) -> list[float]:
        """Each sampled frame's time in seconds."""
        return [index / self.fps if self.fps else 0.0 for index in self.indices]

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` of the frames."""
        return int(self.frames.shape[2]), int(self.frames.shape[1])

    def __len__(self) -> int:
        return int(self.frames.shape[0])

    def images(self) -> list[Any]:
        """The frames as PIL images (for views and demos)."""
        from PIL import Image

        return [Image.fromarray(frame) for frame in self.frames]


def _name(source: str | bytes) -> str:
    return repr(source) if isinstance(source, str) else "the uploaded video"


def _reason(error: BaseException) -> str:
    """FFmpeg's own words for a decoding error, without the errno and the file name the sentence already gives
    (PyAV's ``str()`` is ``[Errno 1094995529] Invalid data found when processing input: 'clip.mp4'``)."""
    text = str(error)
    return getattr(error, "strerror", None) or (text.splitlines()[0] if text else type(error).__name__)


def _open(source: str | bytes) -> Any:
    """An open PyAV container for a file path or a video file's bytes."""
    av = import_av()
    if isinstance(source, str) and os.path.isdir(source):
        raise VideoUnreadable(f"video file {source!r} is a folder; pass the path of a video file")
    if isinstance(source, str) and not os.path.isfile(source):
        raise VideoUnreadable(f"video file {source!r} does not exist")
    try:
        container = av.open(source if isinstance(source, str) else io.BytesIO(source))
    except (av.FFmpegError, OSError, ValueError) as error:
        raise VideoUnreadable(
            f"cannot read {'video ' if isinstance(source, str) else ''}{_name(source)} ({_reason(error)})"
        ) from None
    if not container.streams.video:
        container.close()
        raise VideoUnreadable(f"{_name(source)} holds no video stream")
    return container


def _decode(path: str | bytes, keep: set[int] | None) -> tuple[dict[int, np.ndarray], int, float]:
    """Decode every frame of ``path``; keep the RGB arrays of the indices in ``keep`` (all when ``None``).

    Returns:
        ``({index: [H, W, 3] uint8}, frames decoded, average fps)``.
    """
    av = import_av()
    container = _open(path)
    kept: dict[int, np.ndarray] = {}
    count = 0
    try:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        rate = stream.average_rate or stream.guessed_rate
        fps = float(rate) if rate else 0.0
        for frame in container.decode(stream):
            if keep is None or count in keep:
                kept[count] = frame.to_ndarray(format="rgb24")
            count += 1
    except (av.FFmpegError, ValueError) as error:
        raise VideoUnreadable(f"cannot decode {_name(path)} after {count} frames ({_reason(error)})") from None
    finally:
        container.close()
    return kept, count, fps


def _declared_frames(path: str | bytes) -> tuple[int, float]:
    """``(frames the container declares (0 if unknown), average fps)`` without decoding."""
    container = _open(path)
    try:
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate
        return int(stream.frames or 0), float(rate) if rate else 0.0
    finally:
        container.close()


def load_video(
    path: str | os.PathLike[str] | bytes, *, frames_upbound: int = 0, force_sample: bool = False, video_fps: float = 1
) -> SampledVideo:
    """Read a video file (a path, or the file's bytes) and keep NeXT's sample of its frames
    (:func:`sample_frame_indices`).

    Only the chosen frames are converted to RGB. When the container does not declare its frame count (or declares
    a wrong one), the frames are counted by decoding first.

    Raises:
        UserError: If PyAV is not installed.
        VideoUnreadable: If the file is missing, not a video, not decodable, or has no frames.
    """
    path = path if isinstance(path, bytes) else os.fspath(path)
    declared, fps = _declared_frames(path)
    rule = {"video_fps": video_fps, "frames_upbound": frames_upbound, "force_sample": force_sample}
    if declared > 0:
        indices = sample_frame_indices(declared, fps or 1.0, **rule)
        kept, total, fps = _decode(path, set(indices))
        if total == declared:
            return _sampled(kept, indices, fps, total, path)
    else:
        _, total, fps = _decode(path, set())
    if total == 0:
        raise VideoUnreadable(f"{_name(path)} has no decodable frames")
    indices = sample_frame_indices(total, fps or 1.0, **rule)
    kept, total, fps = _decode(path, set(indices))
    return _sampled(kept, indices, fps, total, path)


def _sampled(kept: dict[int, np.ndarray], indices: list[int], fps: float, total: int, path: str | bytes) -> SampledVideo:
    frames = np.stack([kept[index] for index in indices])
    return SampledVideo(frames=frames, indices=indices, fps=fps, total_frames=total, path=path if isinstance(path, str) else "")


def frames_video(frames: Any, fps: float = 1.0) -> SampledVideo:
    """A :class:`SampledVideo` of frames already in memory (``[F, H, W, 3]`` uint8, or a list of PIL images)."""
    array = np.stack([np.asarray(frame.convert("RGB")) if hasattr(frame, "convert") else np.asarray(frame) for frame in frames])
    if array.ndim != 4 or array.shape[-1] != 3:
        raise ValueError(f"video frames must be [F, H, W, 3] RGB, got shape {tuple(array.shape)}")
    return SampledVideo(frames=array.astype(np.uint8), indices=list(range(len(array))), fps=fps, total_frames=len(array))


def write_video(path: str | os.PathLike[str], frames: np.ndarray, fps: int = 8) -> str:
    """Write ``[F, H, W, 3]`` uint8 RGB frames as an MPEG-4 file (tests, demo data, the quickstart's video set).

    Even sides are required by the yuv420p pixel format; odd ones are cropped by one pixel.
    """
    av = import_av()
    path = os.fspath(path)
    frames = np.asarray(frames, dtype=np.uint8)
    height, width = frames.shape[1] // 2 * 2, frames.shape[2] // 2 * 2
    container = av.open(path, mode="w")
    try:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"qscale": "2"}
        for frame in frames[:, :height, :width]:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    finally:
        container.close()
    return path


__all__ = [
    "VIDEO_EXTRA", "VIDEO_SUFFIXES", "SampledVideo", "VideoUnreadable", "check_frame_flags", "frames_video", "import_av",
    "is_video_path", "load_video", "refuse_video_as_image", "sample_frame_indices", "write_video",
]
