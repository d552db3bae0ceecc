"""MM-Vet grading against a fake OpenAI-compatible judge on 127.0.0.1: the request, the retry-on-unusable-reply
policy, resuming, the official file names and CSV layout, and scores checked against hand-computed values."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llava.eval import eval_mmvet as mmvet
from llava.eval.summarize import load_scores

from .fake_judge import serving

QUESTIONS = {
    "v1_0": {"imagename": "v1_0.png", "capability": ["rec"], "question": "What animal is this?", "answer": "cat"},
    "v1_1": {"imagename": "v1_1.png", "capability": ["rec", "ocr"], "question": "Which two numbers?", "answer": "12<AND>13"},
    "v1_2": {"imagename": "v1_2.png", "capability": ["ocr", "rec"], "question": "What is written?", "answer": "stop<OR>halt"},
    "v1_3": {"imagename": "v1_3.png", "capability": ["ocr", "math"], "question": "What is the sum?", "answer": "25"},
    "v1_4": {"imagename": "v1_4.png", "capability": ["rec", "know", "gen"], "question": "Explain the joke.", "answer": "A pun."},
}
# The grade the fake judge gives each prediction (it reads the prediction back from the row).
GRADES = {"v1_0": 1.0, "v1_1": 0.5, "v1_2": 0.0, "v1_3": 0.8, "v1_4": 0.3}
PREDICTIONS = {qid: f"prediction {qid}" for qid in QUESTIONS}


def _row_prediction(body: dict[str, Any]) -> str:
    row = body["messages"][-1]["content"].split("\n")[-1]
    if not row.endswith(" | "):  # a nudged question: the row is the line before the nudge
        row = body["messages"][-1]["content"].split("\n")[-2]
    return row.split(" | ")[2]


def _grade_reply(body: dict[str, Any]) -> tuple[str, str]:
    qid = _row_prediction(body).split()[-1]
    return str(GRADES[qid]), "judge-1-0613"


def _layout(tmp_path: Path, predictions: dict[str, Any] | None = None) -> list[str]:
    (tmp_path / "mm-vet").mkdir(exist_ok=True)
    (tmp_path / "mm-vet" / "mm-vet.json").write_text(json.dumps(QUESTIONS))
    (tmp_path / "results").mkdir(exist_ok=True)
    (tmp_path / "results" / "m.json").write_text(json.dumps(PREDICTIONS if predictions is None else predictions))
    return ["--mmvet_path", str(tmp_path / "mm-vet"), "--result_path", str(tmp_path / "results"), "--model", "m"]


def _read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


def test_grades_scores_and_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with serving(_grade_reply, monkeypatch) as judge:
        scores = mmvet.main(_layout(tmp_path) + ["--output-json", str(tmp_path / "scores" / "mmvet.json")])
    # hand-computed: rec = (1.0 + 0.5 + 0.0 + 0.3) / 4, ocr = (0.5 + 0.0 + 0.8) / 3, total = 2.6 / 5
    assert scores["capabilities"] == {"rec": 45.0, "ocr": 43.3, "math": 80.0, "know": 30.0, "gen": 30.0,
                                      "total": 52.0, "std": 0.0, "runs": [52.0]}
    # combinations, most frequent first; {rec, ocr} and {ocr, rec} are one combination, named as first listed
    assert scores["integrations"] == {"rec_ocr": 25.0, "rec": 100.0, "ocr_math": 80.0, "rec_know_gen": 30.0,
                                      "total": 52.0, "std": 0.0, "runs": [52.0]}
    first = judge.requests[1]
    prompt = mmvet.PROMPT_FILE.read_text()
    assert first["messages"] == [{"role": "user", "content": prompt + "\nWhich two numbers? | 12 <AND> 13 | prediction v1_1 | "}]
    assert (first["model"], first["temperature"], first["max_tokens"]) == ("judge-1", 0.0, 3)
    assert len(judge.requests) == 5
    results = tmp_path / "results"
    grades = json.loads((results / "m_judge-1-grade-1runs.json").read_text())
    assert grades["v1_3"] == {"model": ["judge-1-0613"], "content": ["0.8"], "score": [0.8]}
    table = _read_csv(results / "m_judge-1-cap-score-1runs.csv")
    assert table == [["", "rec", "ocr", "math", "know", "gen", "total", "std", "runs"],
                     ["m", "45.0", "43.3", "80.0", "30.0", "30.0", "52.0", "0.0", "[52.0]"]]
    assert _read_csv(results / "m_judge-1-cap-int-score-1runs.csv")[0][1:5] == ["rec_ocr", "rec", "ocr_math", "rec_know_gen"]
    assert load_scores(tmp_path / "scores")["mmvet"] == 52.0


def test_several_runs_resume_and_std(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def drifting(body: dict[str, Any]) -> str:  # a question's first grading: the grade above; later ones 0.1 lower (floor 0)
        qid = _row_prediction(body).split()[-1]
        calls.append(qid)
        return str(round(max(GRADES[qid] - (0.1 if calls.count(qid) > 1 else 0.0), 0.0), 1))

    argv = _layout(tmp_path) + ["--num_run", "2", "--decimal_places", "2"]
    with serving(drifting, monkeypatch):
        mmvet.main(argv)
        grade_file = tmp_path / "results" / "m_judge-1-grade-2runs.json"
        grades = json.loads(grade_file.read_text())
        del grades["v1_4"]  # as if the run had been stopped before grading v1_4 at all
        grades["v1_3"] = {key: value[:1] for key, value in grades["v1_3"].items()}  # ... and v1_3's second run
        grade_file.write_text(json.dumps(grades))
        before = len(calls)
        scores = mmvet.main(argv)
    assert sorted(calls[before:]) == ["v1_3", "v1_4", "v1_4"]
    # the regraded v1_4 gets 0.2 in both runs: run 1 = 100 * (1.0 + 0.5 + 0.0 + 0.8 + 0.2) / 5 = 50,
    # run 2 = 100 * (0.9 + 0.4 + 0.0 + 0.7 + 0.2) / 5 = 44; mean 47, population std 3
    assert scores["capabilities"]["runs"] == [50.0, 44.0]
    assert (scores["capabilities"]["total"], scores["capabilities"]["std"]) == (47.0, 3.0)
    # math: (80 + 70) / 2
    assert scores["capabilities"]["math"] == 75.0


def test_unusable_replies_are_asked_again_warmer_then_score_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    replies = {"v1_0": ["Great answer", "1.7", "0.6"]}

    def stubborn(body: dict[str, Any]) -> str:
        qid = _row_prediction(body).split()[-1]
        queue = replies.get(qid)
        if qid == "v1_0":
            return queue.pop(0)
        return "correct" if qid == "v1_2" else str(GRADES[qid])

    with serving(stubborn, monkeypatch) as judge:
        mmvet.main(_layout(tmp_path))
    grades = json.loads((tmp_path / "results" / "m_judge-1-grade-1runs.json").read_text())
    assert grades["v1_0"]["score"] == [0.6] and grades["v1_2"]["score"] == [0.0]
    asked = [(body["temperature"], body["messages"][0]["content"].endswith(mmvet.NUDGE)) for body in judge.requests
             if _row_prediction(body).endswith(("v1_0", "v1_2"))]
    assert asked[:3] == [(0.0, False), (0.5, True), (1.0, True)]
    assert [t for t, _ in asked[3:]] == [0.0, 0.5, 1.0, 1.5, 2.0]  # v1_2: five attempts, capped at 2.0


@pytest.mark.parametrize(("reply", "expected"), [("0.7", 0.7), (" 1.0 ", 1.0), ("0 because", 0.0), ("1.1", None),
                                                 ("-0.1", None), ("", None), ("zero", None), ("nan", None)])
def test_parse_correctness(reply: str, expected: float | None) -> None:
    assert mmvet.parse_correctness(reply) == expected


def test_changed_predictions_are_not_mixed_and_overwrite_regrades(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _layout(tmp_path)
    with serving(_grade_reply, monkeypatch) as judge:
        mmvet.main(argv)
        _layout(tmp_path, {**PREDICTIONS, "v1_0": "prediction v1_2"})  # the answers were generated again
        with pytest.raises(ValueError, match=r"grade file .* was produced with other settings \(predictions .*\); pass --overwrite"):
            mmvet.main(argv)
        asked = len(judge.requests)
        scores = mmvet.main(argv + ["--overwrite"])
    assert len(judge.requests) == asked + 5
    assert scores["capabilities"]["rec"] == 20.0  # (0.0 + 0.5 + 0.0 + 0.3) / 4


def test_an_overwrite_that_fails_at_once_leaves_no_record_beside_the_old_grades(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --overwrite recorded the new predictions before the first grade: when the judge then refused, the old grades
    # sat next to a record of the new predictions, and a plain re-run took them as this run's.
    argv = _layout(tmp_path)
    grade_file = tmp_path / "results" / "m_judge-1-grade-1runs.json"  # the fake judge is named judge-1
    with serving(_grade_reply, monkeypatch) as judge:
        mmvet.main(argv)
        old_grades = grade_file.read_text()
        _layout(tmp_path, {**PREDICTIONS, "v1_0": "prediction v1_2"})
        judge.failures = [401]
        with pytest.raises(ValueError):
            mmvet.main(argv + ["--overwrite"])
        assert grade_file.read_text() == old_grades
        with pytest.raises(ValueError, match=r"produced with other settings \(predictions .*\); pass --overwrite"):
            mmvet.main(argv)


@pytest.mark.parametrize(("change", "message"), [
    (lambda q, p: p.pop("v1_3"), r"has no prediction for 1 of the 5 questions \(first: 'v1_3'\)"),
    (lambda q, p: p.update(v1_2=None), r"the prediction for 'v1_2' is not a text"),
    (lambda q, p: q["v1_1"].update(capability="rec"), r"question 'v1_1' needs a non-empty list of capability names"),
    (lambda q, p: q["v1_4"].pop("answer"), r"question 'v1_4' has no 'answer' field"),
])
def test_bad_inputs_are_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Any, message: str) -> None:
    questions = json.loads(json.dumps(QUESTIONS))
    predictions = dict(PREDICTIONS)
    change(questions, predictions)
    argv = _layout(tmp_path, predictions)
    (tmp_path / "mm-vet" / "mm-vet.json").write_text(json.dumps(questions))
    with serving(_grade_reply, monkeypatch) as judge:
        with pytest.raises(ValueError, match=message):
            mmvet.main(argv)
    assert judge.requests == []


def test_subset_and_option_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _layout(tmp_path)
    (tmp_path / "mm-vet" / "bard_set.json").write_text(json.dumps({"v1_0": {}, "v1_3": {}}))
    with serving(_grade_reply, monkeypatch) as judge:
        scores = mmvet.main(argv + ["--use_sub_set"])
        assert len(judge.requests) == 2 and scores["capabilities"]["total"] == 90.0
        assert (tmp_path / "results" / "m_bardset_judge-1-cap-score-1runs.csv").is_file()
        (tmp_path / "mm-vet" / "bard_set.json").write_text(json.dumps(["v1_0", "v9_9"]))
        with pytest.raises(ValueError, match=r"bard_set.json names 1 ids that mm-vet.json lacks \(first: 'v9_9'\)"):
            mmvet.main(argv + ["--use_sub_set"])
        with pytest.raises(ValueError, match="--num_run must be at least 1"):
            mmvet.main(argv + ["--num_run", "0"])
        with pytest.raises(ValueError, match="--prompt-file 'nope.txt' does not exist"):
            mmvet.main(argv + ["--prompt-file", "nope.txt"])
        with pytest.raises(ValueError, match=r"--output-json .* is the same file as --model results"):
            mmvet.main(argv + ["--output-json", str(tmp_path / "results" / "m.json")])


def test_cli_without_a_key_is_one_line(tmp_path: Path) -> None:
    argv = _layout(tmp_path)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENAI_")}
    done = subprocess.run([sys.executable, "-m", "llava.eval.eval_mmvet", *argv], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].endswith("set OPENAI_API_KEY to the judge's API key (and OPENAI_BASE_URL for another OpenAI-compatible endpoint)")
    assert "Traceback" not in done.stderr


def test_mmvet_script_answers_converts_and_grades(tiny_llava_checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/v1_5/eval/mmvet.sh end to end in a playground: the real loader on a tiny checkpoint, the
    converter, then the grader against the fake judge, ending in $RESULTS/mmvet.json."""
    from PIL import Image

    root = Path(__file__).resolve().parents[3]
    (tmp_path / "scripts").symlink_to(root / "scripts")
    data = tmp_path / "playground" / "data" / "eval" / "mm-vet"
    (data / "images").mkdir(parents=True)
    questions = {qid: record for qid, record in QUESTIONS.items() if qid in ("v1_0", "v1_3")}
    with (data / "llava-mm-vet.jsonl").open("w") as handle:
        for index, (qid, record) in enumerate(questions.items()):
            Image.new("RGB", (40, 30), (40 * index, 90, 200)).save(data / "images" / record["imagename"])
            handle.write(json.dumps({"question_id": int(qid[3:]), "image": record["imagename"], "text": record["question"]}) + "\n")
    (data / "mm-vet.json").write_text(json.dumps(questions))
    checkpoint = tiny_llava_checkpoint("mlp2x_gelu")
    with serving(lambda body: "0.5", monkeypatch) as judge:
        env = {**os.environ, "MODEL_PATH": str(checkpoint), "CKPT": "tiny",
               "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        done = subprocess.run(["bash", str(root / "scripts" / "v1_5" / "eval" / "mmvet.sh")], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(judge.requests) == 2
    converted = json.loads((data / "results" / "tiny.json").read_text())
    assert sorted(converted) == ["v1_0", "v1_3"]
    score = json.loads((tmp_path / "playground" / "data" / "eval" / "results" / "tiny" / "mmvet.json").read_text())
    assert score["score"] == 50.0 and score["capabilities"]["math"] == 50.0
