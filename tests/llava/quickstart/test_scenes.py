"""Synthetic scenes: drawings, answers and the dataset files the quickstart trains and evaluates on."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from llava.eval.files import read_jsonl
from llava.quickstart.scenes import COLOURS, Scene, SceneObject, draw_scene, scene_questions, write_dataset
from llava.train.preprocess import conversation_template
from llava.train.supervised_data import load_training_records

SIZE = 64
RED, BLUE = COLOURS["red"], COLOURS["blue"]


@pytest.fixture
def scene() -> Scene:
    return Scene((SceneObject("circle", "red", "top", "left"), SceneObject("square", "blue", "bottom", "right")))


def _quadrant_colours(image, row: str, side: str) -> set:
    x0 = 0 if side == "left" else SIZE // 2
    y0 = 0 if row == "top" else SIZE // 2
    return {image.getpixel((x, y)) for x in range(x0, x0 + SIZE // 2) for y in range(y0, y0 + SIZE // 2)}


def test_objects_are_drawn_in_their_quadrant(scene: Scene):
    image = draw_scene(scene, SIZE, random.Random(0))
    assert RED in _quadrant_colours(image, "top", "left") and BLUE not in _quadrant_colours(image, "top", "left")
    assert BLUE in _quadrant_colours(image, "bottom", "right") and RED not in _quadrant_colours(image, "bottom", "right")
    assert _quadrant_colours(image, "top", "right") == {(235, 235, 235)}
    assert _quadrant_colours(image, "bottom", "left") == {(235, 235, 235)}


def test_answers_follow_the_scene(scene: Scene):
    expected_by_object = {"red": ("circle", "left", "top"), "blue": ("square", "right", "bottom")}
    seen = set()
    for seed in range(20):
        for question in scene_questions(scene, random.Random(seed)):
            seen.add(question.category)
            if question.category == "count":
                assert question.answer == "two"
            elif question.category == "colour_at":
                assert question.answer == ("red" if "top left" in question.text else "blue")
                assert ("top left" in question.text) != ("bottom right" in question.text)
            else:
                colour = "red" if " red " in question.text else "blue"
                shape, side, row = expected_by_object[colour]
                assert question.answer == {"shape_of": shape, "side_of": side, "row_of": row}[question.category]
    assert seen == {"colour_at", "shape_of", "side_of", "row_of", "count"}
    assert scene.caption() == "a red circle at the top left, a blue square at the bottom right."


def test_dataset_files_are_valid_llava_inputs(tmp_path: Path):
    files = write_dataset(tmp_path, train_scenes=6, test_questions=10, turns_per_scene=2, image_size=SIZE)
    pretrain, _ = load_training_records(str(files.pretrain), str(files.images), multimodal=True, conv=conversation_template("plain"))
    finetune, _ = load_training_records(str(files.finetune), str(files.images), multimodal=True, conv=conversation_template("v1"))
    assert len(pretrain) == len(finetune) == 6
    assert all(len(record["conversations"]) == 4 for record in finetune)
    questions = read_jsonl(files.questions)
    gold = read_jsonl(files.gold)
    assert [q["question_id"] for q in questions] == [g["question_id"] for g in gold] == list(range(10))
    assert Counter(q["category"] for q in questions) == {"colour_at": 2, "shape_of": 2, "side_of": 2, "row_of": 2, "count": 2}
    train_images = {record["image"] for record in finetune}
    assert not train_images & {q["image"] for q in questions}
    assert all((files.images / q["image"]).is_file() for q in questions)
    assert {g["category"]: g["chance"] for g in gold} == {"colour_at": 0.25, "shape_of": 1 / 3, "side_of": 0.5, "row_of": 0.5, "count": 1 / 3}


def test_dataset_is_reproducible(tmp_path: Path):
    first = write_dataset(tmp_path / "a", train_scenes=3, test_questions=3, image_size=SIZE, seed=4)
    second = write_dataset(tmp_path / "b", train_scenes=3, test_questions=3, image_size=SIZE, seed=4)
    assert json.loads(first.finetune.read_text()) == json.loads(second.finetune.read_text())
    assert first.gold.read_text() == second.gold.read_text()


def test_empty_dataset_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="at least one training scene"):
        write_dataset(tmp_path, train_scenes=0, test_questions=1)
