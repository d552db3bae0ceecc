"""Videos sent to the serving stack (issue 23): base64-encoded video files, checked against the upload limits,
decoded with LLaVA-NeXT's frame rule (:mod:`llava.video`) and prepared as one ``"video"`` item for ``generate``."""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

import torch

from llava.mm_utils import process_video
from llava.video import SampledVideo, VideoUnreadable, import_av, load_video

from .images import ImageLimits, ImageRejected

#: Frames taken from an uploaded video (evenly spread, NeXT's ``force_sample``): the OneVision tutorial's 16.
SERVED_FRAMES = 16


def check_video_file(path: str | os.PathLike[str], limits: ImageLimits = ImageLimits()) -> None:
    """Check an uploaded file as a video: its size, its container, and that its first frame decodes.

    Raises:
        ImageRejected: If it is larger than ``limits.max_bytes``, not a container with a video stream, or its frames
            have more than ``limits.max_pixels`` pixels (one sentence each).
    """
    try:
        size = os.path.getsize(path)
    except OSError:
        raise ImageRejected(f"the uploaded file {os.fspath(path)!r} cannot be found; upload it again") from None
    if size > limits.max_bytes:
        raise ImageRejected(f"the uploaded video is larger than the {limits.max_bytes // 2**20} MiB this server accepts; upload a shorter one")
    av = import_av()
    unreadable = "the uploaded file is neither an image nor a video this server can read; upload a PNG, JPEG, MP4 or WebM file"
    try:
        with av.open(os.fspath(path)) as container:
            # ffmpeg's still-image demuxers (image2, png_pipe, ...) would take any bytes named .png as a one-frame video
            if "image2" in container.format.name or container.format.name.endswith("_pipe") or not container.streams.video:
                raise ImageRejected(unreadable)
            frame = next(container.decode(video=0))  # one frame: the container is really decodable
            width, height = frame.width, frame.height
    except ImageRejected:
        raise
    except Exception:  # PyAV raises its own error types (and StopIteration without frames) for what it cannot read
        raise ImageRejected(unreadable) from None
    if width * height > limits.max_pixels:
        raise ImageRejected(f"the uploaded video's frames are {width}x{height}, more than this server accepts")


def decode_base64_video(text: str, limits: ImageLimits = ImageLimits(), frames: int = SERVED_FRAMES) -> SampledVideo:
    """Decode a base64-encoded video file and sample ``frames`` evenly spread frames.

    Raises:
        ImageRejected: If the text is not base64, the file is over ``limits.max_bytes``, a frame is over
            ``limits.max_pixels``, or the file is not a decodable video (one sentence each).
    """
    if len(text) > limits.max_bytes * 4 // 3 + 4:
        raise ImageRejected(f"the uploaded video is larger than the {limits.max_bytes // 2**20} MiB this server accepts; upload a shorter one")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRejected("an entry of 'videos' is not valid base64; send each video file base64-encoded") from None
    try:
        video = load_video(data, frames_upbound=frames, force_sample=True)
    except VideoUnreadable as error:
        raise ImageRejected(f"{error}; upload an MP4, WebM or another video file") from None
    width, height = video.size
    if width * height > limits.max_pixels:
        raise ImageRejected(f"the uploaded video's frames are {width}x{height}, more than this server accepts")
    return video


@torch.inference_mode()
def video_pixels(model: Any, image_processor: Any, video: SampledVideo) -> tuple[torch.Tensor, int]:
    """``([F, 3, side, side] pixels on the model's device and dtype, visual tokens the video takes)``."""
    from llava.model.image_encoding import grid_shape
    from llava.model.video import video_layout, video_token_count

    pixels = process_video(video.frames, image_processor).to(model.device, dtype=model.dtype)
    per_frame = int(model.encode_images(pixels[:1])[0].shape[0])
    layout = video_layout(model.config, grid_shape(model.get_vision_tower()), getattr(model.get_model(), "image_newline", None))
    return pixels, video_token_count(pixels.shape[0], per_frame, layout)


__all__ = ["SERVED_FRAMES", "check_video_file", "decode_base64_video", "video_pixels"]
