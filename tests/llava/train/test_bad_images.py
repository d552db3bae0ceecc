"""A training image that exists but cannot be decoded (issue 14, item 9): skipped and counted with
``--skip_bad_samples True``, one sentence naming the file and the flag without it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader
from transformers import AutoTokenizer, CLIPImageProcessorPil

from llava.mm_utils import ImageUnreadable
from llava.train.preprocess import conversation_template
from llava.train.supervised_data import LazySupervisedDataset
from llava.train.train import train

from .conftest import caption_record, make_image, recording, stage1_flags, write_json

#: Ways an image file can exist and still not decode.
CORRUPTIONS = {
    "truncated": lambda good: good[: len(good) // 2],
    "text": lambda good: b"this is not an image\n",
    "empty": lambda good: b"",
}


def _folder(tmp_path: Path, bad: dict[int, str]) -> Path:
    """Images ``img0..img5.png``; those in ``bad`` are corrupted the named way."""
    folder = tmp_path / "images"
    folder.mkdir()
    for index in range(6):
        path = folder / f"img{index}.png"
        make_image(index).save(path)
        if index in bad:
            path.write_bytes(CORRUPTIONS[bad[index]](path.read_bytes()))
    return folder


@pytest.fixture(scope="module")
def parts(tiny_tokenizer_dir, tiny_tower_dir):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir), use_fast=False)
    return tokenizer, CLIPImageProcessorPil.from_pretrained(str(tiny_tower_dir))


def _dataset(parts, folder: Path, *, skip: bool) -> LazySupervisedDataset:
    tokenizer, processor = parts
    records = [caption_record(index) for index in range(6)]
    return LazySupervisedDataset(records, tokenizer, conversation_template("plain"), image_folder=str(folder),
                                 image_processor=processor, skip_bad_images=skip)


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_without_the_flag_one_sentence_names_the_file_and_the_flag(tmp_path: Path, parts, kind: str):
    dataset = _dataset(parts, _folder(tmp_path, {2: kind}), skip=False)
    with pytest.raises(ImageUnreadable, match=r"sample 2 \(id 'cap2'\): cannot read image.*img2\.png.*--skip_bad_samples True") as error:
        dataset[2]
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_with_the_flag_the_next_sample_stands_in_and_is_counted(tmp_path: Path, parts, kind: str):
    folder = _folder(tmp_path, {2: kind, 3: "text"})
    dataset = _dataset(parts, folder, skip=True)
    reference = _dataset(parts, folder, skip=False)
    item = dataset[2]  # 2 and 3 are bad: sample 4 stands in
    assert torch.equal(item["input_ids"], reference[4]["input_ids"]) and torch.equal(item["image"], reference[4]["image"])
    assert dataset.skipped_images == 2
    dataset[5]
    assert dataset.skipped_images == 2


def test_counts_from_dataloader_workers_reach_the_main_process(tmp_path: Path, parts):
    dataset = _dataset(parts, _folder(tmp_path, {1: "truncated", 4: "empty"}), skip=True)
    loader = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=lambda items: len(items))
    assert sum(loader) == 6
    assert dataset.skipped_images == 2


def test_all_images_bad_is_an_error(tmp_path: Path, parts):
    dataset = _dataset(parts, _folder(tmp_path, {i: "text" for i in range(6)}), skip=True)
    with pytest.raises(ValueError, match="no training sample has a decodable image"):
        dataset[0]


def test_training_with_the_flag_finishes_and_reports_the_count(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, caplog):
    folder = _folder(tmp_path, {3: "truncated"})
    data = write_json(tmp_path / "pretrain.json", [caption_record(index) for index in range(6)])
    argv = stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", tmp_path / "out")
    argv[argv.index("--data_path") + 1] = str(data)
    argv[argv.index("--image_folder") + 1] = str(folder)
    with pytest.raises(ImageUnreadable, match=r"img3\.png.*--skip_bad_samples True"):
        train(argv=argv)
    with recording() as seen, caplog.at_level(logging.WARNING, logger="llava.train.train"):
        train(argv=argv + ["--skip_bad_samples", "True", "--overwrite_output_dir", "True"])
    assert seen.final_step == 3 and (tmp_path / "out" / "mm_projector.bin").is_file()
    assert "skipped 1 samples whose image could not be decoded" in caplog.text
