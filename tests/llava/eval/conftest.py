"""Small benchmark inputs in upstream's exact formats: images, a JSONL question file, a ScienceQA JSON list
and an MMBench TSV with base64 images."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import pytest
from PIL import Image

SUFFIX = "\nAnswer the question using a single word or phrase."

# (name, size, colour): different sizes and aspect ratios, so that padding to square matters.
IMAGES = [
    ("red.png", (40, 30), (220, 30, 30)),
    ("green.jpg", (32, 32), (30, 200, 60)),
    ("blue.png", (24, 48), (20, 40, 230)),
    ("mixed.png", (50, 20), (128, 128, 0)),
]


@dataclass(frozen=True)
class BenchData:
    root: Path
    images: Path
    vqa: Path  # JSONL, model_vqa / model_vqa_loader
    science: Path  # JSON list, model_vqa_science
    mmbench: Path  # TSV, model_vqa_mmbench

    @property
    def vqa_ids(self) -> list:
        return [json.loads(line)["question_id"] for line in self.vqa.read_text().splitlines()]


def _image(size: tuple[int, int], colour: tuple[int, int, int]) -> Image.Image:
    image = Image.new("RGB", size, colour)
    # a white square so the images are not flat
    image.paste((255, 255, 255), (2, 2, 2 + size[0] // 3, 2 + size[1] // 3))
    return image


def image_b64(size: tuple[int, int], colour: tuple[int, int, int]) -> str:
    buffer = BytesIO()
    _image(size, colour).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def write_vqa_questions(path: Path, count: int = 6) -> Path:
    lines = []
    for index in range(count):
        name = IMAGES[index % len(IMAGES)][0]
        # ids as upstream files have them: integers in most files, strings in MME-style files
        question_id = index if index % 2 == 0 else f"q{index}"
        text = ["What colour is the image?", "Is there a square?", "How many squares?"][index % 3] + SUFFIX
        lines.append(json.dumps({"question_id": question_id, "image": name, "text": text, "category": "default"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_science_questions(path: Path) -> Path:
    entries = []
    for index in range(5):
        question = f"Which colour is shown?\nContext: test {index}.\nOptions: (A) red (B) green (C) blue"
        entry = {"id": str(1000 + index), "conversations": [
            {"from": "human", "value": ("<image>\n" if index < 3 else "") + question},
            {"from": "gpt", "value": "A"},
        ]}
        if index < 3:
            entry["image"] = IMAGES[index][0]
        entries.append(entry)
    path.write_text(json.dumps(entries, indent=2))
    return path


MMBENCH_HEADER = ["index", "question", "hint", "A", "B", "C", "D", "answer", "category", "image", "source", "l2-category", "comment", "split"]


def write_mmbench(path: Path) -> Path:
    rows = [
        [10, "What colour dominates?", "nan", "red", "green", "blue", "yellow", "A", "color", image_b64((40, 30), (220, 30, 30))],
        [11, "Is there a square?", "Look closely.", "yes", "no", "", "", "A", "shape", image_b64((24, 48), (20, 40, 230))],
        [12, "What shape is white?", "nan", "square", "circle", "line", "", "A", "shape", image_b64((32, 32), (30, 200, 60))],
        [13, "图中主要是什么颜色？", "nan", "红", "绿", "", "", "B", "color", image_b64((50, 20), (128, 128, 0))],
    ]
    text = "\t".join(MMBENCH_HEADER) + "\n"
    text += "".join("\t".join(str(cell) for cell in row + ["src", "l2", "nan", "dev"]) + "\n" for row in rows)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def bench_data(tmp_path_factory: pytest.TempPathFactory) -> BenchData:
    root = tmp_path_factory.mktemp("bench")
    images = root / "images"
    images.mkdir()
    for name, size, colour in IMAGES:
        _image(size, colour).save(images / name)
    return BenchData(
        root=root,
        images=images,
        vqa=write_vqa_questions(root / "questions.jsonl"),
        science=write_science_questions(root / "llava_test_CQM-A.json"),
        mmbench=write_mmbench(root / "mmbench_dev.tsv"),
    )
