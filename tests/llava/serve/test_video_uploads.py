"""The page's upload guard takes real videos as well as images, and still refuses everything else (K22)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from llava.serve.images import ImageLimits, ImageRejected
from llava.serve.uploads import _media_problem
from llava.serve.video_input import check_video_file
from llava.video import write_video


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
