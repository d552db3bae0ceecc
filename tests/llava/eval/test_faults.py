"""Fault cases of the eval loaders (issue 14): answers produced by other settings are never mixed in on
resume (item 4), and decompression bombs or undecodable images are one sentence, or skipped and recorded with
``--skip-missing``, also on resume (item 11)."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest

from llava.eval import core, model_vqa, model_vqa_loader, model_vqa_mmbench
from llava.eval.provenance import sidecar_path
from llava.mm_utils import ImageUnreadable, open_image

from .conftest import BenchData
from .images_faults import over_limit, write_bad_images
from .test_core import FakeGenerator, read_answers, run


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> Path:
    """A checkpoint folder's identity files (the stand-in generator never loads them)."""
    folder = tmp_path / "llava-v1.5-tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llava_llama", "hidden_size": 8}))
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    return folder


def _argv(data: BenchData, checkpoint: Path, answers: Path, *extra: str) -> list[str]:
    return ["--model-path", str(checkpoint), "--question-file", str(data.vqa), "--image-folder", str(data.images),
            "--answers-file", str(answers), "--temperature", "0", "--conv-mode", "vicuna_v1", *extra]


def _first_half(data: BenchData, answers: Path, checkpoint: Path) -> bytes:
    generator = FakeGenerator(fail_on=2)
    with pytest.raises(KeyboardInterrupt):
        run(model_vqa_loader, _argv(data, checkpoint, answers), generator)
    return answers.read_bytes()


# ------------------------------------------------------------------------------------------------ item 4


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (["--temperature", "0.7"], "temperature 0.0 -> 0.7"),
        (["--max_new_tokens", "16"], "max_new_tokens 128 -> 16"),
        (["--num_beams", "3"], "num_beams 1 -> 3"),
        (["--top_p", "0.5"], "top_p None -> 0.5"),
        (["--conv-mode", "llava_v1"], "conv_mode 'vicuna_v1' -> 'llava_v1'"),
    ],
)
def test_resume_refuses_other_decoding_settings(bench_data: BenchData, checkpoint_dir: Path, tmp_path: Path, change, named) -> None:
    answers = tmp_path / "a.jsonl"
    before = _first_half(bench_data, answers, checkpoint_dir)
    argv = _argv(bench_data, checkpoint_dir, answers) + change
    with pytest.raises(ValueError, match=f"produced with other settings \\({named}\\); pass --overwrite"):
        run(model_vqa_loader, argv)
    assert answers.read_bytes() == before
    result = run(model_vqa_loader, argv + ["--overwrite"])
    assert result.answered == len(bench_data.vqa_ids) and result.already_answered == 0


def test_resume_refuses_a_changed_checkpoint(bench_data: BenchData, checkpoint_dir: Path, tmp_path: Path) -> None:
    answers = tmp_path / "a.jsonl"
    before = _first_half(bench_data, answers, checkpoint_dir)
    (checkpoint_dir / "model.safetensors").write_bytes(b"\1" * 80)  # re-trained: other weights
    with pytest.raises(ValueError, match="produced with other settings \\(model .*fingerprint.*\\); pass --overwrite"):
        run(model_vqa_loader, _argv(bench_data, checkpoint_dir, answers))
    assert answers.read_bytes() == before


def test_resume_with_the_same_settings_completes(bench_data: BenchData, checkpoint_dir: Path, tmp_path: Path) -> None:
    answers = tmp_path / "a.jsonl"
    _first_half(bench_data, answers, checkpoint_dir)
    result = run(model_vqa_loader, _argv(bench_data, checkpoint_dir, answers, "--batch-size", "3"))  # batch size is neutral
    assert result.already_answered == 1 and result.answered == len(bench_data.vqa_ids) - 1
    assert sorted(map(str, (a["question_id"] for a in read_answers(answers)))) == sorted(map(str, bench_data.vqa_ids))
    record = json.loads(sidecar_path(answers).read_text())
    assert record["producer"]["temperature"] == 0.0 and record["producer"]["conv_mode"] == "vicuna_v1"
    assert record["producer"]["model"]["path"] == os.path.realpath(checkpoint_dir)


