"""GPT-assisted visual review (upstream's eval_gpt_review_visual.py) against a fake OpenAI-compatible judge on
127.0.0.1: upstream's prompt (captions, then boxes) and output lines, the shipped rules, resuming, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from llava.eval import eval_gpt_review_visual as visual
from llava.eval import summarize_gpt_review
from llava.utils import UserError

from .fake_judge import FakeJudge, serving
from .test_scorers import write_jsonl

QUESTIONS = [
    {"question_id": 0, "image": "000000296284.jpg", "text": "What kind of shop is this?", "category": "conv"},
    {"question_id": 1, "image": "000000296284.jpg", "text": "Describe the image in detail.", "category": "detail"},
    {"question_id": 2, "image": "000000000009.jpg", "text": "Why might the food be arranged like this?", "category": "complex"},
]
# upstream's context format (caps_boxes_coco2014_val_80.jsonl): captions and normalized boxes per image
CONTEXT = [
    {"id": "000000296284", "image": "000000296284.jpg", "captions": ["A shop full of donuts.", "Donuts in a glass case."],
     "instances": [{"category": "donut", "bbox": [0.37, 0.584, 0.504, 0.709]}, {"category": "donut", "bbox": [0.369, 0.22, 0.492, 0.317]}]},
    {"id": "000000000009", "image": "000000000009.jpg", "captions": ["A lunch box with fruit and bread."], "instances": []},
]


def _score(body: dict) -> str:
    user = body["messages"][1]["content"]
    answer = user.split("[Assistant 2]\n")[1].split("\n\n[End of Assistant 2]")[0]
    return f"8 {len(answer)}\nThe second answer is shorter."


@pytest.fixture
def judge(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeJudge]:
    with serving(_score, monkeypatch) as fake:
        yield fake


def _files(tmp_path: Path) -> list[str]:
    write_jsonl(tmp_path / "question.jsonl", QUESTIONS)
    write_jsonl(tmp_path / "caps_boxes.jsonl", CONTEXT)
    write_jsonl(tmp_path / "gpt4.jsonl", [{"question_id": q["question_id"], "text": f"ref {q['question_id']}", "answer_id": f"r{q['question_id']}"} for q in QUESTIONS])
    write_jsonl(tmp_path / "model.jsonl", [{"question_id": q["question_id"], "text": "y" * (q["question_id"] + 2)} for q in QUESTIONS])
    return ["-q", str(tmp_path / "question.jsonl"), "-c", str(tmp_path / "caps_boxes.jsonl"),
            "-a", str(tmp_path / "gpt4.jsonl"), str(tmp_path / "model.jsonl"), "-o", str(tmp_path / "review.jsonl")]


def test_upstream_prompt_and_output_lines(judge: FakeJudge, tmp_path: Path) -> None:
    records = visual.main(_files(tmp_path))
    rules = json.loads(visual.RULE_FILE.read_text())
    # upstream's user message, written out: captions, a blank line, "category: bbox" lines, question, both answers
    expected = ("[Context]\nA shop full of donuts.\nDonuts in a glass case.\n\ndonut: [0.37, 0.584, 0.504, 0.709]\n"
                "donut: [0.369, 0.22, 0.492, 0.317]\n\n[Question]\nWhat kind of shop is this?\n\n[Assistant 1]\nref 0\n\n"
                "[End of Assistant 1]\n\n[Assistant 2]\nyy\n\n[End of Assistant 2]\n\n[System]\n" + rules["conv"]["prompt"] + "\n\n")
    assert judge.requests[0]["messages"][1]["content"] == expected
    assert judge.requests[0]["messages"][0]["content"] == "You are a helpful and precise assistant for checking the quality of the answer."
    assert judge.requests[0]["temperature"] == 0.2 and judge.requests[0]["max_tokens"] == 1024
    lines = [json.loads(line) for line in (tmp_path / "review.jsonl").read_text().splitlines()]
    assert lines == records
    assert [set(line) for line in lines] == [{"id", "question_id", "answer1_id", "answer2_id", "category", "content", "tuple"}] * 3
    assert [(r["id"], r["category"], r["answer1_id"], r["answer2_id"], r["tuple"]) for r in lines] == [
        (1, "conv", "r0", 0, [8.0, 2.0]), (2, "detail", "r1", 1, [8.0, 3.0]), (3, "complex", "r2", 2, [8.0, 4.0])]
    # the summariser reads them: model / reference = mean(2, 3, 4) / 8
    assert summarize_gpt_review.main(["-f", str(tmp_path / "review.jsonl")])


def test_a_rerun_resumes_and_a_damaged_line_is_set_aside(judge: FakeJudge, tmp_path: Path) -> None:
    args = _files(tmp_path)
    visual.main(args)
    output = tmp_path / "review.jsonl"
    lines = output.read_text().splitlines()
    output.write_text(lines[0] + "\n" + '{"cut off' + "\n" + lines[2] + "\n")  # a damaged second line
    calls = len(judge.requests)
    new = visual.main(args)
    assert [r["question_id"] for r in new] == [1] and len(judge.requests) == calls + 1
    assert sorted(json.loads(line)["question_id"] for line in output.read_text().splitlines()) == [0, 1, 2]
    assert (tmp_path / "review.jsonl.rejected").read_text() == '{"cut off\n'


def test_overwrite_keeps_the_old_reviews_until_the_new_ones_exist(judge: FakeJudge, tmp_path: Path) -> None:
    args = _files(tmp_path)
    visual.main(args)
    before = (tmp_path / "review.jsonl").read_text()
    judge.failures = [401]  # a refused key stops the run at once
    with pytest.raises(UserError):
        visual.main(args + ["--overwrite"])
    assert (tmp_path / "review.jsonl").read_text() == before
    visual.main(args + ["--overwrite"])
    assert len((tmp_path / "review.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize("change, message", [
    (lambda q, c: q.append({"question_id": 9, "image": "000000000009.jpg", "text": "?", "category": "coding"}), "category 'coding' is not in the rule table"),
    (lambda q, c: q.append({"question_id": 9, "image": "nowhere.jpg", "text": "?", "category": "conv"}), "image 'nowhere.jpg' has no entry in the context file"),
    (lambda q, c: q.append({"question_id": 9, "image": "000000000009.jpg", "text": "?", "category": "conv"}), "question 9 has no answer in"),
    (lambda q, c: c[1].pop("captions"), "has no 'captions' list of strings"),
])
def test_bad_inputs_are_refused_before_any_paid_call(judge: FakeJudge, tmp_path: Path, change, message) -> None:
    args = _files(tmp_path)
    questions, contexts = [dict(q) for q in QUESTIONS], [dict(c) for c in CONTEXT]
    change(questions, contexts)
    write_jsonl(tmp_path / "question.jsonl", questions)
    write_jsonl(tmp_path / "caps_boxes.jsonl", contexts)
    with pytest.raises(UserError, match=message):
        visual.main(args)
    assert judge.requests == [] and not (tmp_path / "review.jsonl").exists()


def test_output_equal_to_an_input_is_refused(judge: FakeJudge, tmp_path: Path) -> None:
    args = _files(tmp_path)
    args[args.index("-o") + 1] = str(tmp_path / "model.jsonl")
    before = (tmp_path / "model.jsonl").read_text()
    with pytest.raises(UserError, match="is the same file as --answer-list model"):
        visual.main(args)
    assert (tmp_path / "model.jsonl").read_text() == before and judge.requests == []


def test_the_shipped_rules_cover_the_coco_categories() -> None:
    rules = json.loads(visual.RULE_FILE.read_text())
    assert set(rules) == {"conv", "detail", "complex"}
    assert all(rule["role"] == "Assistant" and "bounding box" in rule["prompt"] and "first line" in rule["prompt"] for rule in rules.values())


PROMPTS = Path(__file__).resolve().parents[3] / "playground" / "data" / "prompts"
#: upstream's file names under playground/data/prompts (the few-shot examples of its GPT-4 data generation)
PROMPT_FILES = {
    "complex_reasoning": ["000_caps.txt", "000_conv.txt", "001_caps.txt", "001_conv.txt", "002_caps.txt", "002_conv.txt", "system_message.txt"],
    "conversation": ["000_caps.txt", "000_conv.txt", "001_caps.txt", "001_conv.txt", "system_message.txt"],
    "detail_description": ["000_caps.txt", "000_conv.txt", "001_caps.txt", "001_conv.txt", "002_caps.txt", "002_conv.txt", "system_message.txt"],
}


@pytest.mark.parametrize("folder", sorted(PROMPT_FILES))
def test_prompt_files_have_upstream_s_names_and_layout(folder: str) -> None:
    import re

    assert sorted(path.name for path in (PROMPTS / folder).iterdir()) == PROMPT_FILES[folder]
    for caps in sorted((PROMPTS / folder).glob("*_caps.txt")):
        captions, _, boxes = caps.read_text().partition("\n\n")
        assert len(captions.splitlines()) == 5, caps
        assert all(re.fullmatch(r"[a-z ]+: \[(0|1)(\.\d+)?(, (0|1)(\.\d+)?){3}\]", line) for line in boxes.splitlines()), caps
        conv = caps.with_name(caps.name.replace("_caps", "_conv")).read_text()
        blocks = conv.split("\n===\n")
        if folder == "detail_description":
            assert len(blocks) == 1 and not conv.startswith("Question:")
        else:
            assert len(blocks) % 2 == 0 and (len(blocks) == 2) == (folder == "complex_reasoning")
            assert all(block.startswith("Question:\n" if i % 2 == 0 else "Answer:\n") for i, block in enumerate(blocks))


def test_both_review_commands_take_the_same_flags() -> None:
    # one parser for the two GPT-assisted reviews: the visual one takes the judge's deadline too
    from llava.eval import eval_gpt_review_bench, eval_gpt_review_visual

    argv = ["-q", "q.jsonl", "-c", "c.jsonl", "-a", "ref.jsonl", "m.jsonl", "-o", "out.jsonl", "--judge-timeout", "5", "--max-tokens", "7"]
    bench, visual = (module.build_parser().parse_args(argv) for module in (eval_gpt_review_bench, eval_gpt_review_visual))
    assert vars(bench).keys() == vars(visual).keys() and visual.judge_timeout == 5.0 and visual.max_tokens == 7
    assert bench.rule.endswith("rule.json") and visual.rule.endswith("rule_visual.json")
