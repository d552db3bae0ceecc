"""The page's upload guard takes real videos as well as images, and still refuses everything else (K22); the page
and the worker check a video by one rule, before its frames are decoded (issue 31: S01, S02, S03)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from llava import video as video_module
from llava.serve.images import ImageLimits, ImageRejected
from llava.serve.uploads import _media_problem
from llava.serve.video_input import check_video_file, decode_base64_video
from llava.video import write_video

from ..video_faults import picture_named_as_video, size_switching_clip


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    frames = np.zeros((4, 32, 32, 3), dtype=np.uint8)
    frames[:, 8:24, 8:24, 0] = 255
    return Path(write_video(tmp_path_factory.mktemp("clip") / "square.mp4", frames, fps=2))


def test_a_real_video_is_accepted(clip: Path) -> None:
    check_video_file(clip)
    assert _media_problem(clip, ImageLimits()) is None


@pytest.mark.parametrize("name", ["noise.mp4", "noise.png", "noise.webm"])
def test_random_bytes_are_neither_an_image_nor_a_video(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(os.urandom(64 * 1024))
    with pytest.raises(ImageRejected, match="neither an image nor a video this server can read"):
        check_video_file(path)
    assert _media_problem(path, ImageLimits()) is not None


def test_a_video_over_the_byte_and_pixel_limits_is_refused(clip: Path) -> None:
    with pytest.raises(ImageRejected, match="larger than the 0 MiB"):
        check_video_file(clip, ImageLimits(max_bytes=10, max_pixels=10**6))
    with pytest.raises(ImageRejected, match="frames are 32x32, more than this server accepts"):
        check_video_file(clip, ImageLimits(max_bytes=1 << 24, max_pixels=100))


def _base64(path: Path) -> str:
    import base64

    return base64.b64encode(path.read_bytes()).decode("ascii")


def test_frames_over_the_limit_are_refused_before_the_worker_decodes_one(clip: Path, monkeypatch) -> None:
    # S01: the worker decoded and stacked 16 frames of 6000x6000 (+2 GB) before its size check.
    def decode(*args, **kwargs):
        raise AssertionError("a frame was decoded")

    monkeypatch.setattr(video_module, "_decode", decode)
    with pytest.raises(ImageRejected, match=r"^the uploaded video's frames are 32x32, more than this server accepts "
                                            r"\(0.0 megapixels\); downscale it$"):
        decode_base64_video(_base64(clip), ImageLimits(max_pixels=100))


def test_the_page_and_the_worker_refuse_a_size_change_in_one_sentence(tmp_path: Path) -> None:
    # S03: the page's check looked at the first frame only, and the worker answered with numpy's words.
    switch = size_switching_clip(tmp_path / "switch.ts", sides=(32, 64))
    for limits, expected in ((ImageLimits(), r"^the uploaded video changes frame size mid-stream \(32x32 -> 64x64\); "
                                                r"re-encode it at one frame size$"),
                             (ImageLimits(max_pixels=2000), r"^the uploaded video's frames are 64x64, more than this server")):
        with pytest.raises(ImageRejected, match=expected) as page:
            check_video_file(switch, limits)
        with pytest.raises(ImageRejected, match=expected) as worker:
            decode_base64_video(_base64(switch), limits)
        assert str(page.value) == str(worker.value)
        assert _media_problem(switch, limits) == str(page.value)


def test_a_picture_sent_as_a_video_is_refused(tmp_path: Path) -> None:
    # S02: a PNG in 'videos' was answered as a one-frame video, past the picture checks.
    picture = picture_named_as_video(tmp_path / "picture.mp4")
    with pytest.raises(ImageRejected, match=r"^the uploaded file is neither an image nor a video this server can read as a "
                                            r"video \(FFmpeg reads it as a still picture\); send pictures as images"):
        decode_base64_video(_base64(picture))
