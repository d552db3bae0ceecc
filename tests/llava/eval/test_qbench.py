"""Q-Bench LLVisionQA: the prompt in both languages, the loader on a tiny checkpoint (upstream's flags, resume,
chunks numbered alike, bad inputs), the option-picking rule and the dev-split scores against hand counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from PIL import Image

from llava.eval import core, eval_qbench, model_vqa_qbench

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts" / "v1_5" / "eval"
RECORDS = [
    {"img_path": "blur.png", "question": "Is this image blurry?", "candidates": ["Yes", "No"], "correct_ans": "Yes",
     "type": 0, "concern": 0},
    {"img_path": "dark.png", "question": "How is the lighting?", "candidates": ["Bright", "Dark", "Normal"],
     "correct_ans": "Dark", "type": 1, "concern": 1},
    {"img_path": "blur.png", "question": "What is the clearest part?", "candidates": ["The sky", "The tree", "The road", "None"],
     "correct_ans": "The tree", "type": 2, "concern": 2},
]


def test_decoding_is_greedy_by_default_as_upstream_s_module() -> None:
    assert core.build_parser(model_vqa_qbench.SPEC).parse_args([]).temperature == 0.0


def test_question_text_in_both_languages() -> None:
    record = RECORDS[1]
    assert model_vqa_qbench.question_text(record, "en") == (
        "How is the lighting?\nChoose between one of the options as follows:\nA. Bright\nB. Dark\nC. Normal\n")
    assert model_vqa_qbench.question_text(record, "zh") == "How is the lighting?\n在下列选项中选择一个:\nA. Bright\nB. Dark\nC. Normal\n"


@pytest.fixture(scope="module")
def checkpoint(tiny_llava_checkpoint) -> Path:
    return tiny_llava_checkpoint("braco_c2s5")


@pytest.fixture(scope="module")
def generator(checkpoint: Path) -> core.LlavaGenerator:
    loaded, _ = core.load_generator(str(checkpoint), None, "vicuna_v1", "cpu")
    return loaded


def _data(root: Path, records: list[dict[str, Any]] = RECORDS) -> tuple[Path, Path]:
    images = root / "images_llvisionqa"
    images.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (48, 40), (120, 130, 140)).save(images / "blur.png")
    Image.new("RGB", (40, 52), (10, 12, 20)).save(images / "dark.png")
    questions = root / "llvisionqa_dev.json"
    questions.write_text(json.dumps(records, ensure_ascii=False))
    return questions, images


def _argv(checkpoint: Path, questions: Path, images: Path, answers: Path, *extra: str) -> list[str]:
    return ["--model-path", str(checkpoint), "--image-folder", str(images), "--questions-file", str(questions),
            "--answers-file", str(answers), "--conv-mode", "vicuna_v1", "--max_new_tokens", "5", "--device", "cpu", *extra]


def _run(argv: list[str], generator: core.LlavaGenerator) -> core.RunResult:
    return core.run_loader(model_vqa_qbench.SPEC, argv, generator_factory=lambda args: (generator, "tiny"))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_loader_writes_one_line_per_question_and_resumes(checkpoint: Path, generator: core.LlavaGenerator, tmp_path: Path) -> None:
    questions, images = _data(tmp_path)
    answers = tmp_path / "answers" / "llvisionqa_dev_answers.jsonl"
    model_vqa_qbench.main(_argv(checkpoint, questions, images, answers))  # the real loading path, upstream's flags
    lines = _lines(answers)
    assert [line["question_id"] for line in lines] == [0, 1, 2]
    for line, record in zip(lines, RECORDS):
        assert {key: line[key] for key in record} == record  # the question's own fields come back
        assert line["response"] == line["text"] and isinstance(line["text"], str)
        assert line["prompt"] == model_vqa_qbench.question_text(record, "en")
    answers.write_text(json.dumps(lines[0]) + "\n" + json.dumps(lines[1])[:30])  # killed while writing line 2
    result = _run(_argv(checkpoint, questions, images, answers), generator)
    again = _lines(answers)
    assert result.answered == 2 and [line["question_id"] for line in again] == [0, 1, 2]
    assert again[0]["answer_id"] == lines[0]["answer_id"]


def test_chunks_number_questions_by_file_position(checkpoint: Path, generator: core.LlavaGenerator, tmp_path: Path) -> None:
    questions, images = _data(tmp_path)
    ids = []
    for chunk in (0, 1):
        out = tmp_path / f"2_{chunk}.jsonl"
        _run(_argv(checkpoint, questions, images, out, "--num-chunks", "2", "--chunk-idx", str(chunk)), generator)
        ids += [line["question_id"] for line in _lines(out)]
    assert ids == [0, 1, 2]


def test_chinese_instruction_and_upstream_entry_point(checkpoint: Path, tmp_path: Path) -> None:
    questions, images = _data(tmp_path, RECORDS[:1])
    answers = tmp_path / "zh.jsonl"
    args = SimpleNamespace(model_path=str(checkpoint), model_base=None, image_folder=str(images), questions_file=str(questions),
                           answers_file=str(answers), conv_mode="vicuna_v1", lang="zh", max_new_tokens=3, device="cpu")
    model_vqa_qbench.eval_model(args)  # upstream's args object, with its --questions-file spelling
    [line] = _lines(answers)
    assert line["prompt"] == "Is this image blurry?\n在下列选项中选择一个:\nA. Yes\nB. No\n"


def test_bad_inputs(checkpoint: Path, generator: core.LlavaGenerator, tmp_path: Path) -> None:
    questions, images = _data(tmp_path, [{**RECORDS[0], "candidates": ["Only one"]}])
    with pytest.raises(ValueError, match=r"1st question is malformed \('candidates' must be a list of 2 to 26 options, got \['Only one'\]\)"):
        _run(_argv(checkpoint, questions, images, tmp_path / "a.jsonl"), generator)
    questions, images = _data(tmp_path, [{key: value for key, value in RECORDS[0].items() if key != "img_path"}])
    with pytest.raises(ValueError, match="1st question has no 'img_path' field"):
        _run(_argv(checkpoint, questions, images, tmp_path / "b.jsonl"), generator)
    questions, images = _data(tmp_path, [RECORDS[0], {**RECORDS[1], "img_path": "broken.png"}])
    (images / "broken.png").write_bytes(b"not an image")
    out = tmp_path / "c.jsonl"
    result = _run(_argv(checkpoint, questions, images, out, "--skip-missing"), generator)
    assert result.skipped == [1] and [line["question_id"] for line in _lines(out)] == [0]
    done = subprocess.run([sys.executable, "-m", "llava.eval.model_vqa_qbench", *_argv(checkpoint, questions, images, out, "--lang", "fr")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "invalid choice: 'fr'" in done.stderr


@pytest.mark.parametrize(("reply", "expected"), [
    ("B", 1), ("B.", 1), ("(B)", 1), ("B) Dark", 1), ("B. Dark", 1), ("C: normal", 2), ("  A.", 0),
    ("The lighting is dark.", 1), ("dark", 1), ("Bright and dark", None), ("", None), ("E.", None),
    ("A bright scene", 0),  # not the letter A: the text names "Bright" only
    ("It looks normal to me", 2),
])
def test_chosen_option(reply: str, expected: int | None) -> None:
    assert eval_qbench.chosen_option(reply, ["Bright", "Dark", "Normal"]) == expected


def test_a_candidate_inside_a_longer_one_is_not_named_alone() -> None:
    candidates = ["Yes", "Yes, slightly", "No"]
    assert eval_qbench.chosen_option("Yes, slightly blurred.", candidates) == 1
    assert eval_qbench.chosen_option("Yes.", candidates) == 0
    assert eval_qbench.chosen_option("Yes, slightly, or no", candidates) is None


def test_scores_by_type_and_concern(tmp_path: Path) -> None:
    replies = ["A", "C. Normal", "The tree is clearest", "No"]  # right, wrong, right, wrong
    records = RECORDS + [{**RECORDS[0], "img_path": "x.png", "concern": 3}]
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({**record, "question_id": number, "response": reply}) + "\n"
                               for number, (record, reply) in enumerate(zip(records, replies))))
    out = tmp_path / "results" / "qbench.json"
    scores = eval_qbench.main(["--answers-file", str(answers), "--output-json", str(out)])
    assert scores["accuracy"] == 50.0 and scores["questions"] == 4 and scores["no_single_option"] == 0
    assert scores["by_type"] == {"how": 0.0, "what": 100.0, "yes/no": 50.0}
    assert scores["by_concern"] == {"global distortion": 100.0, "global other": 0.0, "in-context distortion": 100.0,
                                    "in-context other": 0.0}
    assert json.loads(out.read_text())["score"] == 50.0


def test_scorer_refusals(tmp_path: Path) -> None:
    answers = tmp_path / "test_answers.jsonl"
    answers.write_text(json.dumps({**{k: v for k, v in RECORDS[0].items() if k != "correct_ans"}, "question_id": 0, "response": "A"}) + "\n")
    with pytest.raises(ValueError, match="line 1 has no 'correct_ans': only the dev split can be scored here"):
        eval_qbench.main(["--answers-file", str(answers)])
    answers.write_text(json.dumps({**RECORDS[0], "question_id": 0, "correct_ans": "Maybe", "response": "A"}) + "\n")
    with pytest.raises(ValueError, match=r"'correct_ans' 'Maybe' is not one of the candidates"):
        eval_qbench.main(["--answers-file", str(answers)])
    with pytest.raises(ValueError, match="--output-json .* is the same file as --answers-file"):
        eval_qbench.main(["--answers-file", str(answers), "--output-json", str(answers)])


def test_script_needs_a_split() -> None:
    env = {**os.environ, "MODEL_PATH": "/nonexistent/llava-x"}
    for script in ("qbench.sh", "qbench_zh.sh"):
        done = subprocess.run(["bash", str(SCRIPTS / script)], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 2 and "dev|test" in done.stderr
