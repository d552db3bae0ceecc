"""Every benchmark's files in upstream's real format, 2-4 questions each, laid out as ``scripts/v1_5/eval/*.sh``
read them (``<root>/playground/data/eval/...``; the layout of upstream LLaVA's ``eval.zip`` and of each benchmark's
own release).

The formats follow upstream's files line for line (checked against upstream LLaVA's ``playground/data/eval`` at
commit 32cebc3 and its converters): MME asks two questions per image and uses the image path as ``question_id``;
TextVQA uses the image id as ``question_id``, so one id can carry several questions; POPE's labels are three JSONL
files; ScienceQA is LLaVA's training-format JSON list with text-only entries; MMBench is a TSV with base64 images;
SEED-Bench's annotation is ``SEED-Bench.json``; Q-Bench's Chinese dev file is ``质衡-问答-验证集.json``.

:func:`build` writes one benchmark and returns what the test needs to compute expected scores on its own.
"""

from __future__ import annotations

import base64
import json
from io import BytesIO
from pathlib import Path
from typing import Any

from PIL import Image

SHORT = "\nAnswer the question using a single word or phrase."
LETTER = "\nAnswer with the option's letter from the given choices directly."
MME_SUFFIX = " Please answer yes or no."


def _image(path: Path, size: tuple[int, int] = (40, 30), colour: tuple[int, int, int] = (200, 60, 40)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", size, colour)
    image.paste((250, 250, 250), (2, 2, 2 + size[0] // 3, 2 + size[1] // 3))
    image.save(path)
    return path


def _b64(size: tuple[int, int], colour: tuple[int, int, int]) -> str:
    buffer = BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records), encoding="utf-8")
    return path


def _json(path: Path, payload: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def mme(eval_dir: Path) -> dict[str, Any]:
    """MME: a flat category (image and ``.txt`` side by side) and one with ``images/`` + ``questions_answers_YN/``;
    two questions per image under one id; one ``.txt`` with the double space some MME files have."""
    root = eval_dir / "MME"
    bench = root / "MME_Benchmark_release_version"
    truth = {  # (question id, question as in the .txt) -> answer
        ("code_reasoning/0020.png", "Is a python code shown in the picture?" + MME_SUFFIX): "Yes",
        ("code_reasoning/0020.png", "Is a c++ code shown in the picture?" + MME_SUFFIX): "No",
        ("artwork/images/14777.jpg", "Does this artwork belong to the type of religious? " + MME_SUFFIX): "Yes",
        ("artwork/images/14777.jpg", "Does this artwork belong to the type of historical? " + MME_SUFFIX): "No",
    }
    _image(bench / "code_reasoning" / "0020.png")
    (bench / "code_reasoning" / "0020.txt").write_text(
        "".join(f"{q}\t{a}\n" for (qid, q), a in truth.items() if qid.startswith("code")), encoding="utf-8")
    _image(bench / "artwork" / "images" / "14777.jpg", (30, 44))
    (bench / "artwork" / "questions_answers_YN").mkdir(parents=True)
    (bench / "artwork" / "questions_answers_YN" / "14777.txt").write_text(
        "".join(f"{q}\t{a}\n" for (qid, q), a in truth.items() if qid.startswith("art")), encoding="utf-8")
    questions = [{"question_id": qid, "image": qid, "text": q.replace(MME_SUFFIX, "").strip() + SHORT, "category": qid.split("/")[0]}
                 for qid, q in truth]
    _jsonl(root / "llava_mme.jsonl", questions)
    return {"truth": truth, "questions": questions}


MMBENCH_COLUMNS = ["index", "question", "hint", "A", "B", "C", "D", "answer", "category", "image", "source", "l2-category",
                   "comment", "split"]


def mmbench(eval_dir: Path, cn: bool = False) -> dict[str, Any]:
    """An MMBench dev TSV (EN or CN): options A-D (a row with two), a hint, base64 images, the answer column."""
    rows = [
        [241, "Which colour dominates?", "nan", "red", "green", "blue", "yellow", "A", "color", _b64((40, 30), (220, 30, 30))],
        [252, "Is there a square?", "Look closely.", "yes", "no", "nan", "nan", "A", "shape", _b64((24, 48), (20, 40, 230))],
        [1000241, "What shape is white?", "nan", "square", "circle", "line", "nan", "A", "shape", _b64((32, 32), (30, 200, 60))],
    ]
    if cn:
        rows[0][1], rows[1][1] = "图中主要是什么颜色？", "有正方形吗？"
    folder, split = ("mmbench_cn", "mmbench_dev_cn_20231003") if cn else ("mmbench", "mmbench_dev_20230712")
    path = eval_dir / folder / f"{split}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join(MMBENCH_COLUMNS)] + ["\t".join(map(str, row + ["src", "l2", "nan", "dev"])) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"table": path, "split": split, "folder": folder, "rows": rows}


def seed(eval_dir: Path) -> dict[str, Any]:
    """SEED-Bench: an image and a video-frame question (integer ids in the JSONL, strings in SEED-Bench.json)."""
    root = eval_dir / "seed_bench"
    _image(root / "SEED-Bench-image" / "1454426_2591111986.jpg")
    _image(root / "SEED-Bench-video-image" / "10_96553.png", (44, 30))
    questions = [
        {"image": "SEED-Bench-image/1454426_2591111986.jpg", "text": "How many towels are in the image?\nA. One\nB. Two\nC. Three\nD. Four" + LETTER,
         "category": "Instances Counting", "question_id": 101669},
        {"image": "SEED-Bench-video-image/10_96553.png", "text": "What is the action?\nA. Running\nB. Sitting\nC. Jumping\nD. Eating" + LETTER,
         "category": "Action Recognition", "question_id": 3001},
    ]
    _jsonl(root / "llava-seed-bench.jsonl", questions)
    annotation = {
        "question_type": {"Instances Counting": 5, "Action Recognition": 11},
        "questions": [
            {"answer": "B", "choice_a": "One", "choice_b": "Two", "choice_c": "Three", "choice_d": "Four",
             "data_id": "1454426_2591111986.jpg", "data_type": "image", "question": "How many towels are in the image?",
             "question_id": "101669", "question_type_id": 5},
            {"answer": "A", "choice_a": "Running", "choice_b": "Sitting", "choice_c": "Jumping", "choice_d": "Eating",
             "data_id": "96553.webm", "data_type": "video", "question": "What is the action?", "question_id": "3001",
             "question_type_id": 11},
        ],
    }
    _json(root / "SEED-Bench.json", annotation)
    return {"annotation": annotation}


def gqa(eval_dir: Path) -> dict[str, Any]:
    """GQA testdev-balanced: string ids, images under data/images, GQA's question dictionary."""
    root = eval_dir / "gqa"
    questions = [
        {"question_id": "201307251", "image": "n161313.jpg", "text": "Is it overcast?" + SHORT, "category": "default"},
        {"question_id": "201640614", "image": "n235859.jpg", "text": "Who is wearing the dress?" + SHORT, "category": "default"},
        {"question_id": "202225914", "image": "n161313.jpg", "text": "Does the utensil look clean?" + SHORT, "category": "default"},
    ]
    _jsonl(root / "llava_gqa_testdev_balanced.jsonl", questions)
    for name in ("n161313.jpg", "n235859.jpg"):
        _image(root / "data" / "images" / name)
    truth = {"201307251": ("no", "verify"), "201640614": ("woman", "query"), "202225914": ("yes", "verify")}
    _json(root / "data" / "testdev_balanced_questions.json", {
        qid: {"answer": answer, "fullAnswer": answer, "isBalanced": True, "imageId": "n161313", "question": "q",
              "types": {"structural": structural, "semantic": "attr", "detailed": "x"}}
        for qid, (answer, structural) in truth.items()})
    return {"truth": truth}


def pope(eval_dir: Path) -> dict[str, Any]:
    """POPE: three splits of two questions each, labels in coco/coco_pope_<split>.json (JSONL)."""
    root = eval_dir / "pope"
    image = "COCO_val2014_000000310196.jpg"
    _image(root / "val2014" / image)
    labels = {"adversarial": ["yes", "no"], "popular": ["no", "yes"], "random": ["yes", "yes"]}
    questions, objects = [], ["snowboard", "backpack"]
    for split, split_labels in labels.items():
        lines = []
        for index, label in enumerate(split_labels):
            qid = len(questions) + 1
            text = f"Is there a {objects[index]} in the image?"
            questions.append({"question_id": qid, "image": image, "text": text + SHORT, "category": split})
            lines.append({"question_id": index + 1, "image": image, "text": text, "label": label})
        _jsonl(root / "coco" / f"coco_pope_{split}.json", lines)
    _jsonl(root / "llava_pope_test.jsonl", questions)
    return {"labels": labels, "questions": questions}


def textvqa(eval_dir: Path) -> dict[str, Any]:
    """TextVQA val: the image id is the question id, and this image carries two questions."""
    root = eval_dir / "textvqa"
    _image(root / "train_images" / "003a8ae2ef43b901.jpg")
    _image(root / "train_images" / "b9dc400eb20bad64.jpg", (30, 40))
    questions = [
        {"question_id": "003a8ae2ef43b901", "image": "003a8ae2ef43b901.jpg",
         "text": "What is the brand of this camera?\nReference OCR token: DAKOTA, DIGITAL" + SHORT, "category": "default"},
        {"question_id": "003a8ae2ef43b901", "image": "003a8ae2ef43b901.jpg",
         "text": "What colour is the camera?\nReference OCR token: DAKOTA, DIGITAL" + SHORT, "category": "default"},
        {"question_id": "b9dc400eb20bad64", "image": "b9dc400eb20bad64.jpg",
         "text": "What does the small white text spell?\nReference OCR token: COPENHAGEN" + SHORT, "category": "default"},
    ]
    _jsonl(root / "llava_textvqa_val_v051_ocr.jsonl", questions)
    data = [
        {"image_id": "003a8ae2ef43b901", "question": "what is the brand of this camera?", "question_id": 34602, "answers": ["dakota"] * 10},
        {"image_id": "003a8ae2ef43b901", "question": "what colour is the camera?", "question_id": 34603, "answers": ["black"] * 10},
        {"image_id": "b9dc400eb20bad64", "question": "what does the small white text spell?", "question_id": 34604,
         "answers": ["copenhagen"] * 10},
    ]
    _json(root / "TextVQA_0.5.1_val.json", {"dataset_type": "val", "dataset_name": "textvqa", "dataset_version": "0.5.1", "data": data})
    return {"data": data}


def vizwiz(eval_dir: Path) -> dict[str, Any]:
    root = eval_dir / "vizwiz"
    suffix = "\nWhen the provided information is insufficient, respond with 'Unanswerable'." + SHORT
    questions = [{"question_id": index, "image": f"VizWiz_test_0000000{index}.jpg", "text": text + suffix, "category": "default"}
                 for index, text in enumerate(["What is this?", "What colour is it?"])]
    for question in questions:
        _image(root / "test" / question["image"])
    _jsonl(root / "llava_test.jsonl", questions)
    return {"questions": questions}


def vqav2(eval_dir: Path) -> dict[str, Any]:
    """VQAv2: test-dev questions answered, the full test2015 file (one more question) for the upload."""
    root = eval_dir / "vqav2"
    image = "COCO_test2015_000000262144.jpg"
    _image(root / "test2015" / image)
    dev = [{"question_id": 262144000 + index, "image": image, "text": text + SHORT, "category": "default"}
           for index, text in enumerate(["Is the ball flying towards the batter?", "What is the man holding?"])]
    _jsonl(root / "llava_vqav2_mscoco_test-dev2015.jsonl", dev)
    full = dev + [{"question_id": 262144005, "image": image, "text": "Is it sunny?" + SHORT, "category": "default"}]
    _jsonl(root / "llava_vqav2_mscoco_test2015.jsonl", full)
    return {"dev": dev, "full": full}


def scienceqa(eval_dir: Path) -> dict[str, Any]:
    """ScienceQA test: LLaVA's training-format list (a text-only entry first, as upstream's file starts),
    ScienceQA's problems.json and pid_splits.json."""
    root = eval_dir / "scienceqa"
    entries = [
        {"id": "4", "conversations": [{"from": "human", "value": "Which figure of speech is used in this text?\nSing, O goddess.\nA. chiasmus\nB. apostrophe"},
                                      {"from": "gpt", "value": "B"}]},
        {"id": "5", "image": "5/image.png", "conversations": [
            {"from": "human", "value": "<image>\nContext: A parachute.\nWhich is the best vent size?\nA. 1 m\nB. 2 m"},
            {"from": "gpt", "value": "A"}]},
        {"id": "7", "image": "7/image.png", "conversations": [
            {"from": "human", "value": "<image>\nContext: N/A\nWhich colour is shown?\nA. red\nB. green\nC. blue"},
            {"from": "gpt", "value": "A"}]},
    ]
    _json(root / "llava_test_CQM-A.json", entries)
    _image(root / "images" / "test" / "5" / "image.png")
    _image(root / "images" / "test" / "7" / "image.png", (30, 30), (220, 20, 20))
    problems = {
        "4": {"question": "Which figure of speech?", "choices": ["chiasmus", "apostrophe"], "answer": 1, "hint": "Sing",
              "image": None, "subject": "language science", "grade": "grade8", "split": "test"},
        "5": {"question": "Best vent size?", "choices": ["1 m", "2 m"], "answer": 0, "hint": "A parachute.", "image": "image.png",
              "subject": "natural science", "grade": "grade5", "split": "test"},
        "7": {"question": "Which colour?", "choices": ["red", "green", "blue"], "answer": 0, "hint": "", "image": "image.png",
              "subject": "natural science", "grade": "grade2", "split": "test"},
        "9": {"question": "train only", "choices": ["a", "b"], "answer": 0, "hint": "", "image": None,
              "subject": "social science", "grade": "grade1", "split": "train"},
    }
    _json(root / "problems.json", problems)
    _json(root / "pid_splits.json", {"train": ["9"], "val": [], "test": ["4", "5", "7"]})
    return {"problems": problems, "test": ["4", "5", "7"]}


def mmvet(eval_dir: Path) -> dict[str, Any]:
    root = eval_dir / "mm-vet"
    questions = [{"image": "v1_0.png", "text": "What is x in the equation?", "category": "conv", "question_id": 0},
                 {"image": "v1_1.png", "text": "What is d in the last equation?", "category": "conv", "question_id": 1}]
    for question in questions:
        _image(root / "images" / question["image"])
    _jsonl(root / "llava-mm-vet.jsonl", questions)
    return {"questions": questions}


def llavabench(eval_dir: Path) -> dict[str, Any]:
    root = eval_dir / "llava-bench-in-the-wild"
    questions = [{"image": "001.jpg", "text": "What is the name of this famous sight in the photo?", "category": "conv", "question_id": 0},
                 {"image": "001.jpg", "text": "Describe this photo in detail.", "category": "detail", "question_id": 1}]
    _image(root / "images" / "001.jpg")
    _jsonl(root / "questions.jsonl", questions)
    _jsonl(root / "context.jsonl", [{"id": "001", "image": "001.jpg", "caption": "A famous tower."}])
    _jsonl(root / "answers_gpt4.jsonl", [{"question_id": q["question_id"], "prompt": q["text"], "text": "An answer.",
                                          "answer_id": "x", "model_id": "gpt-4-0314", "metadata": {}} for q in questions])
    return {"questions": questions}


QBENCH_RECORDS = [
    {"img_path": "00079.jpg", "question": "Is this image clear?", "candidates": ["Yes", "No"], "correct_ans": "No",
     "type": 0, "concern": 0},
    {"img_path": "00080.jpg", "question": "How is the lighting?", "candidates": ["Bright", "Dark", "Normal"],
     "correct_ans": "Dark", "type": 1, "concern": 1},
]


def qbench(eval_dir: Path, zh: bool = False) -> dict[str, Any]:
    """Q-Bench LLVisionQA dev: upstream's English file name, or its Chinese one (质衡-问答-验证集.json)."""
    root = eval_dir / "qbench"
    for record in QBENCH_RECORDS:
        _image(root / "images_llvisionqa" / record["img_path"])
    name = "质衡-问答-验证集.json" if zh else "llvisionqa_dev.json"
    _json(root / name, QBENCH_RECORDS)
    return {"records": QBENCH_RECORDS, "file": root / name}


BUILDERS = {
    "mme.sh": mme, "mmbench.sh": mmbench, "mmbench_cn.sh": lambda d: mmbench(d, cn=True), "seed.sh": seed, "gqa.sh": gqa,
    "pope.sh": pope, "textvqa.sh": textvqa, "vizwiz.sh": vizwiz, "vqav2.sh": vqav2, "sqa.sh": scienceqa, "mmvet.sh": mmvet,
    "llavabench.sh": llavabench, "qbench.sh": qbench, "qbench_zh.sh": lambda d: qbench(d, zh=True),
}


def build(root: Path, script: str, scripts_dir: Path) -> dict[str, Any]:
    """Lay out ``root`` as the repository root a script runs from: ``scripts/`` (linked) and the benchmark's data."""
    (root / "scripts").symlink_to(scripts_dir)
    return BUILDERS[script](root / "playground" / "data" / "eval")
