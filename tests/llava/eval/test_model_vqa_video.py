"""``python -m llava.eval.model_vqa_video`` on a tiny OneVision-style checkpoint with tiny videos written by PyAV:
answers in model_vqa's format, resumable, missing or undecodable videos stop the run (one sentence naming the
question) or are skipped with --skip-missing, and bad frame flags are refused before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llava.eval import model_vqa_video
from llava.utils import UserError
from llava.video import write_video

FIELDS = ["question_id", "prompt", "text", "answer_id", "model_id", "metadata"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny_qwen_tokenizer_dir) -> Path:
    from llava.testing.tiny import build_tiny_llava_checkpoint, build_tiny_siglip_tower

    root = tmp_path_factory.mktemp("video_loader")
    tower = build_tiny_siglip_tower(root / "siglip", image_size=54, patch_size=6)
    return build_tiny_llava_checkpoint(
        root / "llava-onevision-qwen2-tiny", tower, tiny_qwen_tokenizer_dir, llm="qwen2",
        extra_config={"mm_patch_merge_type": "spatial_unpad"},
    )


def _clip(shift: int) -> np.ndarray:
    frames = np.zeros((12, 32, 48, 3), dtype=np.uint8)
    for index in range(12):
        frames[index, 8:20, (shift + 3 * index) % 36 : (shift + 3 * index) % 36 + 12] = 255
    return frames


@pytest.fixture()
def video_set(tmp_path) -> tuple[Path, Path]:
    folder = tmp_path / "videos"
    folder.mkdir()
    for index in range(2):
        write_video(folder / f"clip{index}.mp4", _clip(5 * index), fps=6)
    (folder / "broken.mp4").write_bytes(b"\x00" * 300)
    questions = tmp_path / "questions.jsonl"
    records = [
        {"question_id": "q0", "video": "clip0.mp4", "text": "Which way does the square move?"},
        {"question_id": "q1", "video": "clip1.mp4", "text": "What colour is the square?"},
        {"question_id": "q2", "video": "absent.mp4", "text": "Anything?"},
        {"question_id": "q3", "video": "broken.mp4", "text": "Anything?"},
    ]
    questions.write_text("".join(json.dumps(record) + "\n" for record in records))
    return folder, questions


def _argv(checkpoint: Path, folder: Path, questions: Path, answers: Path, *extra: str) -> list[str]:
    return [
        "--model-path", str(checkpoint), "--video-folder", str(folder), "--question-file", str(questions),
        "--answers-file", str(answers), "--conv-mode", "qwen_1_5", "--temperature", "0", "--max_new_tokens", "3",
        "--device", "cpu", "--frames-upbound", "4", "--force-sample", *extra,
    ]


def test_answers_skips_and_resumes(checkpoint, video_set, tmp_path) -> None:
    folder, questions = video_set
    answers = tmp_path / "answers" / "ov.jsonl"
    with pytest.raises(UserError, match="question 'q2': video file .*absent.mp4.*--skip-missing"):
        model_vqa_video.main(_argv(checkpoint, folder, questions, answers))
    result = model_vqa_video.main(_argv(checkpoint, folder, questions, answers, "--skip-missing", "--batch-size", "2"))
    assert result.answered == 2 and sorted(result.skipped) == ["q2", "q3"]
    lines = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [line["question_id"] for line in lines] == ["q0", "q1"]
    assert all(list(line) == FIELDS for line in lines)
    assert lines[0]["prompt"] == "Which way does the square move?"
    meta = json.loads(answers.with_name("ov.jsonl.meta.json").read_text())
    assert json.dumps(meta).count('"frames_upbound": 4') == 1
    again = model_vqa_video.main(_argv(checkpoint, folder, questions, answers, "--skip-missing"))
    assert again.already_answered == 2 and again.answered == 0
    other = _argv(checkpoint, folder, questions, answers, "--skip-missing", "--frames-upbound", "2")
    with pytest.raises(ValueError, match="frames_upbound"):  # other sampling settings: refused until --overwrite
        model_vqa_video.main(other)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--frames-upbound", "-1"], "--frames-upbound must be an integer from 0 to 4096"),
        (["--frames-upbound", "0", "--force-sample"], "--force-sample takes --frames-upbound"),
        (["--video-fps", "0"], "--video-fps must be a finite number from 0.001 to 1000"),
        # V04: values that pass "> 0" but overflow where they are used, refused before anything loads
        (["--video-fps", "1e-320", "--frames-upbound", "0"], r"--video-fps must be a finite number from 0.001 to 1000 "
                                                             r"\(frames kept per second\), got 1e-320"),
        (["--video-fps", "inf"], "--video-fps must be a finite number"),
        (["--video-fps", "nan"], "--video-fps must be a finite number"),
        (["--frames-upbound", "1000000000", "--force-sample"], "--frames-upbound must be an integer from 0 to 4096"),
    ],
)
def test_bad_frame_flags_are_refused_first(tmp_path, flags, message) -> None:
    argv = ["--model-path", str(tmp_path / "nothing"), "--question-file", str(tmp_path / "q.jsonl"), *flags]
    with pytest.raises(UserError, match=message):
        model_vqa_video.main(argv)


@pytest.mark.parametrize("video", [5, ["clip0.mp4"], ""])
def test_a_video_field_that_is_not_one_path_is_one_sentence(tmp_path, video) -> None:
    # Before the fix a number or a list reached os.path.join (TypeError as the reason) and "" named the folder itself.
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 7, "video": video, "text": "What happens?"}) + "\n")
    argv = ["--model-path", str(tmp_path / "nothing"), "--question-file", str(questions), "--video-folder", str(tmp_path),
            "--answers-file", str(tmp_path / "a.jsonl")]
    with pytest.raises(UserError, match=r"question 7: 'video' must be one video file's path \(relative to --video-folder\)"):
        model_vqa_video.main(argv)
    assert not (tmp_path / "a.jsonl").exists()


def test_run_llava_and_the_terminal_chat_take_a_video(checkpoint, video_set, monkeypatch, capsys) -> None:
    from llava.eval import run_llava
    from llava.serve import cli

    folder, _ = video_set
    common = ["--model-path", str(checkpoint), "--temperature", "0", "--device", "cpu", "--frames-upbound", "3", "--force-sample"]
    answer = run_llava.main([*common, "--video-file", str(folder / "clip0.mp4"), "--query", "Which way?", "--max_new_tokens", "2"])
    assert isinstance(answer, str)
    with pytest.raises(UserError, match="either --image-file or --video-file"):
        run_llava.main([*common, "--query", "Which way?"])
    turns = iter(["Which way does it move?", ""])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(turns))
    cli.main([*common, "--video-file", str(folder / "clip1.mp4"), "--max-new-tokens", "2"])
    assert "exit..." in capsys.readouterr().out
    with pytest.raises(Exception, match="does not exist"):
        cli.main([*common, "--video-file", str(folder / "absent.mp4")])


def test_a_video_given_as_an_image_points_at_video_file(tmp_path) -> None:
    # Before the fix: "image file 'clip.mp4' is not a readable image (not a known image format)", after the file was read.
    from llava.eval import run_llava
    from llava.serve import cli

    clip = tmp_path / "clip.mp4"
    write_video(clip, _clip(0), fps=6)
    common = ["--model-path", str(tmp_path / "nothing"), "--device", "cpu", "--image-file"]
    message = r"'.*clip.mp4' is a video file, not an image; pass it with --video-file instead"
    with pytest.raises(UserError, match=message):
        run_llava.main([*common, f"{tmp_path / 'missing.png'},{clip}", "--query", "What happens?"])
    with pytest.raises(UserError, match=message):
        cli.main([*common, str(clip)])


@pytest.mark.parametrize("loader", ["model_vqa_video", "model_vqa"])
def test_v09_a_question_with_both_an_image_and_a_video_is_refused_before_loading(tmp_path, loader) -> None:
    # Before: model_vqa_video answered from the video and ignored the image without a word (training refuses it).
    from llava.eval import model_vqa

    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": "q0", "image": "0.png", "video": "clip0.mp4", "text": "What happens?"}) + "\n")
    argv = ["--model-path", str(tmp_path / "nothing"), "--question-file", str(questions), "--answers-file", str(tmp_path / "a.jsonl")]
    module = model_vqa_video if loader == "model_vqa_video" else model_vqa
    with pytest.raises(UserError, match=r"q.jsonl', 1st question \(question_id 'q0'\) has both 'image' and 'video'; give one of them$"):
        module.main(argv)
    assert not (tmp_path / "a.jsonl").exists()


# ------------------------------------------------------------------------------------------------ issue 31


@pytest.fixture(scope="module")
def short_checkpoint(checkpoint, tmp_path_factory) -> Path:
    """The module's checkpoint with ``tokenizer_model_max_length`` 200: a 9x9 SigLIP grid pooled to 5x5 (bilinear,
    stride 2, ⌈9/2⌉ = 5) with ``image_newline`` after each of the 5 rows (NeXT's ``grid``), 30 tokens a frame, so 16
    frames are 480 tokens."""
    import shutil

    copy = tmp_path_factory.mktemp("short") / "llava-onevision-qwen2-short"
    shutil.copytree(checkpoint, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "tokenizer_model_max_length": 200}))
    return copy


def _over_limit(message: str, frames: int) -> tuple[int, int]:
    """``(length, frames that fit)`` from the refusal, after checking its words and its arithmetic."""
    import re

    found = re.search(r"the prompt is (\d+) tokens with its visual tokens, more than the 200 this model takes "
                      rf"\(tokenizer_model_max_length\); pass --frames-upbound (\d+) or fewer \(the video gives {frames} "
                      r"frames now\)$", message)
    assert found, message
    length, fitting = int(found.group(1)), int(found.group(2))
    text = length - 30 * frames  # what is left for the prompt's text tokens (the template and the question)
    assert text > 0 and text + 30 * fitting <= 200 < text + 30 * (fitting + 1)
    return length, fitting


def _count_decodes(monkeypatch) -> list[object]:
    from llava.video import VideoPlan

    decoded: list[object] = []
    original = VideoPlan.decode
    monkeypatch.setattr(VideoPlan, "decode", lambda self: decoded.append(self) or original(self))
    return decoded


def test_a_video_prompt_over_the_limit_stops_before_a_frame_is_decoded(short_checkpoint, video_set, tmp_path, monkeypatch) -> None:
    # V01: the spliced 401+ tokens were cut to 200 without a word, dropping the question; the answers were written.
    folder, questions = video_set
    answers = tmp_path / "a.jsonl"
    decoded = _count_decodes(monkeypatch)
    argv = _argv(short_checkpoint, folder, questions, answers, "--frames-upbound", "16", "--skip-missing")
    with pytest.raises(UserError, match=r"^question 'q0': the prompt is") as caught:
        model_vqa_video.main(argv)
    length, fitting = _over_limit(str(caught.value), 16)
    assert decoded == [] and answers.read_text() == ""  # no answer from a cut prompt (the file is opened once the model loads)
    # The number the sentence gives fits: the run answers with it, and one more frame is refused again, 30 tokens a
    # frame shorter than with 16.
    with pytest.raises(UserError, match=r"^question 'q0': the prompt is") as caught:
        model_vqa_video.main(_argv(short_checkpoint, folder, questions, answers, "--frames-upbound", str(fitting + 1), "--skip-missing"))
    assert _over_limit(str(caught.value), fitting + 1) == (length - 30 * (15 - fitting), fitting)
    result = model_vqa_video.main(_argv(short_checkpoint, folder, questions, answers, "--frames-upbound", str(fitting), "--skip-missing"))
    assert result.answered == 2 and [json.loads(line)["question_id"] for line in answers.read_text().splitlines()] == ["q0", "q1"]


def test_run_llava_and_the_chat_refuse_a_video_over_the_limit_before_decoding(short_checkpoint, video_set, monkeypatch, capsys) -> None:
    # V03: the terminal chat answered from the cut prompt; run_llava did not check either.
    from llava.eval import run_llava
    from llava.serve import cli

    folder, _ = video_set
    decoded = _count_decodes(monkeypatch)
    common = ["--model-path", str(short_checkpoint), "--temperature", "0", "--device", "cpu", "--frames-upbound", "16",
              "--force-sample", "--video-file", str(folder / "clip0.mp4")]
    with pytest.raises(ValueError) as caught:
        run_llava.main([*common, "--query", "Which way?", "--max_new_tokens", "2"])
    _over_limit(str(caught.value), 16)
    turns = iter(["Which way does it move?", ""])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(turns))
    with pytest.raises(ValueError) as caught:
        cli.main([*common, "--max-new-tokens", "2"])
    _over_limit(str(caught.value), 16)
    assert decoded == [] and "assistant:" not in capsys.readouterr().out  # no turn was answered


def test_an_answers_file_that_is_a_questions_video_is_refused(video_set, tmp_path) -> None:
    # V08: the video was read as "7 damaged lines", moved to clip1.mp4.rejected (altered), and replaced by answers.
    folder, questions = video_set
    video = folder / "clip1.mp4"
    before = video.read_bytes()
    argv = ["--model-path", str(tmp_path / "nothing"), "--video-folder", str(folder), "--question-file", str(questions),
            "--answers-file", str(video)]
    with pytest.raises(UserError, match=rf"^--answers-file '{video}' is the same file as the video of question 'q1' "):
        model_vqa_video.main(argv)
    assert video.read_bytes() == before and not list(folder.glob("*.rejected")) and not list(folder.glob("*.meta.json"))


def test_an_answers_file_that_is_no_answers_file_is_never_set_aside(checkpoint, video_set, tmp_path, monkeypatch) -> None:
    # The other half of V08: any existing file at --answers-file was "recovered" into .rejected and replaced.
    from llava.model import builder

    folder, questions = video_set
    monkeypatch.setattr(builder, "load_pretrained_model", lambda *args, **kwargs: pytest.fail("the model loaded"))
    for name, data in (("other.mp4", (folder / "clip0.mp4").read_bytes()), ("notes.txt", b"my notes\n"),
                       ("records.jsonl", b'{"id": 1}\n{"id": 2}\n')):
        target = tmp_path / name
        target.write_bytes(data)
        argv = _argv(checkpoint, folder, questions, target, "--skip-missing")
        with pytest.raises(UserError, match=rf"^--answers-file '{target}' is not an output of this command \(none of its "
                                            r"lines is one of its records; it starts with .*\), so it is left as it is"):
            model_vqa_video.main(argv)
        assert target.read_bytes() == data and not (tmp_path / f"{name}.rejected").exists()
