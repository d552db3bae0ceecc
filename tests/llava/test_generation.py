"""The shared generation rules (llava.generation): decoding values and the device are checked once, up front."""

from __future__ import annotations

import math

import pytest
import torch

from llava.devices import resolve_device
from llava.generation import GenerationConfig, check_generation_values
from llava.utils import UserError


@pytest.mark.parametrize(
    "values, flag",
    [
        ({"temperature": -1}, "--temperature"),
        ({"temperature": math.nan}, "--temperature"),
        ({"temperature": math.inf}, "--temperature"),
        ({"temperature": "0.2"}, "--temperature"),
        ({"top_p": 0}, "--top_p"),
        ({"top_p": 1.5}, "--top_p"),
        ({"num_beams": 0}, "--num_beams"),
        ({"num_beams": 2.0}, "--num_beams"),
        ({"max_new_tokens": -5}, "--max_new_tokens"),
        ({"max_new_tokens": 0}, "--max_new_tokens"),
        ({"max_new_tokens": True}, "--max_new_tokens"),
    ],
)
def test_bad_decoding_values_are_one_sentence_naming_the_flag(values: dict, flag: str) -> None:
    with pytest.raises(UserError, match=rf"^{flag} must be "):
        GenerationConfig(**values)


def test_good_values_pass_and_keep_upstream_meaning() -> None:
    check_generation_values(0, None, 1, 1)
    check_generation_values(0.7, 1.0, 3, 128)
    assert GenerationConfig(temperature=0).generate_kwargs()["do_sample"] is False
    sampled = GenerationConfig(temperature=0.5, top_p=0.9).generate_kwargs()
    assert sampled["do_sample"] is True and sampled["top_p"] == 0.9


def test_cuda_without_a_gpu_is_refused_not_run_on_the_cpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("cuda", "cuda:0"):
        with pytest.raises(UserError, match=rf"^--device {name} needs a GPU and a CUDA build of PyTorch; .*pass --device cpu$"):
            resolve_device(name)
    assert resolve_device(None) == "cpu"
    assert resolve_device("cpu") == "cpu"


def test_an_unknown_device_name_is_one_sentence() -> None:
    with pytest.raises(UserError, match=r"^--device 'gpu0' is not a device name"):
        resolve_device("gpu0")
