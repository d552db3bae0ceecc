"""LLaVA-NeXT's ``--add_time_instruction``: a video sample's first human turn tells the model how long the video is
and when its frames were taken, in NeXT's wording."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llava.conversation import conv_templates
from llava.train.arguments import parse_arguments
from llava.train.preprocess import preprocess, preprocess_multimodal
from llava.train.supervised_data import LazySupervisedDataset, VideoSettings, load_training_records, time_instruction
from llava.video import SampledVideo, write_video

#: hand-worked: 8 frames at 4 fps last 2.00 s; frames 0, 2, 4, 7 are at 0.00, 0.50, 1.00, 1.75 s
EXPECTED = ("The video lasts for 2.00 seconds, and 4 frames are uniformly sampled from it. These frames are located at "
            "0.00s,0.50s,1.00s,1.75s.Please answer the following questions related to this video.")


def test_the_sentence_is_next_s() -> None:
    video = SampledVideo(frames=np.zeros((4, 8, 8, 3), dtype=np.uint8), indices=[0, 2, 4, 7], fps=4.0, total_frames=8)
    assert time_instruction(video) == EXPECTED


def test_the_flag_reaches_the_video_settings() -> None:
    _, data_args, _ = parse_arguments(["--data_path", "d.json", "--output_dir", "o", "--add_time_instruction", "True",
                                       "--frames_upbound", "4", "--force_sample", "True"])
    assert VideoSettings.from_args(data_args) == VideoSettings(None, 4, True, 1, True)


@pytest.mark.parametrize("on", [True, False])
def test_a_video_sample_gets_the_instruction(on, tmp_path, tiny_tokenizer_dir, tiny_tower_dir) -> None:
    from transformers import AutoImageProcessor, AutoTokenizer

    write_video(tmp_path / "clip.mp4", np.zeros((8, 16, 16, 3), dtype=np.uint8), fps=4)
    record = {"id": "v", "video": "clip.mp4", "conversations": [
        {"from": "human", "value": "<image>\nWhat happens?"}, {"from": "gpt", "value": "Nothing."}]}
    (tmp_path / "data.json").write_text(json.dumps([record]))
    conv = conv_templates["v1"]
    records, _ = load_training_records(str(tmp_path / "data.json"), None, multimodal=True, conv=conv, video_folder=str(tmp_path))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir), use_fast=False)
    settings = VideoSettings(video_folder=str(tmp_path), frames_upbound=4, force_sample=True, add_time_instruction=on)
    dataset = LazySupervisedDataset(records, tokenizer, conv, image_processor=AutoImageProcessor.from_pretrained(str(tiny_tower_dir)),
                                    video=settings)
    sample = dataset[0]
    question = f"<image>\n{EXPECTED}\n\nWhat happens?" if on else "<image>\nWhat happens?"
    expected = preprocess(preprocess_multimodal([("human", question), ("gpt", "Nothing.")]), tokenizer, conv)
    assert sample["input_ids"].tolist() == expected["input_ids"].tolist()
    assert sample["modality"] == "video" and sample["image"].shape[0] == 4
