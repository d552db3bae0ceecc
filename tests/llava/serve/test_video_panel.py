"""The demo's compressor panel for a video (issue 23): the compressor's own view of sampled frames, each titled
with its time, and the video's token count (K per frame, newlines as mm_newline_position says)."""

from __future__ import annotations

import numpy as np
import pytest

from llava.video import frames_video

from ..model._support import BRACO, load


@BRACO
def test_video_panel_shows_the_view_per_frame(tmp_path_factory, tiny_qwen_tokenizer_dir) -> None:
    from llava.serve.panels import compute_video_view, render_png
    from llava.testing.tiny import build_tiny_llava_checkpoint, build_tiny_siglip_tower

    root = tmp_path_factory.mktemp("video_panel")
    tower = build_tiny_siglip_tower(root / "siglip", image_size=48, patch_size=6)
    path = build_tiny_llava_checkpoint(root / "llava-qwen2-braco", tower, tiny_qwen_tokenizer_dir, llm="qwen2",
                                       projector_type="braco_c2s5", extra_config={"mm_patch_merge_type": "spatial_unpad"})
    tokenizer, model, processor, _ = load(path)
    frames = np.zeros((6, 40, 40, 3), dtype=np.uint8)
    for index in range(6):
        frames[index, 10:20, 5 * index : 5 * index + 10] = 255
    view = compute_video_view(model, processor, frames_video(frames, fps=2.0))
    assert view is not None
    # 4 of the 6 frames shown (0, 2, 3, 5: evenly spread), each with Braco's pictures, titled by time at 2 fps.
    assert view.details["frames_shown"] == [0, 2, 3, 5] and view.details["frames"] == 6
    titles = [picture.title for picture in view.pictures]
    assert titles[0].startswith("t=0.0s") and any(title.startswith("t=2.5s") for title in titles)
    assert len(view.pictures) % 4 == 0
    # K = 9 per frame (c2s5), one newline per frame under the checkpoint's grid position: 6 x 10.
    assert view.details["video_tokens"] == 60 and "**60 visual tokens for 6 frames**" in view.summary
    assert render_png(view).startswith(b"\x89PNG")


def test_no_panel_without_a_view(tmp_path_factory, tiny_qwen_tokenizer_dir) -> None:
    from llava.serve.panels import compute_video_view
    from llava.testing.tiny import build_tiny_llava_checkpoint, build_tiny_siglip_tower

    root = tmp_path_factory.mktemp("video_panel_plain")
    tower = build_tiny_siglip_tower(root / "siglip", image_size=48, patch_size=6)
    path = build_tiny_llava_checkpoint(root / "llava-qwen2-mlp", tower, tiny_qwen_tokenizer_dir, llm="qwen2")
    _, model, processor, _ = load(path)
    assert compute_video_view(model, processor, frames_video(np.zeros((2, 16, 16, 3), dtype=np.uint8))) is None
