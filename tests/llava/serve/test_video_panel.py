"""The demo's compressor panel for a video (issue 23): the compressor's own view of sampled frames, each titled
with its time, and the video's token count (K per frame, newlines as mm_newline_position says)."""

from __future__ import annotations

import numpy as np
import torch

from llava.video import frames_video


def _frames() -> np.ndarray:
    frames = np.zeros((6, 40, 40, 3), dtype=np.uint8)
    for index in range(6):
        frames[index, 10:20, 5 * index : 5 * index + 10] = 255
    return frames


def test_video_panel_shows_the_view_per_frame(braco_engine) -> None:
    from llava.serve.panels import compute_video_view, render_png

    model = braco_engine.model
    view = compute_video_view(model, braco_engine.image_processor, frames_video(_frames(), fps=2.0))
    assert view is not None
    # 4 of the 6 frames shown (0, 2, 3, 5: evenly spread), each with the compressor's pictures, titled by time at 2 fps.
    assert view.details["frames_shown"] == [0, 2, 3, 5] and view.details["frames"] == 6
    titles = [picture.title for picture in view.pictures]
    assert titles[0].startswith("t=0.0s") and any(title.startswith("t=2.5s") for title in titles)
    assert len(view.pictures) % 4 == 0
    # K = 9 per frame (c2s5), flat merge: no newline, 6 x 9.
    assert model.config.mm_patch_merge_type == "flat"
    assert view.details["video_tokens"] == 54 and "**54 visual tokens for 6 frames**" in view.summary
    # With spatial_unpad and the grid position, one newline per compressed frame: 6 x 10.
    saved = dict(vars(model.config))
    model.config.mm_patch_merge_type, model.config.mm_newline_position = "spatial_unpad", "grid"
    model.get_model().image_newline = torch.nn.Parameter(torch.zeros(model.config.hidden_size))
    try:
        again = compute_video_view(model, braco_engine.image_processor, frames_video(_frames(), fps=2.0))
        assert again.details["video_tokens"] == 60
    finally:
        for key in ("mm_patch_merge_type", "mm_newline_position"):
            if key in saved:
                setattr(model.config, key, saved[key])
            else:
                delattr(model.config, key)
        del model.get_model().image_newline
    assert render_png(view).startswith(b"\x89PNG")


def test_no_panel_without_a_view(mlp_engine) -> None:
    from llava.serve.panels import compute_video_view

    frames = frames_video(np.zeros((2, 16, 16, 3), dtype=np.uint8))
    assert compute_video_view(mlp_engine.model, mlp_engine.image_processor, frames) is None
