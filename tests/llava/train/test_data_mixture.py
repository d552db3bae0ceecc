"""LLaVA-NeXT's ``--data_path`` forms: a YAML mixture with sampling strategies, and the ``{a,b}.json`` file list."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from llava.train.data_mixture import Sampling, file_list, parse_sampling, read_data_path, source_files
from llava.train.supervised_data import load_training_records, read_records
from llava.train.train import train
from llava.utils import UserError

from .conftest import chat_record, common_flags, text_record


def _records(prefix: str, count: int) -> list[dict]:
    return [{"id": f"{prefix}{i}", "conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": f"a{i}"}]}
            for i in range(count)]


def _ids(records) -> list[str]:
    return [record["id"] for record in records]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    a = tmp_path / "a.json"
    a.write_text(json.dumps(_records("a", 10)))
    b = tmp_path / "b.jsonl"
    b.write_text("".join(json.dumps(record) + "\n" for record in _records("b", 7)))
    return {"a": a, "b": b, "root": tmp_path}


def _mixture(root: Path, *entries: tuple[Path, str | None]) -> Path:
    lines = ["datasets:"]
    for path, strategy in entries:
        lines.append(f"  - json_path: {path}")
        if strategy is not None:
            lines.append(f"    sampling_strategy: \"{strategy}\"")
    path = root / "mix.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("strategy, expected", [
    # hand-worked on a.json (a0..a9): NeXT keeps ceil(P * 10 / 100) for a percentage
    ("all", [f"a{i}" for i in range(10)]),
    ("first:3", ["a0", "a1", "a2"]),
    ("end:2", ["a8", "a9"]),
    ("first:30%", ["a0", "a1", "a2"]),          # ceil(3.0) = 3
    ("end:25%", ["a7", "a8", "a9"]),            # ceil(2.5) = 3
    ("first:1%", ["a0"]),                       # ceil(0.1) = 1
    ("first:100%", [f"a{i}" for i in range(10)]),
    ("first:50", [f"a{i}" for i in range(10)]),  # more than the file: the whole file (and a warning)
])
def test_sampling_strategies(files, strategy, expected) -> None:
    records, origins = read_data_path(str(_mixture(files["root"], (files["a"], strategy))), read_records)
    assert _ids(records) == expected
    assert origins == [(str(files["a"]), int(name[1:])) for name in expected]


def test_random_is_seeded_and_a_subset(files) -> None:
    mixture = str(_mixture(files["root"], (files["a"], "random:4"), (files["b"], None)))
    first, _ = read_data_path(mixture, read_records, seed=3)
    again, _ = read_data_path(mixture, read_records, seed=3)
    other, _ = read_data_path(mixture, read_records, seed=4)
    assert _ids(first) == _ids(again)
    assert len(first) == 4 + 7 and _ids(first)[4:] == [f"b{i}" for i in range(7)]
    assert len(set(_ids(first)[:4])) == 4 and set(_ids(first)[:4]) <= {f"a{i}" for i in range(10)}
    # the draw is random.Random(f"{seed}:{entry}:{path}").shuffle, then the first N (independent computation)
    order = _records("a", 10)
    random.Random(f"3:0:{files['a']}").shuffle(order)
    assert _ids(first)[:4] == _ids(order[:4])
    assert _ids(other)[:4] != _ids(first)[:4]


def test_file_list_shorthand(files) -> None:
    (files["root"] / "c.json").write_text(json.dumps(_records("c", 2)))
    pattern = f"{files['root']}/{{a,c}}.json"
    assert file_list(pattern) == [f"{files['root']}/a.json", f"{files['root']}/c.json"]
    records, _ = read_data_path(pattern, read_records)
    assert _ids(records) == [f"a{i}" for i in range(10)] + ["c0", "c1"]
    assert file_list(str(files["a"])) is None


@pytest.mark.parametrize("text, message", [
    ("last:5", "unknown sampling_strategy 'last:5'"),
    ("first", "needs a whole count or percentage"),
    ("first:", "needs a whole count or percentage"),
    ("end:0", "must keep between 1 record and 100% of the file"),  # NeXT's end:0 would keep everything
    ("first:150%", "must keep between 1 record and 100% of the file"),
    ("first:12.5%", "needs a whole count or percentage"),
    ("random:x", "needs a whole count or percentage"),
    ("all:5", "'all' takes no count"),
])
def test_bad_strategies_are_one_sentence(text, message) -> None:
    with pytest.raises(UserError, match=None) as error:
        parse_sampling(text, "mix.yaml: dataset 1")
    assert message in str(error.value) and str(error.value).startswith("mix.yaml: dataset 1")


def test_parse_sampling_values() -> None:
    assert parse_sampling("all", "w") == Sampling()
    assert parse_sampling("first:50%", "w") == Sampling("first", 50, True)
    assert parse_sampling(" random:999 ", "w") == Sampling("random", 999, False)


@pytest.mark.parametrize("text, message", [
    ("datasets: []\n", "has no 'datasets:' list"),
    ("- json_path: x.json\n", "has no 'datasets:' list"),
    ("datasets:\n  - sampling_strategy: all\n", "dataset 1 needs a 'json_path'"),
    ("datasets:\n  - json_path: {a}\n    sampling_stratgy: all\n", "unknown key 'sampling_stratgy'"),
    ("datasets:\n  - json_path: {root}/data.csv\n", "must be a .json or .jsonl file"),
    ("datasets:\n  - json_path: missing.json\n", "json_path 'missing.json' does not exist (relative paths are read from the working directory"),
    ("datasets: [\n", "is not valid YAML at line"),
])
def test_bad_mixtures_are_one_sentence(files, text, message) -> None:
    path = files["root"] / "bad.yaml"
    path.write_text(text.format(a=files["a"], root=files["root"]))
    with pytest.raises(UserError) as error:
        read_data_path(str(path), read_records)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_bad_record_is_named_by_its_own_file(files) -> None:
    bad = files["root"] / "bad.json"
    bad.write_text(json.dumps(_records("x", 2) + [{"id": "broken", "conversations": []}]))
    mixture = _mixture(files["root"], (files["a"], "first:2"), (bad, None))
    with pytest.raises(ValueError, match=rf"^{bad}: sample 2 \(id 'broken'\) has no non-empty 'conversations' list"):
        load_training_records(str(mixture), None, multimodal=False)


def test_source_files_cover_every_entry(files) -> None:
    mixture = _mixture(files["root"], (files["a"], "first:2"), (files["b"], None))
    assert source_files(str(mixture)) == [str(mixture), str(files["a"]), str(files["b"])]
    assert source_files(str(files["a"])) == [str(files["a"])]


def test_training_on_a_yaml_mixture(tmp_path, tiny_base_llm, tiny_tower_dir, train_data) -> None:
    images = [chat_record(i) for i in range(8)]
    (tmp_path / "images.json").write_text(json.dumps(images))
    (tmp_path / "text.jsonl").write_text("".join(json.dumps(text_record(i)) + "\n" for i in range(6)))
    mixture = _mixture(tmp_path, (tmp_path / "images.json", "first:50%"), (tmp_path / "text.jsonl", "end:2"))
    output = tmp_path / "llava-mix"
    trainer = train(argv=common_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu") + [
        "--version", "v1", "--data_path", str(mixture), "--output_dir", str(output), "--max_steps", "1",
        "--per_device_train_batch_size", "2", "--save_strategy", "no",
    ])
    assert _ids(trainer.train_dataset.records) == ["chat0", "chat1", "chat2", "chat3", "text4", "text5"]
    assert trainer.state.global_step == 1


def test_resume_is_refused_when_a_mixture_file_changed(tmp_path, tiny_base_llm, tiny_tower_dir, train_data) -> None:
    data = tmp_path / "text.json"
    data.write_text(json.dumps([text_record(i) for i in range(4)]))
    mixture = _mixture(tmp_path, (data, "all"))
    argv = common_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu") + [
        "--version", "v1", "--data_path", str(mixture), "--output_dir", str(tmp_path / "llava-resume"), "--max_steps", "1",
        "--per_device_train_batch_size", "2", "--save_strategy", "steps", "--save_steps", "1",
    ]
    train(argv=argv)
    data.write_text(json.dumps([text_record(i) for i in range(5)]))  # the YAML itself is unchanged
    with pytest.raises(UserError, match=r"was trained with other settings \(data_sources differs\)"):
        train(argv=argv)


@pytest.mark.parametrize("how", ["mixture", "data_path", "file list"])
def test_t04_a_folder_named_like_a_json_file_is_named_as_a_folder_everywhere(files, how) -> None:
    # Before: a mixture's json_path folder was reported as "does not exist" (its own check, not --data_path's).
    folder = files["root"] / "img.json"
    folder.mkdir()
    if how == "mixture":
        data_path, label = str(_mixture(files["root"], (folder, None))), "dataset 1: json_path"
    elif how == "data_path":
        data_path, label = str(folder), "--data_path"
    else:
        data_path, label = str(files["root"] / "{a,img}.json"), "--data_path"
    with pytest.raises(UserError, match=rf"{label} '{folder}' is a folder, not a JSON file; pass the training file") as error:
        read_data_path(data_path, read_records)
    assert "\n" not in str(error.value)
