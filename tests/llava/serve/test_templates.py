"""Stop strings of the served templates: the text that ends an assistant turn (upstream's web-server rule)."""

from __future__ import annotations

import pytest

from llava.conversation import conv_templates
from llava.serve.templates import stop_string


@pytest.mark.parametrize(
    ("key", "stop"),
    [
        ("vicuna_v1", "</s>"),
        ("llava_v1", "</s>"),
        ("llava_v0", "###"),
        ("llava_llama_2", "</s>"),
        ("mistral_instruct", "</s>"),
        ("mpt", "<|im_end|>"),
        ("chatml_direct", "<|im_end|>"),
        ("qwen_1_5", "<|im_end|>"),
        ("qwen_2_5", "<|im_end|>"),
        ("plain", None),
    ],
)
def test_stop_string(key: str, stop: str | None) -> None:
    assert stop_string(conv_templates[key]) == stop
