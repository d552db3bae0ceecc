"""Converters and scorers never overwrite their own inputs, and write outputs atomically (issue 14, item 2)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llava.eval import convert, eval_pope, eval_science_qa, model_vqa_loader, summarize
from llava.eval.files import atomic_output, check_outputs, same_file, write_json

from .test_scorers import answer, write_jsonl


def _answers(path: Path) -> Path:
    return write_jsonl(path, [answer(1, "Yes."), answer(2, "Two")])


def _spellings(tmp_path: Path, src: Path) -> list[str]:
    """The same file named three ways: as given, with ``./`` and ``..`` segments, and through a symlink."""
    link = tmp_path / "link.jsonl"
    link.symlink_to(src)
    roundabout = os.path.join(str(src.parent), ".", "sub", "..", src.name)
    (src.parent / "sub").mkdir(exist_ok=True)
    return [str(src), roundabout, str(link)]


@pytest.mark.parametrize("main", [convert.gqa_main, convert.mmvet_main], ids=["gqa", "mmvet"])
def test_src_dst_converters_refuse_dst_equal_to_src(tmp_path: Path, main) -> None:
    src = _answers(tmp_path / "answers.jsonl")
    before = src.read_bytes()
    for dst in _spellings(tmp_path, src):
        with pytest.raises(ValueError, match=r"^--dst .* is the same file as --src .*; writing it would destroy the input"):
            main(["--src", str(src), "--dst", dst])
    assert src.read_bytes() == before


def test_upload_converters_refuse_an_input_as_output(tmp_path: Path) -> None:
    questions = write_jsonl(tmp_path / "q.jsonl", [{"question_id": i, "image": f"{i}.jpg", "text": "q"} for i in (1, 2)])
    results = _answers(tmp_path / "a.jsonl")
    before = results.read_bytes()
    for main in (convert.vizwiz_main, convert.seed_main):
        with pytest.raises(ValueError, match="--result-upload-file .* is the same file as --result-file"):
            main(["--annotation-file", str(questions), "--result-file", str(results), "--result-upload-file", str(results)])
    assert results.read_bytes() == before


def test_scorer_outputs_refuse_inputs(tmp_path: Path) -> None:
    results = _answers(tmp_path / "a.jsonl")
    before = results.read_bytes()
    with pytest.raises(ValueError, match="--output-json .* is the same file as --result-file"):
        eval_pope.main(["--annotation-dir", str(tmp_path), "--question-file", str(tmp_path / "q.jsonl"),
                        "--result-file", str(results), "--output-json", str(results)])
    with pytest.raises(ValueError, match="--output-result .* is the same file as --result-file"):
        eval_science_qa.main(["--base-dir", str(tmp_path), "--result-file", str(results), "--output-result", str(results)])
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({"gqa": 60.0}))
    with pytest.raises(ValueError, match="--output-json .* is the same file as results"):
        summarize.main([str(scores), "--output-json", str(scores)])
    assert results.read_bytes() == before and json.loads(scores.read_text()) == {"gqa": 60.0}


def test_loader_refuses_answers_file_equal_to_question_file(tmp_path: Path) -> None:
    questions = write_jsonl(tmp_path / "q.jsonl", [{"question_id": 1, "image": "x.png", "text": "q"}])
    before = questions.read_bytes()
    with pytest.raises(ValueError, match="--answers-file .* is the same file as --question-file"):
        model_vqa_loader.main(["--question-file", str(questions), "--answers-file", str(questions), "--overwrite"])
    assert questions.read_bytes() == before


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = write_json(tmp_path / "out.json", {"old": 1})
    with pytest.raises(TypeError):
        write_json(target, {"new": object()})  # not JSON-serialisable: fails after the file was opened
    with pytest.raises(RuntimeError):
        with atomic_output(target) as handle:
            handle.write('{"half": ')
            raise RuntimeError("killed midway")
    assert json.loads(target.read_text()) == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_same_file_and_check_outputs(tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    a.write_text("{}")
    hard = tmp_path / "hard.json"
    os.link(a, hard)
    assert same_file(a, hard) and same_file(a, str(tmp_path / "." / "a.json"))
    assert not same_file(a, tmp_path / "missing.json")
    check_outputs({"--src": a, "--other": None}, {"--dst": tmp_path / "b.json", "--unused": None})
