"""The shared loader core without a model: question formats, chunking, resuming, the answers file and bad
input. A stand-in generator answers with a fingerprint of the question and its images; the real model is
exercised in test_loaders.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pytest

from llava.eval import core, model_vqa, model_vqa_loader, model_vqa_mmbench, model_vqa_science
from llava.eval.core import EvalItem, GenerationConfig, get_chunk, run_items

from .conftest import SUFFIX, BenchData

ANSWER_FIELDS = ["question_id", "prompt", "text", "answer_id", "model_id", "metadata"]


class FakeGenerator:
    """Answers "<question head>|<image sizes>"; raises KeyboardInterrupt on call number ``fail_on``."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[int] = []
        self.fail_on = fail_on

    def generate(self, questions: Sequence[str], images: Sequence[Sequence[Any]], config: GenerationConfig) -> list[str]:
        if self.fail_on is not None and len(self.calls) + 1 == self.fail_on:
            raise KeyboardInterrupt
        self.calls.append(len(questions))
        return [f"{question.splitlines()[0]}|{[image.size for image in per]}" for question, per in zip(questions, images)]


def run(module: Any, argv: list[str], generator: FakeGenerator | None = None) -> core.RunResult:
    generator = generator or FakeGenerator()
    return core.run_loader(module.SPEC, argv, generator_factory=lambda args: (generator, "fake"))


