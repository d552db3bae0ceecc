"""Videos sent to the serving stack (issue 23): base64-encoded video files, checked against the upload limits,
decoded with LLaVA-NeXT's frame rule (:mod:`llava.video`) and prepared as one ``"video"`` item for ``generate``."""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

from llava.video import FrameSizeChanges, SampledVideo, StillPicture, VideoPlan, VideoTooLarge, VideoUnreadable, probe_video, size_change

from .images import ImageLimits, ImageRejected

#: Frames taken from an uploaded video (evenly spread, NeXT's ``force_sample``): the OneVision tutorial's 16.
SERVED_FRAMES = 16


#: A file that is neither: what the page and the worker say for it.
NEITHER = "the uploaded file is neither an image nor a video this server can read"
UNREADABLE = f"{NEITHER}; upload a PNG, JPEG, MP4 or WebM file"


def _refusal(error: VideoUnreadable, limits: ImageLimits) -> ImageRejected:
    """The server's sentence for a video :mod:`llava.video` refused (the same for the page and the worker)."""
    if isinstance(error, VideoTooLarge):
        width, height = error.size
        return ImageRejected(
            f"the uploaded video's frames are {width}x{height}, more than this server accepts "
            f"({limits.max_pixels / 1_000_000:.1f} megapixels); downscale it"
        )
    if isinstance(error, StillPicture):
        return ImageRejected(f"{NEITHER} as a video (FFmpeg reads it as a still picture); send pictures as images (the "
                             "worker API's 'images') and videos as MP4 or WebM files")
    if isinstance(error, FrameSizeChanges):
        return ImageRejected(size_change("the uploaded video", *error.sizes))
    return ImageRejected(UNREADABLE)


def _check_bytes(size: int, limits: ImageLimits) -> None:
    if size > limits.max_bytes:
        raise ImageRejected(f"the uploaded video is larger than the {limits.max_bytes // 2**20} MiB this server accepts; upload a shorter one")


def probe_uploaded_video(source: str | bytes, limits: ImageLimits = ImageLimits(), frames: int = SERVED_FRAMES) -> VideoPlan:
    """The one check of a video reaching a server (a page upload, the worker API's ``videos``), before any frame
    is decoded: its size in bytes, a container FFmpeg reads as a video (not a still picture), frames within the
    server's pixel bound (from the header), and ``frames`` evenly spread frames to take (NeXT's ``force_sample``).

    Raises:
        ImageRejected: One sentence, the same whichever entry point the video came through.
    """
    _check_bytes(len(source) if isinstance(source, bytes) else os.path.getsize(source), limits)
    try:
        return probe_video(source, frames_upbound=frames, force_sample=True, max_pixels=limits.max_pixels)
    except VideoUnreadable as error:
        raise _refusal(error, limits) from None


def decode_planned_video(plan: VideoPlan, limits: ImageLimits = ImageLimits()) -> SampledVideo:
    """The frames of a video :func:`probe_uploaded_video` accepted; every frame is held to the same rules.

    Raises:
        ImageRejected: For a frame over the bound or of another size than the first (the same sentences).
    """
    try:
        return plan.decode()
    except VideoUnreadable as error:
        raise _refusal(error, limits) from None


def check_video_file(path: str | os.PathLike[str], limits: ImageLimits = ImageLimits()) -> None:
    """Check an uploaded file as a video, as the worker will (:func:`probe_uploaded_video`), and every frame of it
    (decoded, not converted), so the page refuses at upload what the worker would refuse later.

    Raises:
        ImageRejected: If it is larger than ``limits.max_bytes``, not a container with a video stream, a still
            picture, its frames have more than ``limits.max_pixels`` pixels or change size (one sentence each).
    """
    try:
        os.path.getsize(path)
    except OSError:
        raise ImageRejected(f"the uploaded file {os.fspath(path)!r} cannot be found; upload it again") from None
    plan = probe_uploaded_video(os.fspath(path), limits)
    try:
        plan.check_frames()
    except VideoUnreadable as error:
        raise _refusal(error, limits) from None


def decode_base64_video(text: str, limits: ImageLimits = ImageLimits(), frames: int = SERVED_FRAMES) -> SampledVideo:
    """Decode a base64-encoded video file and sample ``frames`` evenly spread frames (the worker API's ``videos``).

    Raises:
        ImageRejected: If the text is not base64, or as :func:`probe_uploaded_video` and :func:`decode_planned_video`.
    """
    return decode_planned_video(probe_base64_video(text, limits, frames), limits)


def probe_base64_video(text: str, limits: ImageLimits = ImageLimits(), frames: int = SERVED_FRAMES) -> VideoPlan:
    """:func:`probe_uploaded_video` for a base64-encoded video file (nothing is decoded but the base64).

    Raises:
        ImageRejected: If the text is not base64, or as :func:`probe_uploaded_video`.
    """
    if not isinstance(text, str):
        raise ImageRejected(f"each entry of 'videos' must be a base64-encoded video file, got {type(text).__name__}")
    if len(text) > limits.max_bytes * 4 // 3 + 4:
        _check_bytes(len(text) * 3 // 4, limits)
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRejected("an entry of 'videos' is not valid base64; send each video file base64-encoded") from None
    return probe_uploaded_video(data, limits, frames)


def video_pixels(model: Any, image_processor: Any, video: SampledVideo) -> tuple[Any, int]:
    """``([F, 3, side, side] pixels on the model's device and dtype, visual tokens the video takes)``.

    torch is imported here, not with the module: the page's upload check needs only the video rules, and a page
    process that never loads a model answers its first upload without importing torch.
    """
    import torch

    from llava.mm_utils import process_video
    from llava.model.image_encoding import grid_shape
    from llava.model.video import video_layout, video_token_count

    pixels = process_video(video.frames, image_processor).to(model.device, dtype=model.dtype)
    with torch.inference_mode():
        per_frame = int(model.encode_images(pixels[:1])[0].shape[0])
    layout = video_layout(model.config, grid_shape(model.get_vision_tower()), getattr(model.get_model(), "image_newline", None))
    return pixels, video_token_count(pixels.shape[0], per_frame, layout)


__all__ = [
    "SERVED_FRAMES", "UNREADABLE", "check_video_file", "decode_base64_video", "decode_planned_video", "probe_base64_video",
    "probe_uploaded_video", "video_pixels",
]
