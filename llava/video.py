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
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from llava.pixels import over_pixel_bound, pixel_limit, too_many_pixels
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


#: The most frames one video may be sampled to (``--frames-upbound``): NeXT's recipes take 8 to 64, long-video
#: models a few hundred; more is a memory bomb of the sampler itself (``numpy.linspace`` of that many indices).
MAX_FRAMES = 4096
#: The range of ``--video-fps`` (frames kept per second before the cap; NeXT's default is 1).
VIDEO_FPS_RANGE = (0.001, 1000.0)


def check_frame_flags(frames_upbound: int, force_sample: bool, video_fps: float = 1.0, *, flags: tuple[str, str, str] = (
        "--frames-upbound", "--force-sample", "--video-fps")) -> None:
    """The one rule for the frame flags (every command that reads videos calls it first, before any model loads).

    Args:
        frames_upbound, force_sample, video_fps: As :func:`sample_frame_indices` takes them.
        flags: How the command spells the three flags (training: ``--frames_upbound`` ...).

    Raises:
        UserError: For a ``frames_upbound`` that is not an integer from 0 to :data:`MAX_FRAMES`, ``force_sample``
            without a positive one, or a ``video_fps`` that is not a finite number in :data:`VIDEO_FPS_RANGE`.
    """
    from llava.numeric import check_number

    check_number(frames_upbound, flags[0], 0, MAX_FRAMES, integer=True, unit="0: one frame per second, no cap")
    if force_sample and frames_upbound == 0:
        raise UserError(f"{flags[1]} takes {flags[0]} evenly spread frames; give {flags[0]} N with N >= 1")
    check_number(video_fps, flags[2], *VIDEO_FPS_RANGE, unit="frames kept per second")


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
        ValueError: For ``total < 1``, or frame values :func:`check_frame_flags` refuses.
    """
    if total < 1:
        raise ValueError(f"a video needs at least one frame, got {total}")
    check_frame_flags(frames_upbound, force_sample, video_fps, flags=("frames_upbound", "force_sample", "video_fps"))
    rate = fps if math.isfinite(fps) and fps > 0 else 1.0
    step = max(round(rate / video_fps), 1)
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


class VideoTooLarge(VideoUnreadable):
    """A video whose frames are over the pixel bound (:mod:`llava.pixels`), found before they are decoded.

    Attributes:
        size: ``(width, height)`` of the frames.
        limit: The bound in pixels.
    """

    def __init__(self, message: str, size: tuple[int, int], limit: int) -> None:
        super().__init__(message)
        self.size, self.limit = size, limit


class StillPicture(VideoUnreadable):
    """A still picture given as a video (FFmpeg would read it as a one-frame video and skip the image checks)."""


class FrameSizeChanges(VideoUnreadable):
    """A video whose frames do not all have its first frame's size.

    Attributes:
        sizes: ``((width, height) of the first frame, (width, height) of the first one that differs)``.
    """

    def __init__(self, message: str, sizes: tuple[tuple[int, int], tuple[int, int]]) -> None:
        super().__init__(message)
        self.sizes = sizes


def size_change(name: str, first: tuple[int, int], size: tuple[int, int]) -> str:
    """The sentence for a video of ``name`` whose frames change from ``first`` to ``size``."""
    return (f"{name} changes frame size mid-stream ({first[0]}x{first[1]} -> {size[0]}x{size[1]}); "
            "re-encode it at one frame size")


def _name(source: str | bytes) -> str:
    return f"video file {source!r}" if isinstance(source, str) else "the uploaded video"


def _reason(error: BaseException) -> str:
    """FFmpeg's own words for a decoding error, without the errno and the file name the sentence already gives
    (PyAV's ``str()`` is ``[Errno 1094995529] Invalid data found when processing input: 'clip.mp4'``)."""
    text = str(error)
    return getattr(error, "strerror", None) or (text.splitlines()[0] if text else type(error).__name__)


def is_still_image_format(format_name: str) -> bool:
    """Whether an FFmpeg demuxer reads still pictures (``image2``, ``png_pipe``, ``jpeg_pipe``, ...): FFmpeg opens
    any picture as a one-frame "video", which skips the image checks; an animated GIF (``gif``) is a video."""
    return "image2" in format_name or format_name.endswith("_pipe")


def _open(source: str | bytes, max_pixels: int | None = None) -> Any:
    """An open PyAV container with a video stream, for a file path or a video file's bytes.

    FFmpeg decodes a frame or two while it opens a file (to learn the stream's parameters). Its own ``max_pixels``
    option keeps it from decoding frames over the bound then, so opening costs no memory however large the frames
    are; their size still comes from the container's header. Some decoders then report no size at all; the file is
    opened again without the option (FFmpeg decodes at most its first frames), so the size is known for the check.

    Raises:
        VideoUnreadable: For a missing path or a folder, a file FFmpeg cannot open, a still picture, or a
            container without a video stream.
    """
    if isinstance(source, str) and os.path.isdir(source):
        raise VideoUnreadable(f"video file {source!r} is a folder; pass the path of a video file")
    if isinstance(source, str) and not os.path.isfile(source):
        raise VideoUnreadable(f"video file {source!r} does not exist")
    bound = pixel_limit(max_pixels)
    container = _open_container(source, {"max_pixels": str(bound)} if bound is not None else {})
    if bound is not None and not container.streams.video[0].codec_context.width:
        container.close()
        container = _open_container(source, {})
    return container


def _open_container(source: str | bytes, options: dict[str, str]) -> Any:
    av = import_av()
    try:
        container = av.open(source if isinstance(source, str) else io.BytesIO(source), options=options)
    except (av.FFmpegError, OSError, ValueError) as error:
        raise VideoUnreadable(f"cannot read {_name(source)} ({_reason(error)})") from None
    if is_still_image_format(container.format.name):
        container.close()
        raise StillPicture(f"{_name(source)} is not a video (FFmpeg reads it as a still picture, {container.format.name}); "
                           "give a picture as an image, a video as an MP4, WebM or other video file")
    if not container.streams.video:
        container.close()
        raise VideoUnreadable(f"{_name(source)} holds no video stream")
    return container


def _check_frame(source: str | bytes, size: tuple[int, int], first: tuple[int, int] | None, max_pixels: int | None) -> None:
    """The per-frame rule: within the pixel bound, and the size of the stream's first frame.

    Raises:
        VideoTooLarge: Over the bound (from the header, before any frame is decoded, or a later frame).
        FrameSizeChanges: For a frame of another size than the first (``numpy`` cannot stack them, and a model
            input has one frame size).
    """
    bound = over_pixel_bound(size[0], size[1], max_pixels)
    if bound is not None:
        raise VideoTooLarge(too_many_pixels(_name(source), bound, size), size, bound)
    if first is not None and size != first:
        raise FrameSizeChanges(size_change(_name(source), first, size), (first, size))


def _decode(source: str | bytes, keep: set[int], max_pixels: int | None) -> tuple[dict[int, np.ndarray], int, float]:
    """Decode every frame of ``source``, each checked by :func:`_check_frame` before it is converted; keep the RGB
    arrays of the indices in ``keep``.

    Returns:
        ``({index: [H, W, 3] uint8}, frames decoded, average fps)``.
    """
    av = import_av()
    container = _open(source, max_pixels)
    kept: dict[int, np.ndarray] = {}
    count, first = 0, None
    try:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        rate = stream.average_rate or stream.guessed_rate
        fps = float(rate) if rate else 0.0
        for frame in container.decode(stream):
            size = (int(frame.width), int(frame.height))
            _check_frame(source, size, first, max_pixels)
            first = first or size
            if count in keep:
                kept[count] = frame.to_ndarray(format="rgb24")
            count += 1
    except (av.FFmpegError, ValueError) as error:
        if isinstance(error, VideoUnreadable):
            raise
        raise VideoUnreadable(f"cannot decode {_name(source)} after {count} frames ({_reason(error)})") from None
    finally:
        container.close()
    return kept, count, fps


@dataclass(frozen=True)
class VideoPlan:
    """A video checked from its header, with the frames NeXT's rule will take, before any frame is decoded
    (:func:`probe_video`). :meth:`decode` reads them.

    Attributes:
        source: The path, or the file's bytes.
        total: Frames in the video (as the container declares them, or counted when it does not).
        fps: Its average frame rate (0 when unknown).
        size: ``(width, height)`` from the stream's header.
        indices: The frames :func:`sample_frame_indices` takes.
        rule: The frame rule's keywords (``video_fps``, ``frames_upbound``, ``force_sample``).
        max_pixels: The pixel bound every frame is held to (``None``: PIL's ``Image.MAX_IMAGE_PIXELS``).
        counted: Whether ``total`` was counted by decoding (the container declares no frame count).
    """

    source: str | bytes
    total: int
    fps: float
    size: tuple[int, int]
    indices: list[int]
    rule: dict[str, Any]
    max_pixels: int | None = None
    counted: bool = False

    @property
    def frame_count(self) -> int:
        """How many frames the model will get."""
        return len(self.indices)

    def check_frames(self) -> int:
        """Decode every frame, holding each to the pixel bound and the first frame's size, converting none
        (what :meth:`decode` will meet, for a check that keeps nothing); returns the number of frames.

        Raises:
            VideoUnreadable: As :meth:`decode`.
        """
        return _decode(self.source, set(), self.max_pixels)[1]

    def decode(self) -> SampledVideo:
        """The sampled frames; every frame of the file is held to the pixel bound and the first frame's size.

        A container whose declared frame count was wrong is sampled again from the true count.

        Raises:
            VideoUnreadable: As :func:`probe_video`, or for a frame the decoder cannot read.
        """
        kept, total, fps = _decode(self.source, set(self.indices), self.max_pixels)
        if total != self.total:
            if total == 0:
                raise VideoUnreadable(f"{_name(self.source)} has no decodable frames")
            indices = sample_frame_indices(total, fps, **self.rule)
            kept, total, fps = _decode(self.source, set(indices), self.max_pixels)
            return _sampled(kept, indices, fps, total, self.source)
        return _sampled(kept, self.indices, fps, total, self.source)


def probe_video(
    source: str | os.PathLike[str] | bytes, *, frames_upbound: int = 0, force_sample: bool = False, video_fps: float = 1,
    max_pixels: int | None = None,
) -> VideoPlan:
    """Check a video the one way every command, loader, server and the training data do, before its frames are
    decoded: a file FFmpeg reads as a video (not a still picture), with a video stream whose header size is within
    the pixel bound; then which frames NeXT's rule takes (:func:`sample_frame_indices`).

    Only a container that does not declare its frame count is decoded here (each frame checked, none converted),
    to count its frames.

    Args:
        source: A path or a video file's bytes.
        frames_upbound, force_sample, video_fps: NeXT's frame rule.
        max_pixels: The pixel bound of a frame; ``None`` is PIL's ``Image.MAX_IMAGE_PIXELS`` (servers pass theirs).

    Raises:
        UserError: If PyAV is not installed.
        VideoTooLarge: For frames over the pixel bound.
        VideoUnreadable: If the file is missing, not a video, not decodable, or has no frames.
    """
    source = source if isinstance(source, bytes) else os.fspath(source)
    rule = {"video_fps": video_fps, "frames_upbound": frames_upbound, "force_sample": force_sample}
    container = _open(source, max_pixels)
    try:
        stream = container.streams.video[0]
        size = (int(stream.codec_context.width or 0), int(stream.codec_context.height or 0))
        rate = stream.average_rate or stream.guessed_rate
        total, fps = int(stream.frames or 0), float(rate) if rate else 0.0
    finally:
        container.close()
    _check_frame(source, size, None, max_pixels)
    counted = total <= 0
    if counted:
        _, total, fps = _decode(source, set(), max_pixels)
        if total == 0:
            raise VideoUnreadable(f"{_name(source)} has no decodable frames")
    indices = sample_frame_indices(total, fps, **rule)
    return VideoPlan(source, total, fps, size, indices, rule, max_pixels, counted)


def load_video(
    path: str | os.PathLike[str] | bytes, *, frames_upbound: int = 0, force_sample: bool = False, video_fps: float = 1,
    max_pixels: int | None = None,
) -> SampledVideo:
    """Read a video file (a path, or the file's bytes) and keep NeXT's sample of its frames: :func:`probe_video`,
    then :meth:`VideoPlan.decode` (only the chosen frames are converted to RGB).

    Raises:
        UserError: If PyAV is not installed.
        VideoUnreadable: If the file is missing, not a video, not decodable, has no frames, changes frame size, or
            its frames are over the pixel bound (:class:`VideoTooLarge`).
    """
    plan = probe_video(path, frames_upbound=frames_upbound, force_sample=force_sample, video_fps=video_fps, max_pixels=max_pixels)
    return plan.decode()


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
    "MAX_FRAMES", "VIDEO_EXTRA", "VIDEO_FPS_RANGE", "VIDEO_SUFFIXES", "FrameSizeChanges", "SampledVideo", "StillPicture",
    "VideoPlan", "VideoTooLarge", "VideoUnreadable", "check_frame_flags", "frames_video", "import_av", "is_still_image_format", "is_video_path",
    "load_video", "probe_video", "refuse_video_as_image", "sample_frame_indices", "write_video",
]