def read_answers(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def vqa_argv(data: BenchData, answers: Path, *extra: str) -> list[str]:
    return ["--model-path", "/ckpt/llava-tiny", "--question-file", str(data.vqa), "--image-folder", str(data.images),
            "--answers-file", str(answers), "--temperature", "0", *extra]


# ------------------------------------------------------------------------------------------------ formats


def test_vqa_answers_file(bench_data: BenchData, tmp_path: Path) -> None:
    answers = tmp_path / "a" / "b" / "answers.jsonl"
    result = run(model_vqa_loader, vqa_argv(bench_data, answers))
    lines = read_answers(answers)
    assert result.answered == len(lines) == 6
    assert [line["question_id"] for line in lines] == bench_data.vqa_ids
    for line in lines:
        assert list(line) == ANSWER_FIELDS
        assert line["model_id"] == "llava-tiny" and line["metadata"] == {} and len(line["answer_id"]) == 22
        assert line["prompt"].endswith(SUFFIX.strip())
    assert lines[0]["text"] == "What colour is the image?|[(40, 30)]"
    assert len({line["answer_id"] for line in lines}) == 6


def test_science_items(bench_data: BenchData, tmp_path: Path) -> None:
    answers = tmp_path / "sqa.jsonl"
    run(model_vqa_science, ["--question-file", str(bench_data.science), "--image-folder", str(bench_data.images),
                            "--answers-file", str(answers), "--single-pred-prompt"])
    lines = read_answers(answers)
    assert [line["question_id"] for line in lines] == [str(1000 + i) for i in range(5)]
    instruction = "\nAnswer with the option's letter from the given choices directly."
    assert lines[0]["prompt"].startswith("<image>\nWhich colour") and lines[0]["prompt"].endswith(instruction)
    assert lines[4]["prompt"].startswith("Which colour") and lines[4]["prompt"].endswith(instruction)
    assert lines[0]["text"].endswith("[(40, 30)]") and lines[4]["text"].endswith("[]")  # text-only items


def test_mmbench_items(bench_data: BenchData, tmp_path: Path) -> None:
    answers = tmp_path / "mmb.jsonl"
    run(model_vqa_mmbench, ["--question-file", str(bench_data.mmbench), "--answers-file", str(answers), "--single-pred-prompt", "--all-rounds"])
    lines = read_answers(answers)
    assert list(lines[0]) == ["question_id", "round_id", "prompt", "text", "options", "option_char", "answer_id", "model_id", "metadata"]
    # 4 + 2 + 3 + 2 options -> that many rounds
    assert [(line["question_id"], line["round_id"]) for line in lines][:5] == [(10, 0), (10, 1), (10, 2), (10, 3), (11, 0)]
    assert len(lines) == 11
    assert lines[0]["prompt"] == "What colour dominates?\nA. red\nB. green\nC. blue\nD. yellow"
    assert lines[1]["options"] == ["green", "blue", "yellow", "red"] and lines[1]["option_char"] == ["B", "C", "D", "A"]
    assert lines[1]["prompt"] == "What colour dominates?\nA. green\nB. blue\nC. yellow\nD. red"
    assert lines[4]["prompt"] == "Look closely.\nIs there a square?\nA. yes\nB. no"
    assert lines[0]["text"] == "What colour dominates?|[(40, 30)]"


def test_mmbench_prompts(bench_data: BenchData) -> None:
    args = core.build_parser(model_vqa_mmbench.SPEC).parse_args(["--single-pred-prompt", "--lang", "cn"])
    record = {"index": 13, "question": "图中主要是什么颜色？", "hint": float("nan"), "A": "红", "B": "绿", "C": float("nan"), "image": "x"}
    (item,) = model_vqa_mmbench.build_items(record, args)
    assert item.question == "图中主要是什么颜色？\nA. 红\nB. 绿\n请直接回答选项字母。"
    assert item.prompt == "图中主要是什么颜色？\nA. 红\nB. 绿"
    assert item.extra == {"round_id": 0, "options": ["红", "绿"], "option_char": ["A", "B"]}


# ------------------------------------------------------------------------------------------------ chunks


def test_ceil_chunks() -> None:
    items = list(range(7))
    assert [get_chunk(items, 3, k) for k in range(3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [get_chunk(list(range(5)), 4, k) for k in range(4)] == [[0, 1], [2, 3], [4], []]
    with pytest.raises(ValueError, match="--chunk-idx must be in \\[0, 1\\]"):
        get_chunk(items, 2, 2)
    with pytest.raises(ValueError, match="--num-chunks must be at least 1"):
        get_chunk(items, 0, 0)


def test_two_chunks_merge_to_one(bench_data: BenchData, tmp_path: Path) -> None:
    run(model_vqa, vqa_argv(bench_data, tmp_path / "all.jsonl"))
    for index in range(2):
        run(model_vqa, vqa_argv(bench_data, tmp_path / f"2_{index}.jsonl", "--num-chunks", "2", "--chunk-idx", str(index)))
    whole = read_answers(tmp_path / "all.jsonl")
    merged = read_answers(tmp_path / "2_0.jsonl") + read_answers(tmp_path / "2_1.jsonl")
    assert [(a["question_id"], a["text"]) for a in merged] == [(a["question_id"], a["text"]) for a in whole]


def test_mismatched_chunk_index_on_the_command_line(bench_data: BenchData, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--chunk-idx must be in \\[0, 3\\] for --num-chunks 4, got 4"):
        run(model_vqa_loader, vqa_argv(bench_data, tmp_path / "x.jsonl", "--num-chunks", "4", "--chunk-idx", "4"))


# ------------------------------------------------------------------------------------------------ resume


def test_interrupted_run_resumes_without_duplicates(bench_data: BenchData, tmp_path: Path) -> None:
    answers = tmp_path / "answers.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run(model_vqa_loader, vqa_argv(bench_data, answers, "--batch-size", "2"), FakeGenerator(fail_on=3))
    assert len(read_answers(answers)) == 4  # two batches of two were written before the interrupt
    with answers.open("a") as handle:
        handle.write('{"question_id": 4, "prompt": "What col')  # a kill in the middle of a write
    second = FakeGenerator()
    result = run(model_vqa_loader, vqa_argv(bench_data, answers, "--batch-size", "2"), second)
    assert result.already_answered == 4 and result.answered == 2 and second.calls == [2]
    ids = [line["question_id"] for line in read_answers(answers)]
    assert sorted(map(str, ids)) == sorted(map(str, bench_data.vqa_ids)) and len(ids) == len(set(ids)) == 6
    # a third run has nothing to do and does not load the model
    third = run(model_vqa_loader, vqa_argv(bench_data, answers), FakeGenerator(fail_on=1))
    assert third.answered == 0 and third.already_answered == 6


def test_mmbench_rounds_resume_per_round(bench_data: BenchData, tmp_path: Path) -> None:
    answers = tmp_path / "mmb.jsonl"
    argv = ["--question-file", str(bench_data.mmbench), "--answers-file", str(answers), "--all-rounds"]
    with pytest.raises(KeyboardInterrupt):
        run(model_vqa_mmbench, argv, FakeGenerator(fail_on=3))
    run(model_vqa_mmbench, argv)
    keys = [(line["question_id"], line["round_id"]) for line in read_answers(answers)]
    assert len(keys) == len(set(keys)) == 11


# ------------------------------------------------------------------------------------------------ bad input


@pytest.fixture
def vqa_with_bad_images(bench_data: BenchData, tmp_path: Path) -> Path:
    (tmp_path / "corrupt.png").write_bytes(b"not an image at all")
    for name in ("red.png", "green.jpg"):
        (tmp_path / name).write_bytes((bench_data.images / name).read_bytes())
    questions = [
        {"question_id": "ok1", "image": "red.png", "text": "a"},
        {"question_id": "gone", "image": "missing.png", "text": "b"},
        {"question_id": "bad", "image": "corrupt.png", "text": "c"},
        {"question_id": "ok2", "image": "green.jpg", "text": "d"},
    ]
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in questions))
    return path


@pytest.mark.parametrize(("bad_id", "reason"), [("gone", "does not exist"), ("bad", "not a readable image")])
def test_missing_or_unreadable_image_names_the_question(vqa_with_bad_images: Path, tmp_path: Path, bad_id: str, reason: str) -> None:
    lines = [json.loads(line) for line in vqa_with_bad_images.read_text().splitlines()]
    only = [line for line in lines if line["question_id"] in ("ok1", bad_id)]
    vqa_with_bad_images.write_text("".join(json.dumps(q) + "\n" for q in only))
    argv = ["--question-file", str(vqa_with_bad_images), "--image-folder", str(vqa_with_bad_images.parent), "--answers-file", str(tmp_path / "a.jsonl")]
    with pytest.raises(ValueError, match=f"question '{bad_id}': .*{reason}"):
        run(model_vqa, argv)


def test_skip_missing_counts(vqa_with_bad_images: Path, tmp_path: Path) -> None:
    answers = tmp_path / "a.jsonl"
    argv = ["--question-file", str(vqa_with_bad_images), "--image-folder", str(vqa_with_bad_images.parent),
            "--answers-file", str(answers), "--skip-missing", "--batch-size", "4"]
    result = run(model_vqa, argv)
    assert sorted(result.skipped) == ["bad", "gone"] and result.answered == 2
    assert [line["question_id"] for line in read_answers(answers)] == ["ok1", "ok2"]


def test_unreadable_base64_image(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text("index\tquestion\thint\tA\tB\timage\n5\tq?\tnan\tx\ty\tbm90IGFuIGltYWdl\n")
    with pytest.raises(ValueError, match="question 5: the embedded base64 image is not a readable image"):
        run(model_vqa_mmbench, ["--question-file", str(path), "--answers-file", str(tmp_path / "a.jsonl")])


def test_empty_question_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="contains no questions"):
        run(model_vqa_loader, ["--question-file", str(empty), "--answers-file", str(tmp_path / "a.jsonl")])


def test_malformed_line(bench_data: BenchData, tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"question_id": 1, "image": "red.png", "text": "a"}\n{"question_id": 2, "image": \n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        run(model_vqa_loader, ["--question-file", str(path), "--answers-file", str(tmp_path / "a.jsonl")])
    path.write_text('{"question_id": 1, "text": "no image field"}\n')
    with pytest.raises(ValueError, match="question file .*q.jsonl', 1st question has no 'image' field"):
        run(model_vqa_loader, ["--question-file", str(path), "--answers-file", str(tmp_path / "a.jsonl")])


def test_duplicate_questions(tmp_path: Path) -> None:
    items = [EvalItem(1, "a", "a"), EvalItem(2, "a", "a"), EvalItem(1, "b", "b"), EvalItem(1, "a", "a")]
    with pytest.raises(ValueError, match="the 4th question repeats the 1st \\(question_id 1 and the same prompt\\)"):
        run_items(items, tmp_path / "a.jsonl", lambda: (FakeGenerator(), "m"), GenerationConfig(), model_id="m")
    assert not (tmp_path / "a.jsonl").exists()


def test_generation_kwargs() -> None:
    assert GenerationConfig(temperature=0, max_new_tokens=128).generate_kwargs() == {
        "num_beams": 1, "max_new_tokens": 128, "use_cache": True, "do_sample": False,
    }
    sampled = GenerationConfig(temperature=0.2, top_p=0.7).generate_kwargs()
    assert sampled["do_sample"] and sampled["temperature"] == 0.2 and sampled["top_p"] == 0.7


def test_upstream_defaults() -> None:
    loader = core.build_parser(model_vqa_loader.SPEC).parse_args([])
    vqa = core.build_parser(model_vqa.SPEC).parse_args([])
    assert (loader.max_new_tokens, vqa.max_new_tokens) == (128, 1024)
    assert (loader.conv_mode, loader.temperature, loader.top_p, loader.num_beams) == ("llava_v1", 0.2, None, 1)
    assert (loader.num_chunks, loader.chunk_idx, loader.batch_size, loader.skip_missing) == (1, 0, 1, False)
    assert core.resolve_device(None) in ("cpu", "cuda") and core.resolve_device("cpu") == "cpu"


# ------------------------------------------------------------------------------------------------ reading ahead


def test_the_next_batch_is_read_in_a_background_thread_and_answers_do_not_change(bench_data: BenchData, tmp_path: Path) -> None:
    import threading
    from dataclasses import dataclass
    from typing import ClassVar

    from llava.eval.items import ImageRef

    readers: list[tuple[str, str]] = []

    @dataclass(frozen=True)
    class Watched(ImageRef):
        def load(self):
            readers.append((Path(self.path).name, threading.current_thread().name))
            return super().load()

    @dataclass(frozen=True)
    class ReadsModel(Watched):
        reads_model: ClassVar[bool] = True

    class Preparing(FakeGenerator):
        def prepare_visuals(self, images):
            return {"prepared": len(images)}

        def generate(self, questions, images, config, visuals=None):
            assert visuals == {"prepared": len(questions)}  # what prepare_visuals made for exactly these questions
            return super().generate(questions, images, config)

    names = sorted(path.name for path in bench_data.images.iterdir())[:3]
    answers = {}
    for label, ref, prefetch in (("in turn", Watched, False), ("ahead", Watched, True), ("model", ReadsModel, True)):
        readers.clear()
        items = [EvalItem(question_id=index, question=f"q{index}", prompt=f"q{index}",
                          images=(ref(str(bench_data.images / name)),)) for index, name in enumerate(names)]
        generator = Preparing()
        run_items(items, tmp_path / f"{label}.jsonl", lambda generator=generator: (generator, "m"), GenerationConfig(),
                  model_id="m", prefetch=prefetch)
        answers[label] = [line["text"] for line in read_answers(tmp_path / f"{label}.jsonl")]
        threads = {thread for _, thread in readers}
        assert [name for name, _ in readers] == names  # each image read once, in question order
        if label == "ahead":
            assert all(thread.startswith("llava-prefetch") for thread in threads), threads
        else:  # not reading ahead, or a video-like input that reads the model: read in the loop's own thread
            assert threads == {threading.current_thread().name}
    assert answers["in turn"] == answers["ahead"] == answers["model"] and len(answers["ahead"]) == 3


def test_an_error_stops_the_reading_thread_with_the_run(bench_data: BenchData, tmp_path: Path) -> None:
    # Interrupted at the second batch: the third is not read afterwards, and the two answered stay.
    import threading

    generator = FakeGenerator(fail_on=3)
    argv = vqa_argv(bench_data, tmp_path / "a.jsonl")
    with pytest.raises(KeyboardInterrupt) as caught:  # its traceback, kept (as a caller's handler may), holds the loop's frame
        run(model_vqa, argv, generator)
    assert caught.traceback and not [thread for thread in threading.enumerate() if thread.name.startswith("llava-prefetch")]
    assert len(read_answers(tmp_path / "a.jsonl")) == 2
