"""Reading videos (llava.video): NeXT's frame rule with hand-worked indices, PyAV round trips of tiny clips, and
one-sentence errors for a missing decoder, a missing file and a file that is not a video."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from llava.utils import UserError
from llava.video import VideoUnreadable, import_av, is_video_path, load_video, sample_frame_indices, write_video


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
    with pytest.raises(ValueError, match="frames_upbound must be >= 0"):
        sample_frame_indices(10, 30.0, frames_upbound=-1)


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
    (["--frames-upbound", "-1"], r"--frames-upbound must be >= 0 \(0: one frame per second, no cap\), got -1"),
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