def test_answers_without_a_record_are_not_mixed(bench_data: BenchData, checkpoint_dir: Path, tmp_path: Path) -> None:
    answers = tmp_path / "a.jsonl"
    answers.write_text(json.dumps({"question_id": 0, "prompt": "p", "text": "old", "answer_id": "x",
                                   "model_id": "llava-v1.5-tiny", "metadata": {}}) + "\n")
    with pytest.raises(ValueError, match="holds answers but no record of the model and settings .*pass --overwrite to start again, or choose another --answers-file"):
        run(model_vqa_loader, _argv(bench_data, checkpoint_dir, answers))


# ------------------------------------------------------------------------------------------------ item 11


@pytest.fixture
def bad_question_file(bench_data: BenchData, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    folder = tmp_path / "images"
    reasons = write_bad_images(folder)
    (folder / "red.png").write_bytes((bench_data.images / "red.png").read_bytes())
    questions = [{"question_id": "ok", "image": "red.png", "text": "a"}]
    questions += [{"question_id": name, "image": name, "text": "b"} for name in reasons]
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in questions))
    return path, reasons


def test_bad_images_are_one_sentence(bad_question_file, tmp_path: Path) -> None:
    questions, reasons = bad_question_file
    for name, reason in reasons.items():
        single = tmp_path / f"{name}.jsonl"
        single.write_text(json.dumps({"question_id": name, "image": name, "text": "q"}) + "\n")
        argv = ["--question-file", str(single), "--image-folder", str(questions.parent / "images"),
                "--answers-file", str(tmp_path / f"{name}.answers.jsonl")]
        with pytest.raises(ValueError, match=f"^question '{name}': image file .*{name}' .*{reason}.*--skip-missing") as caught:
            run(model_vqa, argv)
        assert "\n" not in str(caught.value)


def test_skip_missing_records_bad_images_and_resumes(bad_question_file, tmp_path: Path) -> None:
    questions, reasons = bad_question_file
    answers = tmp_path / "a.jsonl"
    argv = ["--question-file", str(questions), "--image-folder", str(questions.parent / "images"),
            "--answers-file", str(answers), "--skip-missing", "--batch-size", "2"]
    first = run(model_vqa, argv)
    assert sorted(first.skipped) == sorted(reasons) and first.answered == 1
    skipped = json.loads(sidecar_path(answers).read_text())["skipped"]
    assert {json.loads(key): text for key, text in skipped.items()}.keys() == set(reasons)
    assert all(reason in skipped[json.dumps(name)] for name, reason in reasons.items())
    # Resuming neither crashes nor answers twice; the bad questions stay recorded.
    again = run(model_vqa, argv)
    assert again.already_answered == 1 and again.answered == 0 and sorted(again.skipped) == sorted(reasons)
    assert [a["question_id"] for a in read_answers(answers)] == ["ok"]
    # A fixed image is answered on the next resume and leaves the record.
    (questions.parent / "images" / "text.png").write_bytes((questions.parent / "images" / "red.png").read_bytes())
    third = run(model_vqa, argv)
    assert third.answered == 1 and json.dumps("text.png") not in json.loads(sidecar_path(answers).read_text())["skipped"]


def test_embedded_base64_bomb(tmp_path: Path) -> None:
    bomb = base64.b64encode(over_limit()).decode()
    path = tmp_path / "bomb.tsv"
    path.write_text(f"index\tquestion\thint\tA\tB\timage\n5\tq?\tnan\tx\ty\t{bomb}\n")
    with pytest.raises(ValueError, match="question 5: the embedded base64 image has more pixels .* decompression bomb"):
        run(model_vqa_mmbench, ["--question-file", str(path), "--answers-file", str(tmp_path / "a.jsonl")])
    result = run(model_vqa_mmbench, ["--question-file", str(path), "--answers-file", str(tmp_path / "b.jsonl"), "--skip-missing"])
    assert result.skipped == [5] and result.answered == 0


