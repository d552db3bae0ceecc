"""The quickstart's video set (``--video``): short clips of moving shapes with questions about order and motion.

A clip has :data:`FRAMES` frames at 1 frame per second (so LLaVA-NeXT's default frame rule, one frame per second,
keeps every frame in training, and ``--frames-upbound 4`` keeps them at evaluation). Two shapes of distinct
colours: the *first* is there from frame 0, the *second* appears at frame 2; one of them (either) moves by a
fixed step per frame in one of four directions, the other stands still. Questions (one word answers):

- ``direction``: "Which way does the red shape move?" → left / right / up / down (needs the frame order);
- ``first``: "Which colour appears first, red or blue?" → the first shape's colour (the two named in random order);
- ``mover``: "What colour is the moving shape?" → its colour (needs two frames compared).

Files (LLaVA / LLaVA-NeXT formats): ``videos/*.mp4``; ``pretrain.json`` (``{"video", "conversations"}`` captions),
``finetune.json`` (question/answer conversations), ``questions.jsonl`` for ``llava.eval.model_vqa_video``
(``question_id``, ``video``, ``text``, ``category``) on clips never trained on, and ``answers_gold.jsonl``. Video paths
in the training files are absolute, so training needs no ``--video_folder``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw
from tqdm import tqdm

from llava.conversation import conv_templates
from llava.video import write_video

from .scenes import BACKGROUND, COLOURS, SHAPES, SUFFIX, DatasetFiles, conversation, save_dataset

FRAMES = 4
DIRECTIONS = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
#: Frame at which the second shape appears.
SECOND_APPEARS = 2
#: Question type → its possible answers (chance is one over their number; ``first`` names two colours).
ANSWER_SETS: dict[str, tuple[str, ...]] = {"direction": tuple(DIRECTIONS), "first": ("first", "second"), "mover": tuple(COLOURS)}


@dataclass(frozen=True)
class Clip:
    """Two shapes; ``moving`` (0 or 1) moves in ``direction``; ``starts`` are the top-left corners at their first frame."""

    shapes: tuple[str, str]
    colours: tuple[str, str]
    starts: tuple[tuple[int, int], tuple[int, int]]
    moving: int
    direction: str

    def caption(self) -> str:
        still = 1 - self.moving
        return (f"A {self.colours[0]} {self.shapes[0]} comes first, then a {self.colours[1]} {self.shapes[1]}. "
                f"The {self.colours[self.moving]} {self.shapes[self.moving]} moves {self.direction}; "
                f"the {self.colours[still]} {self.shapes[still]} stays.")


@dataclass(frozen=True)
class VideoQuestion:
    category: str
    text: str
    answer: str

    @property
    def chance(self) -> float:
        return 1 / 2 if self.category == "first" else 1 / len(ANSWER_SETS[self.category])


def random_clip(rng: random.Random, size: int) -> Clip:
    """Two shapes in distinct colours; the mover's path stays inside the frame and never touches the other shape
    (so no frame hides one behind the other)."""
    colours = tuple(rng.sample(list(COLOURS), 2))
    shapes = (rng.choice(SHAPES), rng.choice(SHAPES))
    extent, step = size // 4, size // 8
    moving, direction = rng.randrange(2), rng.choice(list(DIRECTIONS))
    dx, dy = DIRECTIONS[direction]
    travel = step * (FRAMES - 1)
    while True:
        starts = []
        for index in range(2):
            low, high = 0, size - extent
            x_range, y_range = (low, high), (low, high)
            if index == moving:
                x_range = (low + max(-dx, 0) * travel, high - max(dx, 0) * travel)
                y_range = (low + max(-dy, 0) * travel, high - max(dy, 0) * travel)
            starts.append((rng.randint(*x_range), rng.randint(*y_range)))
        (mx, my), (sx, sy) = starts[moving], starts[1 - moving]
        # The box swept by the mover, against the still shape's box (one pixel of margin).
        x0, x1 = min(mx, mx + dx * travel), max(mx, mx + dx * travel) + extent
        y0, y1 = min(my, my + dy * travel), max(my, my + dy * travel) + extent
        if x1 < sx or sx + extent < x0 or y1 < sy or sy + extent < y0:
            return Clip(shapes, colours, (starts[0], starts[1]), moving, direction)  # type: ignore[arg-type]


def _draw(draw: ImageDraw.ImageDraw, shape: str, colour: str, x0: int, y0: int, extent: int) -> None:
    box = (x0, y0, x0 + extent - 1, y0 + extent - 1)
    fill = COLOURS[colour]
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([(x0 + extent // 2, y0), (x0, y0 + extent - 1), (x0 + extent - 1, y0 + extent - 1)], fill=fill)


def draw_clip(clip: Clip, size: int) -> np.ndarray:
    """``[FRAMES, size, size, 3]`` uint8 frames of ``clip``."""
    extent, step = size // 4, size // 8
    frames = []
    for frame in range(FRAMES):
        image = Image.new("RGB", (size, size), BACKGROUND)
        draw = ImageDraw.Draw(image)
        for index in range(2):
            if index == 1 and frame < SECOND_APPEARS:
                continue
            x0, y0 = clip.starts[index]
            if index == clip.moving:
                moved = frame if index == 0 else frame - SECOND_APPEARS
                dx, dy = DIRECTIONS[clip.direction]
                x0, y0 = x0 + dx * step * moved, y0 + dy * step * moved
            _draw(draw, clip.shapes[index], clip.colours[index], x0, y0, extent)
        frames.append(np.asarray(image))
    return np.stack(frames)


def clip_questions(clip: Clip, rng: random.Random) -> list[VideoQuestion]:
    """One question of every type, in random order."""
    pair = list(clip.colours)
    rng.shuffle(pair)
    questions = [
        VideoQuestion("direction", f"Which way does the {clip.colours[clip.moving]} shape move?", clip.direction),
        VideoQuestion("first", f"Which colour appears first, {pair[0]} or {pair[1]}?", clip.colours[0]),
        VideoQuestion("mover", "What colour is the moving shape?", clip.colours[clip.moving]),
    ]
    rng.shuffle(questions)
    return questions


def video_corpus(conv_mode: str) -> list[str]:
    """Sentences covering every word of the video prompts and answers (for the tiny tokenizer)."""
    rng = random.Random(0)
    system = conv_templates[conv_mode].system
    for token in conv_templates[conv_mode].required_tokens:
        system = system.replace(token, " ")
    texts = [system, "Describe the video."]
    for _ in range(200):
        clip = random_clip(rng, 64)
        texts.append(clip.caption())
        texts.extend(f"USER: {q.text}{SUFFIX} ASSISTANT: {q.answer}" for q in clip_questions(clip, rng))
    return texts


def write_video_dataset(
    root: str | Path, *, train_clips: int, test_questions: int, turns_per_clip: int = 3, size: int = 64, seed: int = 0
) -> DatasetFiles:
    """Write the clips, the training files and the held-out questions (see the module docstring).

    Returns:
        :class:`~llava.quickstart.scenes.DatasetFiles` whose ``images`` is the videos folder.
    """
    if train_clips < 1 or test_questions < 1:
        raise ValueError(f"need at least one training clip and one test question, got {train_clips} and {test_questions}")
    root = Path(root)
    videos = root / "videos"
    videos.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pretrain, finetune = [], []
    for index in tqdm(range(train_clips), desc="training clips"):
        clip = random_clip(rng, size)
        path = write_video(videos / f"train_{index:05d}.mp4", draw_clip(clip, size), fps=1)
        pretrain.append({"id": f"cap{index}", "video": str(Path(path).resolve()), "conversations": [
            {"from": "human", "value": "<image>\nDescribe the video."}, {"from": "gpt", "value": clip.caption()}]})
        finetune.append({"id": f"qa{index}", "video": str(Path(path).resolve()),
                         "conversations": conversation(clip_questions(clip, rng)[:turns_per_clip])})
    test_rng = random.Random(seed + 1_000_003)
    categories = list(ANSWER_SETS)
    questions, gold = [], []
    for index in tqdm(range(test_questions), desc="held-out clips"):
        clip = random_clip(test_rng, size)
        name = f"test_{index:05d}.mp4"
        write_video(videos / name, draw_clip(clip, size), fps=1)
        wanted = categories[index % len(categories)]
        question = next(q for q in clip_questions(clip, test_rng) if q.category == wanted)
        questions.append({"question_id": index, "video": name, "text": question.text + SUFFIX, "category": question.category})
        gold.append({"question_id": index, "answer": question.answer, "category": question.category, "chance": question.chance})
    return save_dataset(root, videos, pretrain, finetune, questions, gold)


def video_answer_flags(checkpoint: Path, data: DatasetFiles, answers: Path, conv_mode: str) -> list[str]:
    """``llava.eval.model_vqa_video`` on the held-out clips: every frame (:data:`FRAMES`), greedy, batched."""
    return [
        "--model-path", str(checkpoint), "--question-file", str(data.questions), "--video-folder", str(data.images),
        "--answers-file", str(answers), "--temperature", "0", "--conv-mode", conv_mode, "--max_new_tokens", "4",
        "--batch-size", "16", "--device", "cpu", "--overwrite", "--frames-upbound", str(FRAMES),
    ]


def video_prefill_flops(checkpoint_dir: str | Path, prompt_tokens: int) -> dict[str, Any]:
    """Analytic FLOPs of one clip's prefill through a saved checkpoint: :data:`FRAMES` frames, counted by the cost
    engine (:func:`llava.cost.pipeline.checkpoint_prefill_flops` with ``frames``; the rule is :mod:`llava.cost.video`).
    """
    from llava.cost.pipeline import checkpoint_prefill_flops

    return checkpoint_prefill_flops(checkpoint_dir, prompt_tokens, frames=FRAMES)


__all__ = [
    "ANSWER_SETS", "FRAMES", "Clip", "VideoQuestion", "clip_questions", "draw_clip", "random_clip", "video_answer_flags",
    "video_corpus", "video_prefill_flops", "write_video_dataset",
]
