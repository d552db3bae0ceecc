"""Benchmark scorers on hand-made answer files whose scores are worked out in the comments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import pytest

from llava.eval import eval_gqa, eval_mme, eval_pope, eval_science_qa, eval_textvqa
from llava.eval.convert import convert_gqa


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def write_json(path: Path, payload: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


def answer(question_id: Any, text: str, prompt: str = "q") -> dict[str, Any]:
    return {"question_id": question_id, "prompt": prompt, "text": text, "answer_id": "x", "model_id": "m", "metadata": {}}


# ------------------------------------------------------------------------------------------ TextVQA

SUFFIX = "Answer the question using a single word or phrase."


def test_textvqa(tmp_path: Path) -> None:
    annotations = {
        "data": [
            {"image_id": "img1", "question": "What brand?", "answers": ["Coca-Cola", "coca-cola", "coca cola"] + ["pepsi"] * 7},
            {"image_id": "img2", "question": "What drink?", "answers": ["Coca-Cola"] * 3 + ["pepsi"] * 7},
            {"image_id": "img3", "question": "Which soda?", "answers": ["Coca-Cola"] * 3 + ["pepsi"] * 7},
            {"image_id": "img4", "question": "How many?", "answers": ["two", "2"] + ["3"] * 8},
        ]
    }
    write_json(tmp_path / "TextVQA_0.5.1_val.json", annotations)
    # The four prompt layouts LLaVA's TextVQA files use; the question is matched lower-cased.
    results = write_jsonl(
        tmp_path / "answers.jsonl",
        [
            answer("img1", "Coca Cola", f"What brand?\nReference OCR token: COKE\n{SUFFIX}"),
            answer("img2", "The Pepsi.", f"Reference OCR token: PEPSI\nWHAT DRINK?\n{SUFFIX}"),
            answer("img3", "sprite", f"Which soda?\n{SUFFIX}"),
            answer("img4", "2", "OCR tokens: 2 3 Question: How many? Short answer:"),
        ],
    )
    # Per question 0.9, 1.0, 0.0, 0.6 (worked out in test_m4c_evaluator) -> 62.5 %.
    out = tmp_path / "results" / "textvqa.json"
    record = eval_textvqa.main(["--annotation-file", str(tmp_path / "TextVQA_0.5.1_val.json"), "--result-file", str(results), "--output-json", str(out)])
    assert record["score"] == pytest.approx(62.5)
    assert json.loads(out.read_text())["score"] == pytest.approx(62.5)


def test_textvqa_unknown_prompt_layout() -> None:
    with pytest.raises(ValueError, match="cannot find the question"):
        eval_textvqa.prompt_processor("one\ntwo\nthree\nfour")


# ------------------------------------------------------------------------------------------ POPE


@pytest.fixture
def pope_files(tmp_path: Path) -> dict[str, Path]:
    questions = [{"question_id": i, "image": f"{i}.jpg", "text": "Is there a dog?", "category": "adversarial"} for i in range(4)]
    questions += [{"question_id": 10 + i, "image": f"{i}.jpg", "text": "Is there a cat?", "category": "random"} for i in range(3)]
    coco = tmp_path / "coco"
    write_jsonl(coco / "coco_pope_adversarial.json", [{"label": label} for label in ["yes", "no", "yes", "no"]])
    write_jsonl(coco / "coco_pope_random.json", [{"label": label} for label in ["yes", "yes", "no"]])
    return {"questions": write_jsonl(tmp_path / "llava_pope_test.jsonl", questions), "coco": coco}


POPE_ANSWERS = [
    # adversarial, labels yes no yes no
    answer(0, "Yes, there is a dog."),  # yes -> TP
    answer(1, "No."),  # no -> TN
    answer(2, "There is not a dog."),  # "not" -> no -> FN
    answer(3, "Yes"),  # yes -> FP
    # random, labels yes yes no
    answer(10, "Yes."),  # TP
    answer(11, "There is a cat. It is not a dog."),  # only the first sentence counts -> yes -> TP
    answer(12, "Nope"),  # no negative word -> yes -> FP
]


@pytest.mark.parametrize("order", ["file order", "shuffled"])
def test_pope(tmp_path: Path, pope_files: dict[str, Path], order: str) -> None:
    answers = POPE_ANSWERS if order == "file order" else [POPE_ANSWERS[i] for i in (6, 2, 0, 5, 3, 1, 4)]
    results = write_jsonl(tmp_path / "answers.jsonl", answers)
    record = eval_pope.main(
        ["--annotation-dir", str(pope_files["coco"]), "--question-file", str(pope_files["questions"]), "--result-file", str(results)]
    )
    adversarial, random = record["splits"]["adversarial"], record["splits"]["random"]
    # adversarial: TP=FP=TN=FN=1 -> every metric 0.5
    assert (adversarial["tp"], adversarial["fp"], adversarial["tn"], adversarial["fn"]) == (1, 1, 1, 1)
    assert adversarial["accuracy"] == adversarial["precision"] == adversarial["recall"] == adversarial["f1"] == 0.5
    assert adversarial["yes_ratio"] == 0.5
    # random: TP=2, FP=1 -> acc 2/3, precision 2/3, recall 1, F1 = 2*(2/3)/(5/3) = 0.8, yes ratio 1
    assert (random["tp"], random["fp"], random["tn"], random["fn"]) == (2, 1, 0, 0)
    assert random["accuracy"] == pytest.approx(2 / 3)
    assert random["precision"] == pytest.approx(2 / 3)
    assert random["recall"] == 1.0
    assert random["f1"] == pytest.approx(0.8)
    assert random["yes_ratio"] == 1.0
    assert record["score"] == pytest.approx(65.0)  # mean F1 x 100


def test_pope_parse_quirks() -> None:
    assert eval_pope.parse_yes_no("No, there is none.") == "no"
    assert eval_pope.parse_yes_no("NO") == "yes"  # upstream only looks for "No", "no", "not"
    assert eval_pope.parse_yes_no("not.") == "no"
    assert eval_pope.parse_yes_no("no,") == "no"  # commas are dropped first


def test_pope_unknown_question(tmp_path: Path, pope_files: dict[str, Path]) -> None:
    results = write_jsonl(tmp_path / "answers.jsonl", [answer(99, "yes")])
    with pytest.raises(ValueError, match="99"):
        eval_pope.evaluate(str(pope_files["coco"]), str(pope_files["questions"]), str(results))


# ------------------------------------------------------------------------------------------ ScienceQA


def test_science_qa(tmp_path: Path) -> None:
    def problem(choices: int, answer_index: int, image: str | None, hint: str, subject: str, grade: int) -> dict:
        return {
            "question": "q", "choices": [f"c{i}" for i in range(choices)], "answer": answer_index, "image": image,
            "hint": hint, "subject": subject, "grade": f"grade{grade}",
        }

    problems = {
        "p1": problem(3, 1, "image.png", "", "natural science", 3),
        "p2": problem(2, 0, None, "some context", "social science", 8),
        "p3": problem(4, 3, "image.png", "ctx", "language science", 10),
        "p4": problem(2, 1, None, "", "natural science", 1),
        "p5": problem(3, 2, "x.png", "", "natural science", 2),
        "p6": problem(2, 0, "y.png", "", "social science", 7),
        "p7": problem(2, 0, None, "", "social science", 5),  # in the val split only
    }
    write_json(tmp_path / "problems.json", problems)
    write_json(tmp_path / "pid_splits.json", {"test": ["p1", "p2", "p3", "p4", "p5", "p6"], "val": ["p7"]})
    img = "<image>\nQuestion"
    results = write_jsonl(
        tmp_path / "answers.jsonl",
        [
            answer("p1", "B", img),  # right
            answer("p2", "A. c0", "Question"),  # "X. " prefix -> A, right
            answer("p3", "The answer is D.", img),  # one "The answer is X." -> D, right
            answer("p4", "I think A", "Question"),  # FAILED
            # p5 unanswered -> FAILED, prompt "Unknown" so it is not counted as an image question
            answer("p6", "C", img),  # a letter beyond the problem's two choices -> wrong
            answer("p7", "A", "Question"),
        ],
    )
    out_file, out_result, out_json = tmp_path / "output.jsonl", tmp_path / "result.json", tmp_path / "sqa.json"
    record = eval_science_qa.main([
        "--base-dir", str(tmp_path), "--result-file", str(results), "--output-file", str(out_file),
        "--output-result", str(out_result), "--output-json", str(out_json),
    ])
    # 3 of 6 right; image prompts p1, p3 (right) and p6 (wrong) -> 2/3
    assert record["accuracy"] == pytest.approx(50.0)
    assert record["score"] == pytest.approx(200 / 3)
    splits = record["splits"]
    assert splits["NAT"] == pytest.approx(100 / 3)  # p1 right; p4, p5 wrong
    assert splits["SOC"] == pytest.approx(50.0)  # p2 right, p6 wrong
    assert splits["LAN"] == pytest.approx(100.0)
    assert splits["TXT"] == pytest.approx(100.0)  # p2, p3 have a hint
    assert splits["IMG"] == pytest.approx(50.0)  # image field: p1, p3 right; p5, p6 wrong
    assert splits["NO"] == pytest.approx(0.0)  # p4
    assert splits["G1-6"] == pytest.approx(100 / 3)  # p1, p4, p5
    assert splits["G7-12"] == pytest.approx(200 / 3)  # p2, p3, p6
    upstream_result = json.loads(out_result.read_text())
    assert upstream_result["acc"] == pytest.approx(50.0) and upstream_result["count"] == 6
    assert upstream_result["results"] == {"p1": 1, "p2": 0, "p3": 3, "p4": -1, "p5": -1, "p6": -1}
    analysis = json.loads(out_file.read_text())
    assert sorted(entry["question_id"] for entry in analysis["correct"]) == ["p1", "p2", "p3"]


@pytest.mark.parametrize(
    ("text", "letter"),
    [("A", "A"), ("B. because", "B"), ("The answer is C.", "C"), ("The answer is A. The answer is B.", "FAILED"), ("b", "FAILED"), ("", "FAILED")],
)
def test_science_qa_parse(text: str, letter: str) -> None:
    assert eval_science_qa.parse_answer(text, eval_science_qa.DEFAULT_OPTIONS) == letter


# ------------------------------------------------------------------------------------------ MME


@pytest.fixture
def mme_dir(tmp_path: Path) -> Path:
    root = tmp_path / "MME"
    bench = root / "MME_Benchmark_release_version"
    # "existence": images and question files side by side
    (bench / "existence").mkdir(parents=True)
    (bench / "existence" / "img1.txt").write_text(
        "Is there a dog in this image? Please answer yes or no.\tYes\nIs there a cat in this image? Please answer yes or no.\tNo\n"
    )
    (bench / "existence" / "img2.txt").write_text(
        "Is there a car in this image? Please answer yes or no.\tYes\nIs there a bus in this image? Please answer yes or no.\tNo\n"
    )
    # "artwork": images/ and questions_answers_YN/; this file has the double space some MME files have
    (bench / "artwork" / "images").mkdir(parents=True)
    (bench / "artwork" / "questions_answers_YN").mkdir()
    (bench / "artwork" / "questions_answers_YN" / "img3.txt").write_text(
        "Is this by Monet?  Please answer yes or no.\tYes\nIs this by Dali?  Please answer yes or no.\tNo\n"
    )
    (bench / "code_reasoning").mkdir()
    (bench / "code_reasoning" / "img4.txt").write_text(
        "Does the code print 3? Please answer yes or no.\tNo\nDoes the code print 4? Please answer yes or no.\tYes\n"
    )
    answers = [
        # out of image order, as merged chunks can be
        answer("existence/img2.jpg", "Yes, there is", "Is there a car in this image? Please answer yes or no."),  # right
        answer("existence/img1.jpg", "Yes", "Is there a dog in this image? Please answer yes or no."),  # right
        answer("existence/img2.jpg", "yes", "Is there a bus in this image? Please answer yes or no."),  # wrong
        answer("existence/img1.jpg", "No", "Is there a cat in this image? Please answer yes or no."),  # right
        # "Answer the question..." is removed and " Please answer yes or no." (double space here) added
        answer("artwork/img3.jpg", "The answer is yes", f"Is this by Monet?\n{SUFFIX}"),  # "the " -> other, wrong
        answer("artwork/img3.jpg", "no", f"Is this by Dali?\n{SUFFIX}"),  # right
        answer("code_reasoning/img4.png", "No.", "Does the code print 3? Please answer yes or no."),  # right
        answer("code_reasoning/img4.png", "Yes.\nIt prints 4.", "Does the code print 4? Please answer yes or no."),  # right
    ]
    write_jsonl(root / "answers" / "exp.jsonl", answers)
    return root


def test_mme(mme_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "results" / "mme.json"
    record = eval_mme.main(["--experiment", "exp", "--data-dir", str(mme_dir), "--output-json", str(out)])
    lines = (mme_dir / "eval_tool" / "answers" / "exp" / "artwork.txt").read_text().splitlines()
    assert lines == [
        "img3.txt\tIs this by Monet?  Please answer yes or no.\tYes\tThe answer is yes",
        "img3.txt\tIs this by Dali?  Please answer yes or no.\tNo\tno",
    ]
    existence = (mme_dir / "eval_tool" / "answers" / "exp" / "existence.txt").read_text().splitlines()
    assert [line.split("\t")[0] for line in existence] == ["img2.txt", "img2.txt", "img1.txt", "img1.txt"]
    code = (mme_dir / "eval_tool" / "answers" / "exp" / "code_reasoning.txt").read_text().splitlines()
    assert code[1].split("\t")[3] == "Yes. It prints 4."
    # existence: acc 3/4, acc+ 1/2 (img1 both right) -> 125; artwork: acc 1/2, acc+ 0 -> 50
    # code_reasoning: 1 + 1 -> 200.  Perception 175, cognition 200, total 375.
    assert record["tasks"] == pytest.approx({"existence": 125.0, "artwork": 50.0, "code_reasoning": 200.0})
    assert record["perception"] == pytest.approx(175.0)
    assert record["cognition"] == pytest.approx(200.0)
    assert record["score"] == pytest.approx(375.0)
    assert json.loads(out.read_text())["score"] == pytest.approx(375.0)
    # scoring the converted folder alone gives the same numbers
    again = eval_mme.main(["--results_dir", str(mme_dir / "eval_tool" / "answers" / "exp")])
    assert again["score"] == pytest.approx(375.0)


def test_mme_parse() -> None:
    assert [eval_mme.parse_pred_ans(text) for text in ["yes", "no", "yes, it is", "not sure", "the answer is no", ""]] == [
        "yes", "no", "yes", "no", "other", "other",
    ]


def test_mme_unknown_question(mme_dir: Path) -> None:
    write_jsonl(mme_dir / "answers" / "bad.jsonl", [answer("existence/img1.jpg", "Yes", "Is there a horse?")])
    with pytest.raises(ValueError, match="existence/img1.jpg"):
        eval_mme.main(["--experiment", "bad", "--data-dir", str(mme_dir)])


def test_mme_image_needs_two_questions() -> None:
    with pytest.raises(ValueError, match="expected 2"):
        eval_mme.score_task(["a.txt\tq\tyes\tyes"], "count")


# ------------------------------------------------------------------------------------------ GQA


def test_gqa_conversion_and_accuracy(tmp_path: Path) -> None:
    results = write_jsonl(
        tmp_path / "merge.jsonl",
        [answer("q1", "Dog."), answer("q2", "Yes"), answer("q3", "right"), answer("q4", "U.S..")],
    )
    dst = tmp_path / "data" / "testdev_balanced_predictions.json"
    convert_gqa(results, dst)
    # upstream's format: a list of {"questionId", "prediction"}, trailing periods stripped, lower case
    assert json.loads(dst.read_text()) == [
        {"questionId": "q1", "prediction": "dog"},
        {"questionId": "q2", "prediction": "yes"},
        {"questionId": "q3", "prediction": "right"},
        {"questionId": "q4", "prediction": "u.s"},
    ]
    questions = {
        "q1": {"answer": "dog", "isBalanced": True, "types": {"structural": "query"}},
        "q2": {"answer": "yes", "isBalanced": True, "types": {"structural": "verify"}},
        "q3": {"answer": "left", "isBalanced": True, "types": {"structural": "query"}},
        "q4": {"answer": "no", "isBalanced": False, "types": {"structural": "verify"}},
    }
    write_json(tmp_path / "testdev_balanced_questions.json", questions)
    record = eval_gqa.main(["--questions", str(tmp_path / "testdev_balanced_questions.json"), "--predictions", str(dst)])
    # q4 is not balanced; q1, q2 right, q3 wrong -> 2/3; query 1/2, verify 1/1
    assert record["score"] == pytest.approx(200 / 3)
    assert record["structural"] == pytest.approx({"query": 50.0, "verify": 100.0})
