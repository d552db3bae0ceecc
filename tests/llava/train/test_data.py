"""Training files: JSON / JSONL reading, up-front checks with one clear error (or counted skips), batching."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, CLIPImageProcessorPil

from llava.constants import IGNORE_INDEX
from llava.train.preprocess import conversation_template
from llava.train.supervised_data import (
    IMAGE_LENGTH_BONUS,
    DataCollatorForSupervisedDataset,
    LazySupervisedDataset,
    load_training_records,
    read_records,
)
from llava.utils import UserError

from .conftest import caption_record, chat_record, stage1_flags, text_record, write_json


def _load(path: Path, images: Path, *, version: str = "v1", skip: bool = False):
    return load_training_records(str(path), str(images), multimodal=True, conv=conversation_template(version), skip_bad=skip)


def test_json_list_and_jsonl_give_the_same_records(tmp_path: Path):
    records = [chat_record(0), text_record(1)]
    as_json = write_json(tmp_path / "data.json", records)
    as_jsonl = tmp_path / "data.jsonl"
    as_jsonl.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    assert read_records(as_json) == read_records(as_jsonl) == records


def test_malformed_json_names_the_line(tmp_path: Path):
    path = tmp_path / "data.json"
    path.write_text('[\n  {"id": 1,\n  "conversations": ]\n')
    with pytest.raises(ValueError, match=r"data.json is not valid JSON: .* at line 3"):
        read_records(path)


def test_malformed_jsonl_line_is_named(tmp_path: Path):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(text_record(0)) + "\n{not json}\n")
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        read_records(path)


@pytest.mark.parametrize("name", ["data.json", "data.jsonl"])
def test_a_binary_data_file_is_one_sentence(tmp_path: Path, name: str):
    """An image (or any non-UTF-8 file) passed as --data_path is a user error naming the file, not a codec traceback."""
    path = tmp_path / name
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with pytest.raises(UserError, match=rf"{name} is not UTF-8 text \(byte 0\); expected a LLaVA training file"):
        read_records(path)


def test_a_folder_as_data_path_says_it_is_a_folder(tmp_path: Path):
    with pytest.raises(UserError, match=r"is a folder, not a JSON file; pass the training file"):
        read_records(tmp_path)


def test_an_unterminated_string_reads_once_as_starting_at(tmp_path: Path):
    # json's message for this case ends in "starting at"; the position must follow it once, not "at at".
    for name in ("data.json", "data.jsonl"):
        path = tmp_path / name
        path.write_text('[{"id": "a')  # the string opens at column 9
        with pytest.raises(ValueError, match=r"Unterminated string starting at (line 1, )?column 9") as caught:
            read_records(path)
        assert " at at " not in str(caught.value)


def test_jsonl_content_in_a_json_file_gets_a_hint(tmp_path: Path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps(text_record(0)) + "\n" + json.dumps(text_record(1)) + "\n")
    with pytest.raises(ValueError, match="name the file .jsonl"):
        read_records(path)


def test_a_json_object_is_not_a_dataset(tmp_path: Path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps(text_record(0)))
    with pytest.raises(ValueError, match="holds a JSON dict; expected a list of samples"):
        read_records(path)


def test_empty_dataset_is_an_error(tmp_path: Path, train_data):
    with pytest.raises(ValueError, match="holds no training samples"):
        _load(write_json(tmp_path / "empty.json", []), train_data.images)


def test_missing_data_file_is_an_error(tmp_path: Path, train_data):
    with pytest.raises(ValueError, match="does not exist"):
        _load(tmp_path / "nope.json", train_data.images)


@pytest.mark.parametrize("record, message", [
    ({**chat_record(0), "image": "missing.png"}, r"sample 1 \(id 'chat0'\) image file .*missing.png' does not exist"),
    ({**chat_record(0), "conversations": [{"from": "human", "value": "What?"}, {"from": "gpt", "value": "A dog."}]},
     "has an image but no '<image>' marker"),
    ({**text_record(0), "conversations": [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "A dog."}]},
     "has '<image>' in its conversation but no 'image'"),
    ({"id": "x", "conversations": [{"from": "robot", "value": "hi"}]}, "turn 0 has 'from' 'robot'"),
    ({"id": "x", "conversations": [{"from": "human", "value": "a"}, {"from": "human", "value": "b"}]}, "alternate"),
    ({"id": "x"}, "no non-empty 'conversations' list"),
])
def test_bad_sample_stops_with_one_clear_error(tmp_path: Path, train_data, record, message):
    path = write_json(tmp_path / "data.json", [chat_record(1), record])
    with pytest.raises(ValueError, match=message) as caught:
        _load(path, train_data.images)
    assert "--skip_bad_samples True" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_bad_samples_can_be_skipped_and_are_counted(tmp_path: Path, train_data):
    records = [chat_record(0), {**chat_record(1), "image": "missing.png"}, {**chat_record(2), "image": "gone.png"}, text_record(3)]
    kept, report = _load(write_json(tmp_path / "data.json", records), train_data.images, skip=True)
    assert [r["id"] for r in kept] == ["chat0", "text3"]
    assert report.total == 4 and report.kept == 2 and dict(report.skipped) == {"missing_image": 2}
    assert "kept 2 of 4 samples; skipped missing_image: 2" in report.summary()


def test_skipping_everything_is_still_an_error(tmp_path: Path, train_data):
    path = write_json(tmp_path / "data.json", [{**chat_record(1), "image": "missing.png"}])
    with pytest.raises(ValueError, match="no usable training samples left"):
        _load(path, train_data.images, skip=True)


def test_plain_data_with_a_chat_sample_is_refused(tmp_path: Path, train_data):
    path = write_json(tmp_path / "data.json", [caption_record(0), chat_record(1)])
    with pytest.raises(ValueError, match="does not fit the training template: the plain template needs exactly 2 turns"):
        _load(path, train_data.images, version="plain")


def test_bad_data_fails_fast_on_the_command_line(tmp_path: Path, tiny_base_llm, tiny_tower_dir, train_data):
    """The real entry point exits with the one-sentence error alone (no traceback) before loading any model."""
    data = write_json(tmp_path / "pretrain.json", [caption_record(0), {**caption_record(1), "image": "missing.png"}])
    argv = stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "braco_c2s5", tmp_path / "out")
    argv[argv.index("--data_path") + 1] = str(data)
    result = subprocess.run([sys.executable, "-m", "llava.train.train", *argv], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "missing.png' does not exist" in result.stderr and "Traceback" not in result.stderr
    assert "Loading weights" not in result.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- dataset and collator


@pytest.fixture(scope="module")
def dataset(tiny_tokenizer_dir, tiny_tower_dir, train_data) -> LazySupervisedDataset:
    records, _ = _load(train_data.finetune, train_data.images)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir), use_fast=False)
    processor = CLIPImageProcessorPil.from_pretrained(str(tiny_tower_dir))
    return LazySupervisedDataset(records, tokenizer, conversation_template("v1"), image_folder=str(train_data.images),
                                 image_processor=processor, image_aspect_ratio="pad")


def test_length_estimates_follow_upstream(dataset: LazySupervisedDataset):
    first, last = dataset.records[0], dataset.records[-1]
    words = lambda record: sum(len(turn["value"].split()) for turn in record["conversations"])  # noqa: E731
    assert dataset.lengths[0] == words(first) + IMAGE_LENGTH_BONUS
    assert dataset.lengths[-1] == words(last)
    assert dataset.modality_lengths[0] == words(first) and dataset.modality_lengths[-1] == -words(last)


def test_items_carry_an_image_only_for_image_samples(dataset: LazySupervisedDataset):
    image_item, text_item = dataset[0], dataset[len(dataset) - 1]
    assert image_item["image"].shape == (3, 48, 48)
    assert "image" not in text_item


def test_collator_pads_truncates_and_masks(dataset: LazySupervisedDataset):
    items = [dataset[0], dataset[len(dataset) - 1]]
    batch = DataCollatorForSupervisedDataset(pad_token_id=0, model_max_length=20)(items)
    lengths = [min(len(item["input_ids"]), 20) for item in items]
    assert batch["input_ids"].shape == (2, max(lengths))
    for row, (item, length) in enumerate(zip(items, lengths)):
        assert batch["input_ids"][row, :length].tolist() == item["input_ids"][:length].tolist()
        assert batch["labels"][row, :length].tolist() == item["labels"][:length].tolist()
        assert batch["attention_mask"][row].tolist() == [True] * length + [False] * (max(lengths) - length)
        assert (batch["labels"][row, length:] == IGNORE_INDEX).all() and (batch["input_ids"][row, length:] == 0).all()
    # the text-only sample gets an all-zero stand-in image next to the real one
    assert batch["images"].shape == (2, 3, 48, 48)
    assert torch.equal(batch["images"][0], items[0]["image"]) and not batch["images"][1].any()


def test_a_text_only_batch_carries_no_images(dataset: LazySupervisedDataset):
    batch = DataCollatorForSupervisedDataset(pad_token_id=0, model_max_length=256)([dataset[len(dataset) - 1]])
    assert "images" not in batch


def test_unreadable_image_names_the_sample(tmp_path: Path, dataset: LazySupervisedDataset):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    record = {**chat_record(0), "image": "broken.png"}
    bad = LazySupervisedDataset([record], dataset.tokenizer, dataset.conv, image_folder=str(tmp_path),
                                image_processor=dataset.image_processor)
    with pytest.raises(ValueError, match=r"sample 0 \(id 'chat0'\): cannot read image"):
        bad[0]