def test_open_image_refusals(tmp_path: Path) -> None:
    reasons = write_bad_images(tmp_path)
    for name, reason in reasons.items():
        with pytest.raises(ImageUnreadable, match=reason):
            open_image(tmp_path / name)
        with pytest.raises(ImageUnreadable, match=reason):
            open_image((tmp_path / name).read_bytes())
    with pytest.raises(ImageUnreadable, match="does not exist"):
        open_image(tmp_path / "absent.png")
    image = open_image(_tiny_png())
    assert image.mode == "RGB" and image.size == (3, 2)


def _tiny_png() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (3, 2), 7).save(buffer, format="PNG")
    return buffer.getvalue()


def test_run_llava_refuses_bad_images_before_loading(tmp_path: Path) -> None:
    from llava.eval import run_llava

    reasons = write_bad_images(tmp_path)
    for name, reason in reasons.items():
        argv = ["--model-path", str(tmp_path / "no-model"), "--image-file", str(tmp_path / name), "--query", "q"]
        with pytest.raises(ValueError, match=f"image file .*{name}' .*{reason}"):
            run_llava.main(argv)


def test_serve_uploads_refuse_bombs_by_the_shared_rule(tmp_path: Path) -> None:
    from llava.serve.images import ImageLimits, ImageRejected, open_image_bytes

    generous = ImageLimits(max_pixels=10**12, max_bytes=10**9)  # only PIL's bomb guard stands in the way
    with pytest.raises(ImageRejected, match="far more pixels"):
        open_image_bytes(over_limit(), generous)


# ------------------------------------------------------------------------------------------------ the stranger walk


def test_unknown_conv_mode_is_refused_before_the_model_loads(bench_data: BenchData, checkpoint_dir: Path, tmp_path: Path) -> None:
    def no_model(args):
        raise AssertionError("the model was loaded before --conv-mode was checked")

    answers = tmp_path / "a.jsonl"
    argv = _argv(bench_data, checkpoint_dir, answers)
    argv[argv.index("vicuna_v1")] = "vicuna_v2"
    with pytest.raises(ValueError, match="unknown conversation template 'vicuna_v2'; expected one of .*vicuna_v1"):
        core.run_loader(model_vqa_loader.SPEC, argv, generator_factory=no_model)
    assert not answers.exists()


def test_run_llava_refuses_an_unknown_conv_mode_before_loading(tmp_path: Path) -> None:
    from llava.eval import run_llava

    # The model path does not exist: reaching the loader would name it instead of the template.
    argv = ["--model-path", str(tmp_path / "no-model"), "--image-file", str(tmp_path / "x.png"), "--query", "q",
            "--conv-mode", "llava-v1"]
    with pytest.raises(ValueError, match="unknown conversation template 'llava-v1'"):
        run_llava.main(argv)


def test_mmbench_refuses_a_language_it_has_no_instruction_for(bench_data: BenchData, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # Upstream prompted in English for any --lang but "cn", so "--lang zh" silently asked MMBench-CN in English.
    argv = ["--question-file", str(bench_data.mmbench), "--answers-file", str(tmp_path / "a.jsonl"),
            "--single-pred-prompt", "--lang", "zh"]
    with pytest.raises(SystemExit) as stopped:
        run(model_vqa_mmbench, argv)
    assert stopped.value.code == 2
    assert "--lang: invalid choice: 'zh'" in capsys.readouterr().err


def test_a_plain_language_model_asked_about_images_is_refused_before_it_loads(
    bench_data: BenchData, tiny_base_llm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It loaded as a language model without an image processor, and the first batch failed in preprocessing
    # ("'NoneType' object is not callable") after the whole load.
    folder = tmp_path / "llava-vicuna-text-only"
    shutil.copytree(tiny_base_llm, folder)
    monkeypatch.setattr(core, "load_generator", lambda *args, **kwargs: pytest.fail("loaded the model"))
    answers = tmp_path / "a.jsonl"
    with pytest.raises(ValueError, match=r"llava-vicuna-text-only' is a plain language model"):
        core.run_loader(model_vqa_loader.SPEC, _argv(bench_data, folder, answers))
    assert not answers.exists()
