"""Videos sent to the serving stack (issue 23): base64-encoded video files, checked against the upload limits,
decoded with LLaVA-NeXT's frame rule (:mod:`llava.video`) and prepared as one ``"video"`` item for ``generate``."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import torch

from llava.mm_utils import process_video
from llava.video import SampledVideo, VideoUnreadable, load_video

from .images import ImageLimits, ImageRejected

#: Frames taken from an uploaded video (evenly spread, NeXT's ``force_sample``): the OneVision tutorial's 16.
SERVED_FRAMES = 16


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


__all__ = ["SERVED_FRAMES", "decode_base64_video", "video_pixels"]
