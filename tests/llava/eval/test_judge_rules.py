"""The GPT judges' key, endpoint, paid work and input records, against a fake judge on 127.0.0.1 (fault cases of
2026-11-26): J02 a key ending in a CR, J05 an Azure-style base URL with a query, J08 ``--overwrite`` with a judge
that fails midway, old-J09 another ``--num_run`` over the same grades, old-R03 records without a field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llava.eval import eval_gpt_review_bench as review
from llava.eval import eval_mmvet as mmvet
from llava.utils import UserError, cli_main

from .fake_judge import FakeJudge, serving
from .test_judge_faults import QUESTIONS, _review_files
from .test_mmvet import QUESTIONS as QUESTIONS_MMVET
from .test_mmvet import _grade_reply, _layout
from .test_scorers import write_jsonl

KEY = "sk-SECRET-KEY-1234"


def test_j02_a_key_ending_in_a_cr_is_refused_before_any_call_and_never_printed(tmp_path: Path, monkeypatch, capsys) -> None:
    # Before: the full key was printed three times ("cannot be reached (ValueError: Invalid header value
    # b'Bearer sk-...\r')") and the call retried as if the endpoint were down.
    with serving(_grade_reply, monkeypatch) as judge:
        monkeypatch.setenv("OPENAI_API_KEY", KEY + "\r")
        status = cli_main(mmvet.main, _layout(tmp_path) + ["--max-retries", "2"])
    err = capsys.readouterr().err
    assert status == 2 and judge.paths == []
    assert "OPENAI_API_KEY holds a carriage return (\\r) at its end (e.g. from a Windows .env file); remove it" in err
    assert "SECRET" not in err and "1234" not in err and len(err.strip().splitlines()) == 1


def test_j02_a_key_given_by_flag_is_named_by_its_flag(tmp_path: Path, monkeypatch) -> None:
    with serving(_grade_reply, monkeypatch) as judge:
        monkeypatch.delenv("OPENAI_API_KEY")
        with pytest.raises(UserError, match=r"^--openai_api_key holds a line feed"):
            mmvet.main(_layout(tmp_path) + ["--openai_api_key", KEY + "\n"])
    assert judge.paths == []


def test_j05_the_query_of_the_base_url_is_kept_after_the_route(tmp_path: Path, monkeypatch) -> None:
    # Before: the request went to /openai/deployments/gpt4?api-version=2024-02-01/chat/completions.
    with serving(_grade_reply, monkeypatch) as judge:
        base = judge.url.removesuffix("/v1") + "/openai/deployments/gpt4?api-version=2024-02-01"
        monkeypatch.setenv("OPENAI_BASE_URL", base)
        mmvet.main(_layout(tmp_path))
    assert set(judge.paths) == {"/openai/deployments/gpt4/chat/completions?api-version=2024-02-01"}


def _new_judge_failing_after(judge: FakeJudge, answers: int) -> list[int]:
    """Make ``judge`` a new judge whose ``answers``-th answer is its last (HTTP 401 afterwards)."""
    calls: list[int] = []

    def respond(body: dict) -> str:
        calls.append(1)
        if len(calls) == answers:
            judge.failures.append(401)
        return "9 9\nnew judge"

    judge.respond = respond
    return calls


def test_j08_overwrite_keeps_every_review_the_new_judge_gave(tmp_path: Path, monkeypatch) -> None:
    # Before: the new judge's 4 paid reviews went to a temporary file that was dropped when its 5th call failed.
    argv = _review_files(tmp_path) + ["--max-retries", "0"]
    output = tmp_path / "reviews" / "m.jsonl"
    with serving(lambda body: "7 8\nold judge", monkeypatch) as judge:
        review.main(argv)
        monkeypatch.setenv("LLAVA_JUDGE_MODEL", "judge-2")
        calls = _new_judge_failing_after(judge, 4)
        with pytest.raises(UserError, match="refused the request: HTTP 401"):
            review.main(argv + ["--overwrite"])
        kept = [json.loads(line) for line in output.read_text().splitlines()]
        assert [r["question_id"] for r in kept] == [0, 1, 2, 3] and {r["content"] for r in kept} == {"9 9\nnew judge"}
        record = json.loads(Path(str(output) + ".meta.json").read_text())
        assert record["producer"]["judge_model"] == "judge-2"
        judge.failures.clear()
        new = review.main(argv)  # a plain rerun: only the 5th question is asked
    assert [r["question_id"] for r in new] == [4] and len(calls) == 5
    assert [json.loads(line)["question_id"] for line in output.read_text().splitlines()] == [0, 1, 2, 3, 4]


def test_old_j09_another_num_run_reuses_the_grades_already_paid_for(tmp_path: Path, monkeypatch) -> None:
    # Before: --num_run 2 after --num_run 1 asked for all 10 grades again (a new ...-grade-2runs.json).
    argv = _layout(tmp_path)
    results = tmp_path / "results"
    with serving(_grade_reply, monkeypatch) as judge:
        mmvet.main(argv + ["--num_run", "1"])
        one_run = (results / "m_judge-1-grade-1runs.json").read_bytes()
        asked = len(judge.requests)
        mmvet.main(argv + ["--num_run", "2"])
        assert len(judge.requests) == asked + 5  # only the second run
        two_runs = json.loads((results / "m_judge-1-grade-2runs.json").read_text())
        assert {qid: entry["score"][:1] for qid, entry in two_runs.items()} == {
            qid: entry["score"] for qid, entry in json.loads(one_run).items()}
        assert (results / "m_judge-1-grade-1runs.json").read_bytes() == one_run  # read, never changed
        for path in results.glob("m_judge-1-grade-1runs.json*"):
            path.unlink()
        scores = mmvet.main(argv + ["--num_run", "1"])  # fewer runs: the first of each question's two is enough
        assert len(judge.requests) == asked + 5 and scores["capabilities"]["runs"] == [52.0]
        (results / "m.json").write_text(json.dumps({qid: f"new prediction {qid}" for qid in QUESTIONS_MMVET}))
        mmvet.main(argv + ["--num_run", "3"])  # grades of other predictions are not reused
    assert len(judge.requests) == asked + 5 + 15


@pytest.mark.parametrize(("broken", "message"), [
    ("questions", r"^question file '.*questions.jsonl' line 2 has no 'category' field \(fields: \['image', 'question_id', 'text'\]\)$"),
    ("context", r"^context file '.*context.jsonl' line 1 has no 'image' field \(fields: \['caption', 'id'\]\)$"),
    ("answers", r"^answers file '.*model.jsonl' line 3: 'text' must be a string, got 5 \(int\)$"),
])
def test_old_r03_records_without_a_field_are_refused_before_any_call(tmp_path: Path, monkeypatch, broken: str, message: str) -> None:
    # Before: KeyError: 'category' / KeyError: 'image' tracebacks (after paying for the questions before it).
    argv = _review_files(tmp_path)
    if broken == "questions":
        write_jsonl(tmp_path / "questions.jsonl", [QUESTIONS[0], {k: v for k, v in QUESTIONS[1].items() if k != "category"}])
    elif broken == "context":
        write_jsonl(tmp_path / "context.jsonl", [{"id": "a", "caption": ["A cup."]}])
    else:
        write_jsonl(tmp_path / "model.jsonl", [{"question_id": q["question_id"], "text": 5 if q["question_id"] == 2 else "a"}
                                               for q in QUESTIONS])
    with serving(lambda body: "7 8", monkeypatch) as judge:
        with pytest.raises(UserError, match=message):
            review.main(argv)
    assert judge.paths == [] and not (tmp_path / "reviews" / "m.jsonl").exists()
