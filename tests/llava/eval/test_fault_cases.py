"""Regression tests for the eval fault cases of /work/shared/reference/fault-cases.md (issue 22), one class each:
question records validated before the model loads (L02, L07), decoding values and the device refused up front
(L11, L12, C24), nothing written before the model has loaded (B07, L19), the answers file surviving a full disk
(L20) and damaged or repeated lines, resume tied to the questions' content and every weight folder (P01, P02),
one record of the runtime projector settings (B20, B21), and the scorers' duplicate, missing-answer and
unwritable-output cases (D06, D07, D08). The compare/summarize cases (E01-E10) are in test_compare.py."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from llava.eval import answers as answers_module
from llava.eval import core, model_vqa_loader, run_llava
from llava.eval.provenance import sidecar_path

from .conftest import BenchData
from .test_core import FakeGenerator, read_answers, run

UNWRITABLE = "/sys/llava-eval-test"  # sysfs refuses new files, even to root


def never_loaded(args: Any) -> Any:
    raise AssertionError("the model must not load")


def loader_argv(questions: Path, images: Path, answers: Path, model: str | Path = "/ckpt/llava-tiny", *extra: str) -> list[str]:
    return ["--model-path", str(model), "--question-file", str(questions), "--image-folder", str(images),
            "--answers-file", str(answers), "--temperature", "0", "--conv-mode", "vicuna_v1", *extra]


def write_questions(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


# ------------------------------------------------------------------------------------------------ L02, L07


@pytest.mark.parametrize(("field", "value", "shown"), [
    ("question_id", [1, 2], r"'question_id' must be a string or an integer, got \[1, 2\] \(list\)"),  # L02
    ("text", 42, r"'text' must be a string, got 42 \(int\)"),  # L07
    ("image", None, r"'image' must be a string, got None \(NoneType\)"),
    ("question_id", True, r"'question_id' must be a string or an integer, got True \(bool\)"),
])
def test_question_records_are_checked_before_the_model_loads(bench_data: BenchData, tmp_path: Path, field, value, shown) -> None:
    records = [{"question_id": 0, "image": "red.png", "text": "a"}, {"question_id": 1, "image": "red.png", "text": "b"}]
    records[1][field] = value
    questions = write_questions(tmp_path / "q.jsonl", records)
    answers = tmp_path / "a.jsonl"
    with pytest.raises(ValueError, match=rf"^question file '.*q.jsonl', 2nd question: {shown}$"):
        core.run_loader(model_vqa_loader.SPEC, loader_argv(questions, bench_data.images, answers), generator_factory=never_loaded)
    assert not answers.exists() and not sidecar_path(answers).exists()


def test_a_question_in_a_later_chunk_is_checked_by_every_chunk(bench_data: BenchData, tmp_path: Path) -> None:
    records = [{"question_id": i, "image": "red.png", "text": "q"} for i in range(4)]
    records[3]["text"] = ["not", "text"]
    questions = write_questions(tmp_path / "q.jsonl", records)
    argv = loader_argv(questions, bench_data.images, tmp_path / "a.jsonl", "/ckpt/llava-tiny", "--num-chunks", "2", "--chunk-idx", "0")
    with pytest.raises(ValueError, match="4th question: 'text' must be a string"):
        core.run_loader(model_vqa_loader.SPEC, argv, generator_factory=never_loaded)


def test_two_questions_with_one_identity_are_refused_naming_both(bench_data: BenchData, tmp_path: Path) -> None:
    # MME asks two questions per image under one id: allowed; the same question twice is not
    records = [{"question_id": "a/1.png", "image": "red.png", "text": "Is it red?"},
               {"question_id": "a/1.png", "image": "red.png", "text": "Is it blue?"},
               {"question_id": "a/1.png", "image": "red.png", "text": "Is it red?"}]
    questions = write_questions(tmp_path / "q.jsonl", records)
    with pytest.raises(ValueError, match=r"the 3rd question repeats the 1st \(question_id 'a/1.png' and the same prompt\)"):
        core.run_loader(model_vqa_loader.SPEC, loader_argv(questions, bench_data.images, tmp_path / "a.jsonl"), generator_factory=never_loaded)
    write_questions(questions, records[:2])
    result = run(model_vqa_loader, loader_argv(questions, bench_data.images, tmp_path / "a.jsonl"))
    assert result.answered == 2


# ------------------------------------------------------------------------------------------------ L11, L12, C24


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--temperature", "-1", "--temperature must be a finite number >= 0"),  # L11
    ("--max_new_tokens", "-5", "--max_new_tokens must be an integer >= 1"),  # L12
    ("--num_beams", "0", "--num_beams must be an integer >= 1"),
    ("--top_p", "1.5", r"--top_p must be a number in \(0, 1\]"),
])
def test_decoding_values_are_refused_before_loading(bench_data: BenchData, tmp_path: Path, tiny_image_file: Path, flag, value, message) -> None:
    answers = tmp_path / "a.jsonl"
    with pytest.raises(ValueError, match=message):
        core.run_loader(model_vqa_loader.SPEC, loader_argv(bench_data.vqa, bench_data.images, answers, "/ckpt/llava-tiny", flag, value),
                        generator_factory=never_loaded)
    assert not answers.exists() and not sidecar_path(answers).exists()
    # run_llava checks them before its model loads too (the model path does not exist)
    with pytest.raises(ValueError, match=message):
        run_llava.main(["--model-path", str(tmp_path / "absent"), "--image-file", str(tiny_image_file), "--query", "q", flag, value])


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_cuda_without_a_gpu_is_refused_by_loaders_and_run_llava(no_gpu, bench_data: BenchData, tmp_path: Path, tiny_image_file: Path) -> None:  # C24
    answers = tmp_path / "a.jsonl"
    with pytest.raises(ValueError, match="--device cuda needs a GPU"):
        model_vqa_loader.main(loader_argv(bench_data.vqa, bench_data.images, answers, "/ckpt/llava-tiny", "--device", "cuda"))
    assert not answers.exists() and not sidecar_path(answers).exists()
    with pytest.raises(ValueError, match="--device cuda needs a GPU"):
        run_llava.main(["--model-path", str(tmp_path / "absent"), "--image-file", str(tiny_image_file), "--query", "q", "--device", "cuda"])


# ------------------------------------------------------------------------------------------------ B07, B20, B21


@pytest.fixture(scope="module")
def mqt_checkpoint(tiny_llava_checkpoint) -> Path:
    return tiny_llava_checkpoint("mqt_k9")


def test_a_run_refused_after_loading_leaves_nothing_that_blocks_the_fixed_run(mqt_checkpoint: Path, bench_data: BenchData, tmp_path: Path) -> None:  # B07
    answers = tmp_path / "a.jsonl"
    common = loader_argv(bench_data.vqa, bench_data.images, answers, mqt_checkpoint, "--device", "cpu", "--max_new_tokens", "2")
    with pytest.raises(ValueError, match="999"):  # refused by the compressor once the model has loaded
        model_vqa_loader.main(common + ["--mm_mqt_num_tokens", "999"])
    assert not answers.exists() and not sidecar_path(answers).exists()
    result = model_vqa_loader.main(common + ["--mm_mqt_num_tokens", "8"])
    assert result.answered == len(bench_data.vqa_ids)
    assert json.loads(sidecar_path(answers).read_text())["producer"]["projector_settings"] == {"mm_mqt_num_tokens": 8}


def test_two_spellings_of_a_runtime_setting_are_one_setting(bench_data: BenchData, tmp_path: Path) -> None:  # B20
    answers = tmp_path / "a.jsonl"
    argv = loader_argv(bench_data.vqa, bench_data.images, answers)
    with pytest.raises(KeyboardInterrupt):
        run(model_vqa_loader, argv + ["--mm_mqt_num_tokens", "8"], FakeGenerator(fail_on=3))
    result = run(model_vqa_loader, argv + ["--projector-setting", "mm_mqt_num_tokens=08"])
    assert result.already_answered == 2 and result.answered == len(bench_data.vqa_ids) - 2
    with pytest.raises(ValueError, match=r"projector_settings \{'mm_mqt_num_tokens': 8\} -> \{'mm_mqt_num_tokens': 4\}"):
        run(model_vqa_loader, argv + ["--projector-setting", "mm_mqt_num_tokens=4"])


@pytest.mark.parametrize(("flags", "message"), [
    (["--projector-setting", "mm_mqt_num_tokens=4", "--mm_mqt_num_tokens", "8"],  # B21
     "--mm_mqt_num_tokens 8 contradicts --projector-setting mm_mqt_num_tokens=4; give each projector setting once"),
    (["--projector-setting", "mm_mqt_num_tokens=4", "--projector-setting", "mm_mqt_num_tokens=5"], "contradicts"),
    (["--mm_mqt_num_tokens", "0"], "mm_mqt_num_tokens must be between 1 and inf, got '0'"),  # B02, now before loading
    (["--projector-setting", "no_such_key=1"], "'no_such_key' is not a runtime setting of any installed compressor"),
])
def test_contradicting_or_bad_settings_are_refused_before_loading(bench_data: BenchData, tmp_path: Path, flags, message) -> None:
    answers = tmp_path / "a.jsonl"
    with pytest.raises(ValueError, match=message):
        core.run_loader(model_vqa_loader.SPEC, loader_argv(bench_data.vqa, bench_data.images, answers, "/ckpt/llava-tiny", *flags),
                        generator_factory=never_loaded)
    assert not answers.exists()


# ------------------------------------------------------------------------------------------------ L19, overwrite


def test_overwrite_keeps_the_old_answers_until_a_new_one_exists(bench_data: BenchData, tmp_path: Path) -> None:  # L19
    answers = tmp_path / "a.jsonl"
    run(model_vqa_loader, loader_argv(bench_data.vqa, bench_data.images, answers))
    before, record = answers.read_bytes(), sidecar_path(answers).read_bytes()
    with pytest.raises(ValueError, match="does not exist"):  # a typo in --model-path: the real loading path
        model_vqa_loader.main(loader_argv(bench_data.vqa, bench_data.images, answers, tmp_path / "llava-typo", "--overwrite", "--device", "cpu"))
    assert answers.read_bytes() == before and sidecar_path(answers).read_bytes() == record
    # a run killed after its first new answer: the file holds that answer and the new settings, and resumes
    with pytest.raises(KeyboardInterrupt):
        run(model_vqa_loader, loader_argv(bench_data.vqa, bench_data.images, answers, "/ckpt/llava-tiny", "--overwrite", "--max_new_tokens", "9"),
            FakeGenerator(fail_on=2))
    assert len(read_answers(answers)) == 1
    assert json.loads(sidecar_path(answers).read_text())["producer"]["max_new_tokens"] == 9
    result = run(model_vqa_loader, loader_argv(bench_data.vqa, bench_data.images, answers, "/ckpt/llava-tiny", "--max_new_tokens", "9"))
    assert result.already_answered == 1 and len(read_answers(answers)) == len(bench_data.vqa_ids)
    assert not list(tmp_path.glob(".a.jsonl.*"))  # no temporary file left behind


def test_overwrite_with_every_question_skipped_leaves_an_empty_file(bench_data: BenchData, tmp_path: Path) -> None:
    answers = tmp_path / "a.jsonl"
    run(model_vqa_loader, loader_argv(bench_data.vqa, bench_data.images, answers))
    argv = loader_argv(bench_data.vqa, tmp_path / "no-images", answers, "/ckpt/llava-tiny", "--overwrite", "--skip-missing")
    result = core.run_loader(model_vqa_loader.SPEC, argv, generator_factory=never_loaded)  # nothing left to answer
    assert result.answered == 0 and len(result.skipped) == len(bench_data.vqa_ids)
    assert answers.read_text() == ""
    assert len(json.loads(sidecar_path(answers).read_text())["skipped"]) == len(bench_data.vqa_ids)


# ------------------------------------------------------------------------------------------------ L20, damaged lines


def test_a_full_disk_is_one_sentence_and_resume_completes(bench_data: BenchData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # L20
    answers = tmp_path / "a.jsonl"
    real_write, calls = os.write, []

    def filling(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 3:  # the third answer hits a full disk after half of its bytes
            real_write(fd, bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(answers_module.os, "write", filling)
    with pytest.raises(ValueError, match=r"cannot append to --answers-file .*\(no space left on the device\); the answers written so far "
                                         "are kept: free some space and run the same command again to resume"):
        run(model_vqa_loader, loader_argv(bench_data.vqa, bench_data.images, answers, "/ckpt/llava-tiny", "--batch-size", "6"))
    assert len(read_answers(answers)) == 2  # the half-written third answer was undone
    monkeypatch.setattr(answers_module.os, "write", real_write)  # space freed
    result = run(model_vqa_loader, loader_argv(bench_data.vqa, bench_data.images, answers))
    assert result.already_answered == 2
    ids = [a["question_id"] for a in read_answers(answers)]
    assert sorted(map(str, ids)) == sorted(map(str, bench_data.vqa_ids)) and len(ids) == len(set(map(str, ids)))


def test_damaged_lines_are_set_aside_and_every_intact_answer_kept(bench_data: BenchData, tmp_path: Path, caplog) -> None:
    answers = tmp_path / "a.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run(model_vqa_loader, loader_argv(bench_data.vqa, bench_data.images, answers), FakeGenerator(fail_on=4))
    intact = answers.read_text().splitlines()
    answers.write_text(intact[0] + "\n" + '{"question_id": 9, "pro\n' + "\n".join(intact[1:]) + "\n" + '{"no_id": 1}\n')
    result = run(model_vqa_loader, loader_argv(bench_data.vqa, bench_data.images, answers))
    assert result.already_answered == 3 and len(read_answers(answers)) == len(bench_data.vqa_ids)
    assert read_answers(answers)[:3] == [json.loads(line) for line in intact]
    assert (tmp_path / "a.jsonl.rejected").read_text() == '{"question_id": 9, "pro\n{"no_id": 1}\n'
    assert "2 damaged line(s) set aside" in caplog.text


def test_two_answers_with_one_identity_in_the_file_are_refused(bench_data: BenchData, tmp_path: Path) -> None:
    answers = tmp_path / "a.jsonl"
    run(model_vqa_loader, loader_argv(bench_data.vqa, bench_data.images, answers))
    text = answers.read_text().splitlines()
    answers.write_text("\n".join(text + [text[1]]) + "\n")
    with pytest.raises(ValueError, match=rf"line {len(text) + 1} repeats the answer on line 2 \(question_id 'q1' and the same prompt\)"):
        run(model_vqa_loader, loader_argv(bench_data.vqa, bench_data.images, answers))


# ------------------------------------------------------------------------------------------------ P01, P02


def test_resume_compares_the_questions_content_not_the_file_name(bench_data: BenchData, tmp_path: Path) -> None:  # P01
    answers = tmp_path / "a.jsonl"
    questions = write_questions(tmp_path / "q.jsonl", [{"question_id": i, "image": "red.png", "text": "What colour is it?"} for i in range(4)])
    with pytest.raises(KeyboardInterrupt):
        run(model_vqa_loader, loader_argv(questions, bench_data.images, answers), FakeGenerator(fail_on=3))
    write_questions(questions, [{"question_id": i, "image": "red.png", "text": f"How many squares? ({i})"} for i in range(4)])
    with pytest.raises(ValueError, match=r"produced with other settings \(questions '[0-9a-f]+' -> '[0-9a-f]+'\); pass --overwrite"):
        run(model_vqa_loader, loader_argv(questions, bench_data.images, answers))
    # the same records under another name resume
    write_questions(questions, [{"question_id": i, "image": "red.png", "text": "What colour is it?"} for i in range(4)])
    moved = questions.rename(tmp_path / "renamed.jsonl")
    assert run(model_vqa_loader, loader_argv(moved, bench_data.images, answers)).already_answered == 2


@pytest.fixture
def checkpoint_with_tower(tmp_path: Path) -> tuple[Path, Path]:
    tower = tmp_path / "clip-tower"
    tower.mkdir()
    (tower / "config.json").write_text(json.dumps({"model_type": "clip_vision_model"}))
    (tower / "model.safetensors").write_bytes(b"\1" * (2 << 20))
    checkpoint = tmp_path / "llava-v1.5-tiny"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "llava_llama", "mm_vision_tower": str(tower)}))
    (checkpoint / "model.safetensors").write_bytes(b"\0" * 64)
    return checkpoint, tower


@pytest.mark.parametrize("change", ["nothing", "tower weights", "tower config", "model base", "weights replaced by mv"])
def test_resume_covers_the_tower_and_the_base_folder(checkpoint_with_tower, bench_data: BenchData, tmp_path: Path, change: str) -> None:  # P02
    checkpoint, tower = checkpoint_with_tower
    base = tmp_path / "vicuna-base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    answers = checkpoint / "answers" / "a.jsonl"  # answers kept inside the checkpoint folder do not change its fingerprint
    argv = loader_argv(bench_data.vqa, bench_data.images, answers, checkpoint, "--model-base", str(base))
    with pytest.raises(KeyboardInterrupt):
        run(model_vqa_loader, argv, FakeGenerator(fail_on=3))
    if change == "nothing":
        assert run(model_vqa_loader, argv).already_answered == 2
        return
    if change == "tower weights":  # other weights, same size, same path
        stat = (tower / "model.safetensors").stat()
        (tower / "model.safetensors").write_bytes(b"\2" * (2 << 20))
        os.utime(tower / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the old time
    elif change == "tower config":
        (tower / "config.json").write_text(json.dumps({"model_type": "clip_vision_model", "image_size": 336}))
    elif change == "model base":
        (base / "config.json").write_text('{"hidden_size": 8}')
    else:  # a file of the same size and time moved over the weights (new inode)
        other = checkpoint / "other.bin.tmp"
        other.write_bytes(b"\1" * 64)
        stat = (checkpoint / "model.safetensors").stat()
        os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        os.replace(other, checkpoint / "model.safetensors")
    with pytest.raises(ValueError, match=r"produced with other settings \(model.*\); pass --overwrite"):
        run(model_vqa_loader, argv)


# ------------------------------------------------------------------------------------------------ D06, D07, D08 (Q-Bench)


QBENCH = [{"img_path": f"{i}.png", "question": f"q{i}", "candidates": ["Yes", "No"], "correct_ans": "Yes", "type": 0, "concern": 0}
          for i in range(4)]


def _qbench_answers(path: Path, picks: list[tuple[int, str]]) -> Path:
    path.write_text("".join(json.dumps({**QBENCH[i], "question_id": i, "prompt": "p", "text": reply, "response": reply}) + "\n"
                            for i, reply in picks))
    return path


def test_qbench_scorer_refuses_repeated_answers(tmp_path: Path) -> None:  # D06
    from llava.eval import eval_qbench

    answers = _qbench_answers(tmp_path / "a.jsonl", [(0, "A")] * 6 + [(1, "B"), (2, "B"), (3, "B")])
    with pytest.raises(ValueError, match=r"line 2 repeats the answer on line 1 \(question_id 0\)"):
        eval_qbench.main(["--answers-file", str(answers)])


def test_qbench_scorer_reports_missing_answers(tmp_path: Path, caplog) -> None:  # D07
    from llava.eval import eval_qbench

    answers = _qbench_answers(tmp_path / "a.jsonl", [(0, "A")])  # a run killed after 1 of 4 questions
    questions = tmp_path / "llvisionqa_dev.json"
    questions.write_text(json.dumps(QBENCH))
    scores = eval_qbench.main(["--answers-file", str(answers), "--questions-file", str(questions)])
    assert scores["accuracy"] == 25.0 and scores["missing"] == 3 and scores["questions"] == 4  # 1 right of 4
    assert "Q-Bench: 3 of 4 questions have no answer (1, 2, 3); they count as wrong" in caplog.text


@pytest.mark.parametrize("output", [UNWRITABLE + "/qbench.json", "{answers}/qbench.json", "{tmp}"])
def test_qbench_scorer_checks_its_output_before_scoring(tmp_path: Path, output: str) -> None:  # D08
    from llava.eval import eval_qbench

    answers = _qbench_answers(tmp_path / "a.jsonl", [(0, "A")])
    target = output.format(answers=answers, tmp=tmp_path)
    with pytest.raises(ValueError, match=r"^--output-json .* (cannot be written|is a folder)"):
        eval_qbench.main(["--answers-file", str(answers), "--output-json", target])
