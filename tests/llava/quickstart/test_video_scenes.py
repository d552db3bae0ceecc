"""The video quickstart's clips (``python -m llava.quickstart --video``): what is drawn matches the answers
(pixel centroids measured independently), and the files are in LLaVA-NeXT's video record format."""

from __future__ import annotations

import json
import random

import numpy as np

from llava.quickstart.scenes import COLOURS
from llava.quickstart.video import DIRECTIONS, FRAMES, SECOND_APPEARS, clip_questions, draw_clip, random_clip, write_video_dataset


def _centroid(frame: np.ndarray, colour: str) -> tuple[float, float] | None:
    mask = np.all(np.abs(frame.astype(int) - np.array(COLOURS[colour])) < 8, axis=-1)
    if not mask.any():
        return None
    rows, cols = np.nonzero(mask)
    return float(cols.mean()), float(rows.mean())


def test_clips_show_what_the_answers_say() -> None:
    rng = random.Random(3)
    for _ in range(20):
        clip = random_clip(rng, 64)
        frames = draw_clip(clip, 64)
        assert frames.shape == (FRAMES, 64, 64, 3)
        first, second = clip.colours
        assert all(_centroid(frame, first) is not None for frame in frames)
        assert [_centroid(frame, second) is None for frame in frames] == [index < SECOND_APPEARS for index in range(FRAMES)]
        mover = clip.colours[clip.moving]
        seen = [c for c in (_centroid(frame, mover) for frame in frames) if c is not None]
        dx, dy = DIRECTIONS[clip.direction]
        step = np.subtract(seen[-1], seen[0]) / (len(seen) - 1)
        np.testing.assert_allclose(step, (8 * dx, 8 * dy), atol=0.01)  # 64 // 8 pixels per frame
        still = clip.colours[1 - clip.moving]
        resting = {c for c in (_centroid(frame, still) for frame in frames) if c is not None}
        assert len(resting) == 1
        answers = {q.category: q.answer for q in clip_questions(clip, rng)}
        assert answers == {"direction": clip.direction, "first": first, "mover": mover}


def test_dataset_files_are_next_video_records(tmp_path) -> None:
    files = write_video_dataset(tmp_path, train_clips=2, test_questions=3, turns_per_clip=2)
    finetune = json.loads(files.finetune.read_text())
    assert finetune[0]["video"].endswith(".mp4") and finetune[0]["conversations"][0]["value"].startswith("<image>\n")
    assert len(finetune[0]["conversations"]) == 4 and "image" not in finetune[0]
    questions = [json.loads(line) for line in files.questions.read_text().splitlines()]
    assert [q["category"] for q in questions] == ["direction", "first", "mover"]
    assert all((files.images / q["video"]).is_file() for q in questions)
