"""Training reads LLaVA-NeXT video samples (issue 23): ``{"video": ..., "conversations": [...]}`` records are checked
up front, sampled by NeXT's frame rule, collated with ``modalities`` next to image and text-only samples, and a
training forward/backward runs through them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from llava.conversation import conv_templates
from llava.train.supervised_data import (
    DataCollatorForSupervisedDataset,
    LazySupervisedDataset,
    VideoSettings,
    load_training_records,
)
from llava.video import write_video

from ._support import load


def _records(folder: Path) -> list[dict]:
    frames = np.zeros((6, 32, 48, 3), dtype=np.uint8)
    for index in range(6):
        frames[index, 8:20, 6 * index : 6 * index + 12] = 255
    write_video(folder / "right.mp4", frames, fps=1)  # 6 s at 1 fps: NeXT's default rule keeps all 6 frames
    image = folder / "still.png"
    from PIL import Image

    Image.fromarray(frames[0]).save(image)
    return [
        {"id": "v", "video": "right.mp4", "conversations": [
            {"from": "human", "value": "<image>\nWhich way does the square move?"}, {"from": "gpt", "value": "Right."}]},
        {"id": "i", "image": "still.png", "conversations": [
            {"from": "human", "value": "<image>\nWhat is this?"}, {"from": "gpt", "value": "A square."}]},
        {"id": "t", "conversations": [{"from": "human", "value": "Hello"}, {"from": "gpt", "value": "Hi."}]},
    ]


def test_video_samples_train(ov_checkpoint, tmp_path) -> None:
    records = _records(tmp_path)
    data = tmp_path / "data.json"
    data.write_text(json.dumps(records))
    conv = conv_templates["qwen_1_5"]
    kept, report = load_training_records(str(data), str(tmp_path), multimodal=True, conv=conv, video_folder=str(tmp_path))
    assert report.kept == 3
    tokenizer, model, processor, _ = load(ov_checkpoint[0])
    settings = VideoSettings(video_folder=str(tmp_path))
    dataset = LazySupervisedDataset(kept, tokenizer, conv, image_folder=str(tmp_path), image_processor=processor,
                                    image_aspect_ratio="pad", video=settings)
    video_sample = dataset[0]
    assert video_sample["modality"] == "video" and video_sample["image"].shape == (6, 3, 54, 54)
    assert video_sample["image_size"] == (48, 32)
    assert dataset.modality_lengths[0] > 0 and dataset.modality_lengths[2] < 0

    batch = DataCollatorForSupervisedDataset(tokenizer.pad_token_id, 1024)([dataset[0], dataset[1], dataset[2]])
    assert batch["modalities"] == ["video", "image", "video"]  # the text-only sample's stand-in copies the video
    assert isinstance(batch["images"], list) and batch["images"][2].abs().sum() == 0
    model.train()
    out = model(**batch)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert model.get_model().mm_projector[0].weight.grad.abs().sum() > 0
    assert model.get_model().image_newline.grad.abs().sum() > 0  # the grid newlines of the video


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"video": "absent.mp4"}, "video file .*absent.mp4.* does not exist"),
        ({"image": "still.png"}, "both 'image' and 'video'"),
        ({"conversations": [{"from": "human", "value": "No marker"}, {"from": "gpt", "value": "x"}]}, "no '<image>' marker"),
    ],
)
def test_bad_video_records_are_named(tmp_path, change, reason) -> None:
    record = {**_records(tmp_path)[0], **change}
    data = tmp_path / "data.json"
    data.write_text(json.dumps([record]))
    with pytest.raises(ValueError, match=reason):
        load_training_records(str(data), str(tmp_path), multimodal=True, video_folder=str(tmp_path))


def test_video_settings_follow_the_training_arguments() -> None:
    from types import SimpleNamespace

    assert VideoSettings.from_args(SimpleNamespace()) == VideoSettings(None, 0, False, 1.0)
    args = SimpleNamespace(video_folder="v", frames_upbound=8, force_sample=True, video_fps=2)
    assert VideoSettings.from_args(args) == VideoSettings("v", 8, True, 2)
