"""Fault cases of the GPT judges (LLaVA-Bench review, MM-Vet grading) against misbehaving endpoints and damaged
files: J05 redirect to another origin, J06 huge reply, J07 trickling reply, R02 damaged review/grade, R06
unparsed reviews in the summary, J02 empty subset, J08 outputs that cannot be written."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest

from llava.eval import eval_gpt_review_bench as review
from llava.eval import eval_mmvet as mmvet
from llava.eval import summarize_gpt_review

from ..http_server import Handled, scripted_server
from .fake_judge import serving
from .test_mmvet import GRADES, _grade_reply, _layout
from .test_scorers import write_jsonl

QUESTIONS = [{"question_id": i, "image": "a.jpg", "text": f"question {i}", "category": "conv"} for i in range(5)]


def _review_files(tmp_path: Path) -> list[str]:
    write_jsonl(tmp_path / "questions.jsonl", QUESTIONS)
    write_jsonl(tmp_path / "context.jsonl", [{"id": "a", "image": "a.jpg", "caption": ["A cup."]}])
    write_jsonl(tmp_path / "gpt4.jsonl", [{"question_id": q["question_id"], "text": "ref"} for q in QUESTIONS])
    write_jsonl(tmp_path / "model.jsonl", [{"question_id": q["question_id"], "text": "ans"} for q in QUESTIONS])
    return ["-q", str(tmp_path / "questions.jsonl"), "-c", str(tmp_path / "context.jsonl"), "-a", str(tmp_path / "gpt4.jsonl"),
            str(tmp_path / "model.jsonl"), "-o", str(tmp_path / "reviews" / "m.jsonl")]


def _record(handled: Handled) -> None:
    handled.reply(200, json.dumps({"model": "stolen", "choices": [{"message": {"content": "1.0"}}]}).encode())


def test_j05_a_redirect_to_another_origin_is_not_followed_and_the_key_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with scripted_server(_record) as elsewhere, serving(_grade_reply, monkeypatch) as judge:
        judge.redirect_to = elsewhere.url.replace("127.0.0.1", "localhost") + "/steal"
        with pytest.raises(ValueError, match=r"^the judge at .* cannot be used: .* redirected to another origin "
                                             r"\(http://localhost:\d+/steal\); the redirect was not followed"):
            mmvet.main(_layout(tmp_path))
    assert elsewhere.requests == []  # neither the question nor the Authorization header went there
    grade_file = tmp_path / "results" / "m_judge-1-grade-1runs.json"
    assert not grade_file.exists() or json.loads(grade_file.read_text()) == {}


def test_j06_a_huge_reply_is_refused_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with serving(lambda body: "9 8", monkeypatch) as judge:
        judge.padding = 4 * 1024 * 1024  # a valid reply, 4 MiB long
        with pytest.raises(ValueError, match=r"cannot be used: .* sent a reply of 4.0 MiB, more than the 1.0 MiB accepted"):
            review.main(_review_files(tmp_path))
    assert (tmp_path / "reviews" / "m.jsonl").read_text() == ""


def test_j07_a_trickling_judge_is_cut_at_the_total_deadline_then_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failures: list[BaseException] = []
    with serving(_grade_reply, monkeypatch) as judge:
        judge.trickle = 0.3  # one byte every 0.3 s: a per-read timeout never trips

        def run() -> None:
            try:
                mmvet.main(_layout(tmp_path) + ["--judge-timeout", "1", "--max-retries", "1"])
            except BaseException as error:  # handed to the test thread
                failures.append(error)

        start = time.monotonic()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(timeout=30)
        elapsed = time.monotonic() - start
        assert not thread.is_alive(), "the judge client waited more than 30 s on a 1 s deadline"
    assert elapsed < 10 and len(failures) == 1
    assert str(failures[0]).startswith("the judge at ") and "still fails after 1 retries" in str(failures[0])
    assert "did not answer within 1 s" in str(failures[0])


def test_r02_a_damaged_review_line_keeps_every_intact_review(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    argv = _review_files(tmp_path) + ["--max-retries", "0"]
    output = tmp_path / "reviews" / "m.jsonl"
    with serving(lambda body: "9 7", monkeypatch) as judge:
        review.main(argv)
        lines = output.read_text().splitlines()
        damaged = lines[1][:25]
        output.write_text("\n".join([lines[0], damaged, *lines[2:]]) + "\n")
        judge.failures = [500] * 5  # the judge is down
        with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match="still fails after 0 retries"):
            review.main(argv)
    kept = [json.loads(line)["question_id"] for line in output.read_text().splitlines()]
    assert kept == [0, 2, 3, 4]  # 4 paid reviews stay; before, only the one before the damage did
    assert Path(str(output) + ".rejected").read_text() == damaged + "\n"
    assert "1 damaged line(s) set aside in" in caplog.text and "m.jsonl.rejected" in caplog.text


def test_r02_a_damaged_mmvet_grade_is_set_aside_and_graded_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _layout(tmp_path)
    grade_file = tmp_path / "results" / "m_judge-1-grade-1runs.json"
    with serving(_grade_reply, monkeypatch) as judge:
        mmvet.main(argv)
        grades = json.loads(grade_file.read_text())
        grades["v1_2"]["score"] = ["zero"]
        grade_file.write_text(json.dumps(grades))
        asked = len(judge.requests)
        scores = mmvet.main(argv)
        assert len(judge.requests) == asked + 1  # only the damaged grade is asked again
    rejected = [json.loads(line) for line in Path(str(grade_file) + ".rejected").read_text().splitlines()]
    assert rejected == [{"id": "v1_2", "entry": {"model": ["judge-1-0613"], "content": ["0.0"], "score": ["zero"]}}]
    assert scores["capabilities"]["total"] == round(100 * sum(GRADES.values()) / len(GRADES), 1)


def test_r06_unparsed_reviews_are_left_out_and_counted(tmp_path: Path, caplog) -> None:
    path = tmp_path / "review_m.jsonl"
    pairs = [[8, 6], [-1, -1], [10, 5], [-1, -1]]
    write_jsonl(path, [{"question_id": i, "category": "llava_bench_conv", "tuple": pair} for i, pair in enumerate(pairs)])
    with caplog.at_level(logging.WARNING):
        summary = summarize_gpt_review.main(["-f", str(path)])
    # Means over the two parsed reviews only: reference (8 + 10) / 2 = 9, model (6 + 5) / 2 = 5.5.
    assert summary["review_m"]["all"] == (round(5.5 / 9 * 100, 1), 90.0, 55.0)
    assert summary["review_m"]["llava_bench_conv"] == summary["review_m"]["all"]
    assert "2 of 4 reviews have no score pair" in caplog.text


def test_j02_an_empty_subset_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _layout(tmp_path)
    (tmp_path / "mm-vet" / "bard_set.json").write_text("[]")
    with serving(_grade_reply, monkeypatch) as judge:
        with pytest.raises(ValueError, match=r"^bard_set.json in .* lists no question ids, so there is nothing to grade"):
            mmvet.main(argv + ["--use_sub_set"])
        assert judge.requests == []


def test_j08_outputs_that_cannot_be_written_are_refused_before_any_judge_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                              read_only_under) -> None:
    argv = _layout(tmp_path)
    read_only_under(tmp_path / "ro")
    with serving(_grade_reply, monkeypatch) as judge:
        with pytest.raises(ValueError, match=r"^--output-json .*ro/mmvet.json' cannot be written \(read-only file system\)"):
            mmvet.main(argv + ["--output-json", str(tmp_path / "ro" / "mmvet.json")])
        review_argv = _review_files(tmp_path)
        review_argv[-1] = str(tmp_path / "ro" / "reviews.jsonl")
        with pytest.raises(ValueError, match=r"^--output .*ro/reviews.jsonl' cannot be written \(read-only file system\)"):
            review.main(review_argv)
        assert judge.requests == []  # nothing paid for
