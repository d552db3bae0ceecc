"""Synthetic scenes with known answers: coloured shapes in the quadrants of a small image.

A scene holds one to three objects, each a circle, square or triangle in a distinct colour, placed (with
jitter) in distinct quadrants. Every question is answered from the scene description, and most need to know
*where* things are: the colour of the shape in a given quadrant, the side or row of a given colour, the
shape of a given colour, or how many shapes there are.

Files written (upstream LLaVA formats):

- ``images/*.png``;
- ``pretrain.json``: stage-1 captions (``<image>`` turn, then "a red circle at the top left, ...");
- ``finetune.json``: stage-2 conversations, several question/answer turns per image;
- ``questions.jsonl``: held-out questions for ``llava.eval.model_vqa_loader`` (``question_id``, ``image``,
  ``text``, ``category``) on scenes never trained on, and ``answers_gold.jsonl`` with their answers.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw
from tqdm import tqdm

from llava.conversation import conv_templates

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 70, 220),
    "yellow": (230, 200, 30),
}
SHAPES = ("circle", "square", "triangle")
ROWS = ("top", "bottom")
SIDES = ("left", "right")
QUADRANTS = tuple((row, side) for row in ROWS for side in SIDES)
COUNT_WORDS = ("one", "two", "three")
BACKGROUND = (235, 235, 235)
SUFFIX = "\nAnswer the question using a single word or phrase."

#: Question type → the answers it can have (the chance level of a type is one over their number).
ANSWER_SETS: dict[str, tuple[str, ...]] = {
    "colour_at": tuple(COLOURS),
    "shape_of": SHAPES,
    "side_of": SIDES,
    "row_of": ROWS,
    "count": COUNT_WORDS,
}


@dataclass(frozen=True)
class SceneObject:
    shape: str
    colour: str
    row: str
    side: str

    @property
    def where(self) -> str:
        return f"{self.row} {self.side}"


@dataclass(frozen=True)
class Scene:
    objects: tuple[SceneObject, ...]

    def caption(self) -> str:
        parts = [f"a {o.colour} {o.shape} at the {o.where}" for o in self.objects]
        return ", ".join(parts) + "."


@dataclass(frozen=True)
class Question:
    category: str
    text: str
    answer: str

    @property
    def chance(self) -> float:
        return 1.0 / len(ANSWER_SETS[self.category])


def random_scene(rng: random.Random) -> Scene:
    count = rng.randint(1, 3)
    places = rng.sample(QUADRANTS, count)
    colours = rng.sample(list(COLOURS), count)
    objects = tuple(SceneObject(rng.choice(SHAPES), colour, row, side) for colour, (row, side) in zip(colours, places))
    return Scene(objects)


def draw_scene(scene: Scene, size: int, rng: random.Random) -> Image.Image:
    """Render a scene: each object fills about a third of the side, jittered inside its quadrant."""
    image = Image.new("RGB", (size, size), BACKGROUND)
    draw = ImageDraw.Draw(image)
    half = size // 2
    extent = max(size * 3 // 8, 6)
    for obj in scene.objects:
        slack = half - extent
        x0 = (0 if obj.side == "left" else half) + rng.randint(0, slack)
        y0 = (0 if obj.row == "top" else half) + rng.randint(0, slack)
        box = (x0, y0, x0 + extent - 1, y0 + extent - 1)
        colour = COLOURS[obj.colour]
        if obj.shape == "circle":
            draw.ellipse(box, fill=colour)
        elif obj.shape == "square":
            draw.rectangle(box, fill=colour)
        else:
            draw.polygon([(x0 + extent // 2, y0), (x0, y0 + extent - 1), (x0 + extent - 1, y0 + extent - 1)], fill=colour)
    return image


def scene_questions(scene: Scene, rng: random.Random) -> list[Question]:
    """One question of every type that the scene can answer, in random order."""
    target = rng.choice(scene.objects)
    occupied = rng.choice(scene.objects)
    questions = [
        Question("colour_at", f"What colour is the shape at the {occupied.where}?", occupied.colour),
        Question("shape_of", f"What shape is the {target.colour} object?", target.shape),
        Question("side_of", f"Is the {target.colour} shape on the left or the right?", target.side),
        Question("row_of", f"Is the {target.colour} shape at the top or the bottom?", target.row),
        Question("count", "How many shapes are there?", COUNT_WORDS[len(scene.objects) - 1]),
    ]
    rng.shuffle(questions)
    return questions


def corpus(conv_mode: str = "vicuna_v1") -> list[str]:
    """Sentences covering every word the quickstart's prompts and answers use (for the tiny tokenizer).

    ``conv_mode``'s system prompt is included, without the special tokens a tokenizer adds on its own (ChatML's
    ``<|im_start|>``, ``<|im_end|>``), so that they never become learned pieces.
    """
    rng = random.Random(0)
    system = conv_templates[conv_mode].system
    for token in conv_templates[conv_mode].required_tokens:
        system = system.replace(token, " ")
    texts = [system, "Describe the image."]
    for _ in range(200):
        scene = random_scene(rng)
        texts.append(scene.caption())
        texts.extend(f"USER: {q.text}{SUFFIX} ASSISTANT: {q.answer}" for q in scene_questions(scene, rng))
    return texts


@dataclass(frozen=True)
class DatasetFiles:
    root: Path
    images: Path
    pretrain: Path
    finetune: Path
    questions: Path
    gold: Path


def conversation(questions: Sequence[Any]) -> list[dict[str, str]]:
    """A training conversation asking ``questions`` (anything with ``text`` and ``answer``), the first with the marker."""
    turns = []
    for index, question in enumerate(questions):
        text = question.text + SUFFIX
        turns.append({"from": "human", "value": ("<image>\n" + text) if index == 0 else text})
        turns.append({"from": "gpt", "value": question.answer})
    return turns


def write_dataset(
    root: str | Path, *, train_scenes: int, test_questions: int, turns_per_scene: int = 3, image_size: int = 64, seed: int = 0
) -> DatasetFiles:
    """Generate the training files and the held-out question file (see the module docstring).

    Args:
        root: Output folder.
        train_scenes: Scenes for training (each gives a caption and a conversation).
        test_questions: Held-out questions, one per held-out scene, cycling through the question types.
        turns_per_scene: Question/answer turns per training conversation.
        image_size: Image side in pixels.
        seed: Random seed; the held-out scenes use a separate stream.
    """
    if train_scenes < 1 or test_questions < 1:
        raise ValueError(f"need at least one training scene and one test question, got {train_scenes} and {test_questions}")
    root = Path(root)
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pretrain, finetune = [], []
    for index in tqdm(range(train_scenes), desc="training scenes"):
        scene = random_scene(rng)
        name = f"train_{index:05d}.png"
        draw_scene(scene, image_size, rng).save(images / name)
        pretrain.append({"id": f"cap{index}", "image": name, "conversations": [
            {"from": "human", "value": "<image>\nDescribe the image."}, {"from": "gpt", "value": scene.caption()}]})
        finetune.append({"id": f"qa{index}", "image": name,
                         "conversations": conversation(scene_questions(scene, rng)[:turns_per_scene])})
    test_rng = random.Random(seed + 1_000_003)
    categories = list(ANSWER_SETS)
    questions, gold = [], []
    for index in tqdm(range(test_questions), desc="held-out scenes"):
        scene = random_scene(test_rng)
        name = f"test_{index:05d}.png"
        draw_scene(scene, image_size, test_rng).save(images / name)
        wanted = categories[index % len(categories)]
        question = next(q for q in scene_questions(scene, test_rng) if q.category == wanted)
        questions.append({"question_id": index, "image": name, "text": question.text + SUFFIX, "category": question.category})
        gold.append({"question_id": index, "answer": question.answer, "category": question.category, "chance": question.chance})
    return save_dataset(root, images, pretrain, finetune, questions, gold)


def save_dataset(root: Path, media: Path, pretrain: list[dict[str, Any]], finetune: list[dict[str, Any]],
                 questions: list[dict[str, Any]], gold: list[dict[str, Any]]) -> DatasetFiles:
    """Write the two training files, the held-out questions and their answers under ``root`` (media already there)."""
    files = DatasetFiles(root, media, root / "pretrain.json", root / "finetune.json", root / "questions.jsonl", root / "answers_gold.jsonl")
    files.pretrain.write_text(json.dumps(pretrain))
    files.finetune.write_text(json.dumps(finetune))
    files.questions.write_text("".join(json.dumps(q) + "\n" for q in questions))
    files.gold.write_text("".join(json.dumps(g) + "\n" for g in gold))
    return files


__all__ = [
    "ANSWER_SETS",
    "COLOURS",
    "DatasetFiles",
    "Question",
    "Scene",
    "SceneObject",
    "conversation",
    "corpus",
    "draw_scene",
    "random_scene",
    "save_dataset",
    "scene_questions",
    "write_dataset",
]
