"""Every scorer and converter on the fault classes of issue 22: two answers with one identity (D06, by each
benchmark's rule), an unwritable or folder output checked before scoring (D08), and a file of another benchmark
(one sentence naming the fields expected). Inputs are upstream's formats from ``benchmarks.py``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llava.eval import convert, eval_gqa, eval_mmbench, eval_mme, eval_pope, eval_qbench, eval_science_qa, eval_textvqa

from . import benchmarks

UNWRITABLE = "/sys/llava-eval-test/score.json"  # sysfs refuses new files, even to root


def answers_for(questions: list[dict[str, Any]], path: Path, *, repeat: int | None = None, **extra: Any) -> Path:
    """An answers file for ``questions`` (text "yes"), with line ``repeat`` (from 0) written twice."""
    lines = [{"question_id": q["question_id"], "prompt": q["text"], "text": "yes", **extra} for q in questions]
    if repeat is not None:
        lines.insert(repeat + 1, dict(lines[repeat], answer_id="again"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def pope(root: Path, repeat: int | None, out: str | None = None) -> Any:
    data = benchmarks.pope(root)
    answers = answers_for(data["questions"], root / "a.jsonl", repeat=repeat)
    argv = ["--annotation-dir", str(root / "pope/coco"), "--question-file", str(root / "pope/llava_pope_test.jsonl"),
            "--result-file", str(answers)]
    return eval_pope.main(argv + (["--output-json", out] if out else []))


def textvqa(root: Path, repeat: int | None, out: str | None = None) -> Any:
    benchmarks.textvqa(root)
    questions = [json.loads(line) for line in (root / "textvqa/llava_textvqa_val_v051_ocr.jsonl").read_text().splitlines()]
    answers = answers_for(questions, root / "a.jsonl", repeat=repeat)
    argv = ["--annotation-file", str(root / "textvqa/TextVQA_0.5.1_val.json"), "--result-file", str(answers)]
    return eval_textvqa.main(argv + (["--output-json", out] if out else []))


def mme(root: Path, repeat: int | None, out: str | None = None) -> Any:
    data = benchmarks.mme(root)
    answers_for(data["questions"], root / "MME/answers/x.jsonl", repeat=repeat)
    return eval_mme.main(["--experiment", "x", "--data-dir", str(root / "MME")] + (["--output-json", out] if out else []))


def sqa(root: Path, repeat: int | None, out: str | None = None) -> Any:
    benchmarks.scienceqa(root)
    questions = [{"question_id": q, "text": "p" if q == "4" else "<image>\np"} for q in ("4", "5", "7")]
    answers = answers_for(questions, root / "a.jsonl", repeat=repeat)
    return eval_science_qa.main(["--base-dir", str(root / "scienceqa"), "--result-file", str(answers)]
                                + (["--output-json", out] if out else []))


def mmbench(root: Path, repeat: int | None, out: str | None = None) -> Any:
    data = benchmarks.mmbench(root)
    questions = [{"question_id": row[0], "text": "p"} for row in data["rows"]]
    answers = answers_for(questions, root / "a.jsonl", repeat=repeat, round_id=0, options=["a", "b"])
    return eval_mmbench.main(["--annotation-file", str(data["table"]), "--result-file", str(answers)]
                             + (["--output-json", out] if out else []))


def qbench(root: Path, repeat: int | None, out: str | None = None) -> Any:
    data = benchmarks.qbench(root)
    lines = [{**record, "question_id": i, "prompt": "p", "text": "A", "response": "A"} for i, record in enumerate(data["records"])]
    if repeat is not None:
        lines.insert(repeat + 1, lines[repeat])
    answers = root / "a.jsonl"
    answers.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return eval_qbench.main(["--answers-file", str(answers), "--questions-file", str(data["file"])] + (["--output-json", out] if out else []))


def gqa_convert(root: Path, repeat: int | None, out: str | None = None) -> Any:
    benchmarks.gqa(root)
    questions = [json.loads(line) for line in (root / "gqa/llava_gqa_testdev_balanced.jsonl").read_text().splitlines()]
    answers = answers_for(questions, root / "merge.jsonl", repeat=repeat)
    return convert.gqa_main(["--src", str(answers), "--dst", out or str(root / "pred.json")])


def seed_convert(root: Path, repeat: int | None, out: str | None = None) -> Any:
    benchmarks.seed(root)
    questions = [json.loads(line) for line in (root / "seed_bench/llava-seed-bench.jsonl").read_text().splitlines()]
    answers = answers_for(questions, root / "merge.jsonl", repeat=repeat)
    return convert.seed_main(["--annotation-file", str(root / "seed_bench/SEED-Bench.json"), "--result-file", str(answers),
                              "--result-upload-file", str(root / "up.jsonl")] + (["--output-json", out] if out else []))


def vizwiz_convert(root: Path, repeat: int | None, out: str | None = None) -> Any:
    data = benchmarks.vizwiz(root)
    answers = answers_for(data["questions"], root / "a.jsonl", repeat=repeat)
    return convert.vizwiz_main(["--annotation-file", str(root / "vizwiz/llava_test.jsonl"), "--result-file", str(answers),
                                "--result-upload-file", out or str(root / "up.json")])


def mmvet_convert(root: Path, repeat: int | None, out: str | None = None) -> Any:
    data = benchmarks.mmvet(root)
    answers = answers_for(data["questions"], root / "a.jsonl", repeat=repeat)
    return convert.mmvet_main(["--src", str(answers), "--dst", out or str(root / "mmvet.json")])


SCORERS: dict[str, Callable[..., Any]] = {
    "pope": pope, "textvqa": textvqa, "mme": mme, "sqa": sqa, "mmbench": mmbench, "qbench": qbench, "gqa (convert)": gqa_convert,
    "seed (convert)": seed_convert, "vizwiz (convert)": vizwiz_convert, "mmvet (convert)": mmvet_convert,
}


@pytest.mark.parametrize("name", list(SCORERS))
def test_a_repeated_answer_is_refused_naming_both_lines(tmp_path: Path, name: str) -> None:  # D06
    with pytest.raises(ValueError, match=r"line 3 repeats the answer on line 2 \(question_id .*\); each question must be answered once"):
        SCORERS[name](tmp_path, repeat=1)


@pytest.mark.parametrize("name", list(SCORERS))
def test_the_same_files_without_the_repeat_are_scored(tmp_path: Path, name: str) -> None:
    assert SCORERS[name](tmp_path, repeat=None) is not None


@pytest.mark.parametrize("name", list(SCORERS))
@pytest.mark.parametrize("out", [UNWRITABLE, "{tmp}"])
def test_an_unwritable_output_is_one_sentence_before_scoring(tmp_path: Path, name: str, out: str) -> None:  # D08
    with pytest.raises(ValueError, match=r"^--(output-json|dst|result-upload-file) .*(cannot be written \(permission denied\)|is a folder)"):
        SCORERS[name](tmp_path, repeat=None, out=out.format(tmp=tmp_path))


def test_mme_two_questions_of_one_image_are_not_a_repeat(tmp_path: Path) -> None:
    record = mme(tmp_path, repeat=None)
    assert record["tasks"]["code_reasoning"] == pytest.approx(100 * (1 / 2 + 0))  # "yes" to both: one right, not both


def test_mme_missing_questions_count_as_wrong(tmp_path: Path, caplog) -> None:
    data = benchmarks.mme(tmp_path)
    answers_for(data["questions"][:3], tmp_path / "MME/answers/x.jsonl")  # the 4th (artwork, "historical?") unanswered
    record = eval_mme.main(["--experiment", "x", "--data-dir", str(tmp_path / "MME")])
    # artwork: "yes" to "religious?" (Yes) is right, the missing one wrong: acc 1/2, acc+ 0
    assert record["tasks"]["artwork"] == pytest.approx(50.0)
    assert "MME: 1 of 4 questions have no answer" in caplog.text


@pytest.mark.parametrize(("run", "message"), [
    (lambda root: convert.seed_main(["--annotation-file", str(root / "textvqa/TextVQA_0.5.1_val.json"), "--result-file",
                                     str(root / "a.jsonl"), "--result-upload-file", str(root / "up.jsonl")]),
     "must be SEED-Bench.json, an object with 'questions' and 'question_type'"),
    (lambda root: convert.vizwiz_main(["--annotation-file", str(root / "llava-bench-in-the-wild/context.jsonl"), "--result-file",
                                       str(root / "a.jsonl"), "--result-upload-file", str(root / "up.json")]),
     r"the 1st record has \['caption', 'id', 'image'\], but each needs 'question_id', 'image' \(upstream's llava_test.jsonl\); "
     "is it the file of another benchmark"),
    (lambda root: eval_gqa.main(["--questions", str(root / "seed_bench/SEED-Bench.json"), "--predictions", str(root / "pred.json")]),
     "must map question ids to objects with an 'answer'"),
    (lambda root: eval_textvqa.main(["--annotation-file", str(root / "seed_bench/SEED-Bench.json"), "--result-file", str(root / "a.jsonl")]),
     r"must be TextVQA_0.5.1_val.json, an object whose 'data' lists records with 'image_id', 'question', 'answers'"),
    (lambda root: eval_pope.main(["--annotation-dir", str(root), "--question-file", str(root / "llava-bench-in-the-wild/context.jsonl"),
                                  "--result-file", str(root / "a.jsonl")]),
     r"each needs 'question_id', 'category'"),
])
def test_a_file_of_another_benchmark_is_one_sentence(tmp_path: Path, run, message: str) -> None:
    benchmarks.textvqa(tmp_path)
    benchmarks.llavabench(tmp_path)
    benchmarks.seed(tmp_path)
    answers_for([{"question_id": 1, "text": "q"}], tmp_path / "a.jsonl")
    (tmp_path / "pred.json").write_text(json.dumps([{"questionId": "1", "prediction": "yes"}]))
    with pytest.raises(ValueError, match=message):
        run(tmp_path)
