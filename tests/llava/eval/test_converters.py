"""Submission converters (VQAv2, VizWiz, SEED, MM-Vet, MMBench), the local MMBench score and LLaVA-Bench."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from io import BytesIO
from pathlib import Path

import pytest
from PIL import Image

from llava.eval import convert, eval_mmbench, summarize_gpt_review

from .test_scorers import answer, write_json, write_jsonl

REPO = Path(__file__).resolve().parents[3]


def test_vqav2(tmp_path: Path) -> None:
    root = tmp_path / "vqav2"
    write_jsonl(root / "llava_vqav2_mscoco_test2015.jsonl", [{"question_id": i, "image": f"{i}.jpg", "text": "q"} for i in (1, 2, 3)])
    merge = root / "answers" / "test-dev" / "ckpt" / "merge.jsonl"
    write_jsonl(merge, [answer(1, "Two dogs."), answer(3, "Yes")])
    with merge.open("a") as handle:
        handle.write('{"question_id": 2, "te')  # a broken line is counted, not fatal (as upstream)
    upload = convert.vqav2_main(["--dir", str(root), "--split", "test-dev", "--ckpt", "ckpt"])
    expected = [{"question_id": 1, "answer": "2 dogs"}, {"question_id": 2, "answer": ""}, {"question_id": 3, "answer": "yes"}]
    assert upload == expected
    assert json.loads((root / "answers_upload" / "test-dev" / "ckpt.json").read_text()) == expected


def test_vizwiz(tmp_path: Path) -> None:
    questions = write_jsonl(tmp_path / "llava_test.jsonl", [{"question_id": i, "image": f"VizWiz_{i}.jpg", "text": "q"} for i in (0, 1)])
    results = write_jsonl(tmp_path / "answers.jsonl", [answer(1, "Unanswerable."), answer(0, "The Red can")])
    out = tmp_path / "upload" / "m.json"
    convert.vizwiz_main(["--annotation-file", str(questions), "--result-file", str(results), "--result-upload-file", str(out)])
    assert json.loads(out.read_text()) == [{"image": "VizWiz_0.jpg", "answer": "red can"}, {"image": "VizWiz_1.jpg", "answer": "unanswerable"}]
    write_jsonl(results, [answer(1, "x")])
    with pytest.raises(ValueError, match="1 questions have no answer"):
        convert.convert_vizwiz(questions, results, out)


def test_seed(tmp_path: Path) -> None:
    annotation = {
        "question_type": {"Scene Understanding": 1, "Action Recognition": 2},
        "questions": [
            {"question_id": "101", "question_type_id": 1, "data_type": "image", "answer": "A"},
            {"question_id": "102", "question_type_id": 1, "data_type": "image", "answer": "B"},
            {"question_id": "103", "question_type_id": 2, "data_type": "video", "answer": "C"},
            {"question_id": "104", "question_type_id": 2, "data_type": "video", "answer": "D"},
        ],
    }
    write_json(tmp_path / "SEED-Bench.json", annotation)
    # ids written as integers by the loader are found too; "B." is not an exact letter match
    results = write_jsonl(tmp_path / "merge.jsonl", [answer(101, "A"), answer(102, "B."), answer("103", "C"), answer(104, "A")])
    out = tmp_path / "upload.jsonl"
    scores = convert.seed_main(["--annotation-file", str(tmp_path / "SEED-Bench.json"), "--result-file", str(results), "--result-upload-file", str(out)])
    assert scores["all"]["types"] == {"Scene Understanding": 50.0, "Action Recognition": 50.0}
    assert scores["all"]["total"] == 50.0
    assert scores["image"]["total"] == 50.0 and scores["video"]["total"] == 50.0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0] == {"question_id": "101", "prediction": "A"} and len(lines) == 4


def test_mmvet(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "answers.jsonl", [answer(0, "A cat."), answer(17, "42")])
    dst = tmp_path / "results" / "m.json"
    convert.mmvet_main(["--src", str(src), "--dst", str(dst)])
    assert json.loads(dst.read_text()) == {"v1_0": "A cat.", "v1_17": "42"}


def _png_b64() -> str:
    buffer = BytesIO()
    Image.new("RGB", (4, 4), (255, 0, 0)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


MMBENCH_HEADER = ["index", "question", "hint", "A", "B", "C", "D", "answer", "category", "image", "source", "l2-category", "comment", "split"]


@pytest.fixture
def mmbench_tsv(tmp_path: Path) -> Path:
    image = _png_b64()
    rows = [
        [0, "What colour?", "nan", "red", "green", "blue", "", "B", "color", image, "src", "l2", "nan", "dev"],
        [1, "Which shape?", "A hint", "circle", "square", "", "", "A", "shape", image, "src", "l2", "nan", "dev"],
    ]
    path = tmp_path / "mmbench_dev.tsv"
    path.write_text("\n".join("\t".join(str(cell) for cell in row) for row in [MMBENCH_HEADER, *rows]) + "\n")
    return path


def _mm_answer(index: int, round_id: int, text: str, options: list[str]) -> dict:
    letters = ["A", "B", "C", "D"][: len(options)]
    return {**answer(index, text), "round_id": round_id, "options": options, "option_char": letters}


def test_mmbench_local_accuracy(tmp_path: Path, mmbench_tsv: Path) -> None:
    answers = [
        # question 0 (answer "green"), three rounds with rotated options: every round names "green"
        _mm_answer(0, 0, "B", ["red", "green", "blue"]),
        _mm_answer(0, 1, "A", ["green", "blue", "red"]),
        _mm_answer(0, 2, "(C)", ["blue", "red", "green"]),
        # question 1 (answer "circle"): round 0 right, round 1 names "square" -> the question is wrong
        _mm_answer(1, 0, "A. circle", ["circle", "square"]),
        _mm_answer(1, 1, "A", ["square", "circle"]),
    ]
    results = write_jsonl(tmp_path / "answers.jsonl", answers)
    record = eval_mmbench.main(["--annotation-file", str(mmbench_tsv), "--result-file", str(results), "--output-json", str(tmp_path / "mmbench.json")])
    assert record["score"] == pytest.approx(50.0)
    assert record["questions"] == 2 and record["rounds"] == 5
    assert eval_mmbench.extract_choice("green", ["red", "green"]) == 1
    assert eval_mmbench.extract_choice("A dog", ["cat", "dog"]) is None


def test_mmbench_submission(tmp_path: Path, mmbench_tsv: Path) -> None:
    import pandas

    result_dir = tmp_path / "answers"
    write_jsonl(result_dir / "exp.jsonl", [_mm_answer(0, 0, "B", ["red", "green", "blue"]), _mm_answer(1, 0, "A", ["circle", "square"])])
    target = convert.mmbench_main(["--annotation-file", str(mmbench_tsv), "--result-dir", str(result_dir), "--upload-dir", str(tmp_path / "upload"), "--experiment", "exp"])
    table = pandas.read_excel(target, engine="openpyxl")
    assert list(table.columns) == ["index", "question", "A", "B", "C", "D", "prediction", "answer", "split"]
    assert list(table["prediction"]) == ["B", "A"]


def test_summarize_gpt_review(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reviews = [
        {"question_id": 0, "category": "conv", "tuple": [8, 6]},
        {"question_id": 1, "category": "conv", "tuple": [10, 9]},
        {"question_id": 2, "category": "detail", "tuple": [7, 7]},
    ]
    path = write_jsonl(tmp_path / "review_m.jsonl", reviews)
    result = summarize_gpt_review.main(["-f", str(path)])
    # conv: means 9.0 / 7.5 -> 83.3, 90.0, 75.0; detail: 100.0, 70.0, 70.0; all: 8.333 / 7.333 -> 88.0
    assert result["review_m"] == {"all": (88.0, 83.3, 73.3), "conv": (83.3, 90.0, 75.0), "detail": (100.0, 70.0, 70.0)}
    assert "conv 83.3 90.0 75.0" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("script", "argv_builder"),
    [
        ("convert_gqa_for_eval.py", lambda src, tmp: ["--src", str(src), "--dst", str(tmp / "gqa.json")]),
        ("convert_mmvet_for_eval.py", lambda src, tmp: ["--src", str(src), "--dst", str(tmp / "mmvet.json")]),
    ],
)
def test_scripts_are_thin_entry_points(tmp_path: Path, script: str, argv_builder) -> None:
    src = write_jsonl(tmp_path / "answers.jsonl", [answer("q1", "Dog.")])
    subprocess.run([sys.executable, str(REPO / "scripts" / script), *argv_builder(src, tmp_path)], check=True, cwd=tmp_path)
    produced = json.loads((tmp_path / ("gqa.json" if "gqa" in script else "mmvet.json")).read_text())
    assert produced == ([{"questionId": "q1", "prediction": "dog"}] if "gqa" in script else {"v1_q1": "Dog."})


def test_summarize_gpt_review_select_and_version(tmp_path: Path) -> None:
    folder = tmp_path / "reviews"
    for name, pair in [("m-13b_0613.jsonl", [8, 4]), ("m-13b.jsonl", [8, 6]), ("m-7b_0613.jsonl", [8, 8])]:
        write_jsonl(folder / name, [{"question_id": 0, "category": "conv", "tuple": pair}])
    # a folder named *review*: every .jsonl counts; -s keeps names containing every string, -v the judge version
    assert set(summarize_gpt_review.main(["-d", str(folder)])) == {"m-13b_0613", "m-13b", "m-7b_0613"}
    assert set(summarize_gpt_review.main(["-d", str(folder), "-s", "13b"])) == {"m-13b_0613", "m-13b"}
    assert set(summarize_gpt_review.main(["-d", str(folder), "-s", "13b", "-v", "0613"])) == {"m-13b_0613"}
    only = summarize_gpt_review.main(["-d", str(folder), "-v", "0314"])
    assert only == {"m-13b": {"all": (75.0, 80.0, 60.0), "conv": (75.0, 80.0, 60.0)}}
