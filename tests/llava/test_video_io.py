"""Reading videos (llava.video): NeXT's frame rule with hand-worked indices, PyAV round trips of tiny clips, and
one-sentence errors for a missing decoder, a missing file and a file that is not a video; the one video check
(issue 31, groups 2 and 3): the pixel bound from the header before any frame is decoded, the same sentence as for
a picture, a frame size that changes mid-stream, and a still picture given as a video."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest
from PIL import Image

from llava import video as video_module
from llava.mm_utils import open_image
from llava.utils import UserError
from llava.video import (
    FrameSizeChanges,
    StillPicture,
    VideoTooLarge,
    VideoUnreadable,
    import_av,
    is_video_path,
    load_video,
    probe_video,
    sample_frame_indices,
    write_video,
)

from .video_faults import picture_named_as_video, size_switching_clip


@pytest.mark.parametrize(
    "total, fps, upbound, force, expected",
    [
        # 10 s at 30 fps, 1 frame per second: step round(30/1) = 30 → 0, 30, ..., 270 (10 frames, under the cap).
        (300, 30.0, 16, False, list(range(0, 300, 30))),
        # Same clip, cap 4 < 10: linspace(0, 299, 4) = 0, 99.67, 199.33, 299 → int → 0, 99, 199, 299.
        (300, 30.0, 4, False, [0, 99, 199, 299]),
        # 24 frames at 8 fps (3 s): step 8 → 0, 8, 16; force_sample with 4: linspace(0, 23, 4) = 0, 7.67, 15.33, 23.
        (24, 8.0, 0, False, [0, 8, 16]),
        (24, 8.0, 4, True, [0, 7, 15, 23]),
        # More frames asked than exist: linspace repeats indices, as NeXT's does.
        (3, 8.0, 5, True, [0, 0, 1, 1, 2]),
        # A clip slower than video_fps / 2: NeXT's step would be round(0.4) = 0; here 1.
        (4, 0.4, 0, False, [0, 1, 2, 3]),
    ],
)
def test_sample_frame_indices_is_nexts_rule(total, fps, upbound, force, expected) -> None:
    assert sample_frame_indices(total, fps, frames_upbound=upbound, force_sample=force) == expected


def test_sample_frame_indices_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="at least one frame"):
        sample_frame_indices(0, 30.0)
    with pytest.raises(ValueError, match="frames_upbound must be an integer from 0 to 4096"):
        sample_frame_indices(10, 30.0, frames_upbound=-1)
    # V04: a rate that passes "> 0" but overflows the step (30 / 1e-320 is inf) is refused, not an OverflowError
    for rate in (1e-320, float("inf"), float("nan"), 0.0):
        with pytest.raises(ValueError, match=r"video_fps must be a finite number from 0.001 to 1000"):
            sample_frame_indices(10, 30.0, video_fps=rate)


def _ramp(frames: int = 24) -> np.ndarray:
    """Frame i is uniformly grey at level 10·i (so a decoded frame tells which one it is)."""
    return np.stack([np.full((32, 48, 3), 10 * index, dtype=np.uint8) for index in range(frames)])


def test_load_video_keeps_the_sampled_frames(tmp_path) -> None:
    path = write_video(tmp_path / "ramp.mp4", _ramp(), fps=8)
    video = load_video(path, frames_upbound=4, force_sample=True)
    assert video.indices == [0, 7, 15, 23] and video.total_frames == 24 and video.fps == pytest.approx(8.0)
    assert video.frames.shape == (4, 32, 48, 3) and video.frames.dtype == np.uint8
    # MPEG-4 is lossy: each decoded frame is within a few levels of 10 x its index.
    np.testing.assert_allclose(video.frames.reshape(4, -1).mean(axis=1), [0, 70, 150, 230], atol=6)
    assert video.duration == pytest.approx(3.0) and video.frame_times == pytest.approx([0, 7 / 8, 15 / 8, 23 / 8])
    assert load_video(path).indices == [0, 8, 16]


def test_unreadable_videos_are_one_sentence(tmp_path) -> None:
    with pytest.raises(VideoUnreadable, match="does not exist"):
        load_video(tmp_path / "missing.mp4")
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00not a video at all\x00" * 50)
    with pytest.raises(VideoUnreadable, match="bad.mp4") as caught:
        load_video(bad)
    # FFmpeg's reason without PyAV's errno and a second copy of the path.
    assert "Errno" not in str(caught.value) and str(caught.value).count("bad.mp4") == 1
    with pytest.raises(VideoUnreadable, match="is a folder; pass the path of a video file"):
        load_video(tmp_path)
    assert is_video_path("a/b.MP4") and not is_video_path("a/b.png")


def test_missing_pyav_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(UserError, match=r"pip install -e \"\.\[video\]\""):
        import_av()


def test_only_real_video_suffixes_are_refused_as_images() -> None:
    from llava.video import refuse_video_as_image

    refuse_video_as_image("scene.gif")  # an image for PIL, as in upstream's --image-file
    refuse_video_as_image("scene.png")
    with pytest.raises(UserError, match="'a/clip.MOV' is a video file, not an image; pass it with --video-file"):
        refuse_video_as_image("a/clip.MOV")


@pytest.mark.parametrize("command", ["llava.eval.run_llava", "llava.serve.cli"])
@pytest.mark.parametrize("flags, message", [
    (["--frames-upbound", "-1"], r"--frames-upbound must be an integer from 0 to 4096 \(0: one frame per second, no cap\), got -1"),
    (["--frames-upbound", "0", "--force-sample"], "--force-sample takes --frames-upbound evenly spread frames"),
    # 0 is NeXT's "no cap": the frames are read and the command goes on to the (missing) model
    (["--frames-upbound", "0"], "no-model"),
])
def test_every_video_command_takes_the_frame_flags_by_one_rule(tmp_path, command, flags, message) -> None:
    # The chat refused --frames-upbound 0, which run_llava and model_vqa_video take as NeXT's "no cap".
    import importlib

    main = importlib.import_module(command).main
    clip = write_video(tmp_path / "ramp.mp4", _ramp(), fps=8)
    argv = ["--model-path", str(tmp_path / "no-model"), "--video-file", clip, "--device", "cpu", *flags]
    if command == "llava.eval.run_llava":
        argv += ["--query", "What moves?"]
    with pytest.raises(UserError, match=message):
        main(argv)


# ------------------------------------------------------------------------------------------------ issue 31, groups 2-3


def _never_decoded(monkeypatch) -> None:
    """Fail the test if any frame of a video is decoded."""
    def decode(*args, **kwargs):
        raise AssertionError("a frame was decoded")

    monkeypatch.setattr(video_module, "_decode", decode)


def test_frames_over_the_pixel_bound_are_refused_from_the_header_before_decoding(tmp_path, monkeypatch) -> None:
    # V05/S01: a video's frames were decoded whole (4.4 GB for 3 frames of 10240x10240) before any size check.
    clip = write_video(tmp_path / "ramp.mp4", _ramp(), fps=8)  # 48x32 = 1536 pixels a frame
    _never_decoded(monkeypatch)
    with pytest.raises(VideoTooLarge, match=rf"^video file '{clip}' \(48x32\) has more pixels than the 1000 allowed "
                                            r"here; downscale it$") as caught:
        load_video(clip, max_pixels=1000)
    assert caught.value.size == (48, 32) and caught.value.limit == 1000


def test_the_bound_is_pils_and_the_sentence_the_one_pictures_get(tmp_path, monkeypatch) -> None:
    clip = write_video(tmp_path / "ramp.mp4", _ramp(), fps=8)
    picture = tmp_path / "frame.png"
    Image.new("RGB", (48, 32)).save(picture)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # the user's bound, as for every picture
    with pytest.raises(UserError) as for_picture:
        open_image(picture)
    with pytest.raises(VideoTooLarge) as for_video:
        probe_video(clip)
    tail = "has more pixels than the 1000 PIL decodes safely (a possible decompression bomb); downscale it"
    assert str(for_picture.value).endswith(tail) and str(for_video.value).endswith(tail)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1536)  # exactly one frame's pixels: within the bound
    assert load_video(clip, frames_upbound=2, force_sample=True).frames.shape == (2, 32, 48, 3)


def test_a_video_that_changes_frame_size_is_one_sentence(tmp_path) -> None:
    # V06: numpy's "all input arrays must have the same shape" escaped as a traceback.
    clip = size_switching_clip(tmp_path / "switch.ts", sides=(32, 64))
    with pytest.raises(FrameSizeChanges, match=rf"^video file '{clip}' changes frame size mid-stream \(32x32 -> 64x64\); "
                                               r"re-encode it at one frame size$") as caught:
        load_video(clip, frames_upbound=4, force_sample=True)
    assert caught.value.sizes == ((32, 32), (64, 64))
    # The pixel bound holds for every frame, not only the first: the larger frames are over 2000 pixels.
    with pytest.raises(VideoTooLarge, match=r"\(64x64\) has more pixels than the 2000 allowed here"):
        load_video(clip, max_pixels=2000)


def test_a_still_picture_is_not_a_video(tmp_path) -> None:
    # S02/V14: FFmpeg reads any picture as a one-frame "video", which skipped the picture checks.
    picture = picture_named_as_video(tmp_path / "picture.mp4")
    for source in (picture, picture.read_bytes()):
        with pytest.raises(StillPicture, match=r"is not a video \(FFmpeg reads it as a still picture, png_pipe\); give a "
                                               r"picture as an image, a video as an MP4, WebM or other video file$"):
            load_video(source)
    frames = [Image.new("RGB", (24, 16), (40 * index, 0, 0)) for index in range(4)]
    gif = tmp_path / "anim.gif"
    frames[0].save(gif, save_all=True, append_images=frames[1:], duration=250, loop=0)
    assert len(load_video(gif, frames_upbound=4, force_sample=True)) == 4  # an animated GIF is a video


@pytest.mark.parametrize("command", ["llava.eval.run_llava", "llava.serve.cli"])
def test_every_video_command_refuses_a_bad_video_before_the_model_loads(tmp_path, command, monkeypatch, capsys) -> None:
    # V05 (frames over PIL's bound, decoded whole: 4.4 GB) and V06 (a size change: numpy's traceback), through the
    # commands' own error handling; the model path does not exist, so nothing after the video check runs.
    import importlib

    from llava.utils import cli_main

    main = importlib.import_module(command).main
    clip = write_video(tmp_path / "ramp.mp4", _ramp(), fps=8)
    switch = size_switching_clip(tmp_path / "switch.ts")
    query = ["--query", "What moves?"] if command == "llava.eval.run_llava" else []
    monkeypatch.setattr("sys.stdin", open(os.devnull))
    for video, limit, expected in ((clip, 1000, rf"video file '{clip}' \(48x32\) has more pixels than the 1000 PIL decodes safely"),
                                   (switch, None, rf"video file '{switch}' changes frame size mid-stream \(32x32 -> 64x64\)")):
        if limit is not None:
            monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
        argv = ["--model-path", str(tmp_path / "no-model"), "--video-file", str(video), "--device", "cpu", *query]
        assert cli_main(main, argv) == 2
        assert re.search(f"error: {expected}", capsys.readouterr().err.strip().splitlines()[-1])
        monkeypatch.undo()
        monkeypatch.setattr("sys.stdin", open(os.devnull))
