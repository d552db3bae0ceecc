"""LLaVA-Bench GPT review against a fake OpenAI-compatible judge on 127.0.0.1: the request format, the rule
table, retries, resuming, and the scores that summarize_gpt_review reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from llava.eval import eval_gpt_review_bench as review
from llava.eval import summarize_gpt_review
from llava.utils import UserError

from .fake_judge import FakeJudge, serving
from .test_scorers import write_jsonl

QUESTIONS = [
    {"question_id": 0, "image": "a.jpg", "text": "What is on the table?", "category": "conv"},
    {"question_id": 1, "image": "a.jpg", "text": "Describe the image.", "category": "detail"},
    {"question_id": 2, "image": "b.jpg", "text": "Why is the man running?", "category": "complex"},
]
CONTEXT = [{"id": "a", "image": "a.jpg", "caption": ["A cup on a table.", "A red cup."]},
           {"id": "b", "image": "b.jpg", "caption": ["A man runs after a bus."]}]


def _score_by_length(body: dict) -> str:
    """9 for the reference, len(model answer) for the model."""
    user = body["messages"][1]["content"]
    model_answer = user.split("[Assistant 2]\n")[1].split("\n\n[End of Assistant 2]")[0]
    return f"9 {len(model_answer)}\nBecause."


@pytest.fixture
def judge(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeJudge]:
    with serving(_score_by_length, monkeypatch) as fake:
        yield fake


def _files(tmp_path: Path) -> list[str]:
    write_jsonl(tmp_path / "questions.jsonl", QUESTIONS)
    write_jsonl(tmp_path / "context.jsonl", CONTEXT)
    write_jsonl(tmp_path / "gpt4.jsonl", [{"question_id": q["question_id"], "text": f"ref {q['question_id']}", "answer_id": f"r{q['question_id']}"} for q in QUESTIONS])
    write_jsonl(tmp_path / "model.jsonl", [{"question_id": q["question_id"], "text": "x" * (q["question_id"] + 3), "answer_id": f"m{q['question_id']}"} for q in reversed(QUESTIONS)])
    return ["--question", str(tmp_path / "questions.jsonl"), "--context", str(tmp_path / "context.jsonl"),
            "--answer-list", str(tmp_path / "gpt4.jsonl"), str(tmp_path / "model.jsonl"), "--output", str(tmp_path / "reviews" / "m.jsonl")]


def test_reviews_with_retries_and_the_shipped_rules(judge: FakeJudge, tmp_path: Path) -> None:
    judge.failures = [429, 503]  # rate limited, then a server error: both retried
    records = review.main(_files(tmp_path))
    assert [r["tuple"] for r in records] == [[9.0, 3.0], [9.0, 4.0], [9.0, 5.0]]  # matched by id, not line order
    assert [r["category"] for r in records] == ["llava_bench_conv", "llava_bench_detail", "llava_bench_complex"]
    assert [(r["answer1_id"], r["answer2_id"]) for r in records] == [("r0", "m0"), ("r1", "m1"), ("r2", "m2")]
    first = judge.requests[0]
    assert first["model"] == "judge-1" and first["temperature"] == 0.2 and first["max_tokens"] == 1024
    assert first["messages"][0] == {"role": "system", "content": review.SYSTEM_MESSAGE}
    rules = json.loads(review.RULE_FILE.read_text())
    expected = ("[Context]\nA cup on a table.\nA red cup.\n\n[Question]\nWhat is on the table?\n\n[Assistant 1]\nref 0\n\n"
                "[End of Assistant 1]\n\n[Assistant 2]\nxxx\n\n[End of Assistant 2]\n\n[System]\n"
                + rules["llava_bench_conv"]["prompt"] + "\n\n")
    assert first["messages"][1]["content"] == expected
    assert all(h["Authorization"] == "Bearer sk-test" for h in judge.headers)
    summary = summarize_gpt_review.main(["-f", str(tmp_path / "reviews" / "m.jsonl")])
    assert summary["m"]["llava_bench_conv"] == (round(3 / 9 * 100, 1), 90.0, 30.0)


def test_resumes_after_a_failure_without_asking_twice(judge: FakeJudge, tmp_path: Path) -> None:
    argv = _files(tmp_path) + ["--max-retries", "1"]
    judge.failures = []
    review.main(argv[:])  # everything reviewed once
    output = tmp_path / "reviews" / "m.jsonl"
    lines = output.read_text().splitlines()
    output.write_text(lines[0] + "\n" + lines[1][:20])  # killed while writing the second review
    judge.failures = [500, 500]  # more failures than retries
    with pytest.raises(ValueError, match="still fails after 1 retries .*run again to resume"):
        review.main(argv[:])
    asked = len(judge.requests)
    again = review.main(argv[:])
    assert [r["question_id"] for r in again] == [1, 2] and len(judge.requests) == asked + 2
    assert [json.loads(line)["question_id"] for line in output.read_text().splitlines()] == [0, 1, 2]


def test_refusals_are_one_sentence(judge: FakeJudge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _files(tmp_path)
    judge.failures = [401]
    with pytest.raises(ValueError, match="refused the request: HTTP 401"):
        review.main(argv)
    bad = argv[:argv.index("--output")] + ["--output", str(tmp_path / "model.jsonl")]
    with pytest.raises(ValueError, match="--output .* is the same file as --answer-list model"):
        review.main(bad)
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ValueError, match="set OPENAI_API_KEY"):
        review.main(argv)


def test_parse_score() -> None:
    assert review.parse_score("7, 8\nfine") == [7.0, 8.0]
    assert review.parse_score("7 8.5") == [7.0, 8.5]
    assert review.parse_score("Scores: 7 and 8") == [-1, -1]


def test_reviews_of_other_answers_or_another_judge_are_not_mixed(judge: FakeJudge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _files(tmp_path)
    review.main(argv)
    output = tmp_path / "reviews" / "m.jsonl"
    lines = output.read_text().splitlines()
    output.write_text(lines[0] + "\n")  # an interrupted run
    write_jsonl(tmp_path / "model.jsonl", [{"question_id": q["question_id"], "text": "new answer"} for q in QUESTIONS])
    with pytest.raises(ValueError, match=r"^review file .* was produced with other settings \(answers .*\); pass --overwrite to start again with the new ones, or choose another --output$"):
        review.main(argv)
    monkeypatch.setenv("LLAVA_JUDGE_MODEL", "judge-2")
    with pytest.raises(ValueError, match="judge_model 'judge-1' -> 'judge-2'"):
        review.main(argv)
    fresh = review.main(argv + ["--overwrite"])
    assert [r["tuple"] for r in fresh] == [[9.0, 10.0]] * 3 and len(output.read_text().splitlines()) == 3


def test_overwrite_keeps_the_old_reviews_until_the_new_ones_exist(judge: FakeJudge, tmp_path: Path) -> None:
    # --overwrite emptied the review file before the first judge call: a refused call lost every paid review.
    argv = _files(tmp_path)
    review.main(argv)
    output = tmp_path / "reviews" / "m.jsonl"
    before = output.read_text()
    judge.failures = [401]  # a refused key stops the run at once
    with pytest.raises(UserError):
        review.main(argv + ["--overwrite"])
    assert output.read_text() == before
    review.main(argv + ["--overwrite"])
    assert len(output.read_text().splitlines()) == 3
