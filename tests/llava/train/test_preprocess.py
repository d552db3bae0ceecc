"""``plain`` and ``v1`` training texts and their target masks, derived independently by tokenizing segments."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from llava.constants import IGNORE_INDEX, IMAGE_TOKEN_INDEX
from llava.conversation import conv_templates
from llava.mm_utils import tokenizer_image_token
from llava.train.preprocess import conversation_template, preprocess, preprocess_multimodal, render_v1

#: The vicuna_v1 system text (llava-interface §3), written out here rather than read from the template.
VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
    "detailed, and polite answers to the user's questions."
)
TWO_TURNS = [
    ("human", "<image>\nWhat is shown in the image?"),
    ("gpt", "A red square."),
    ("human", "How many circles are there?"),
    ("gpt", "There are 3 circles."),
]


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer_dir: Path):
    return AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir), use_fast=False)


def _ids(text: str, tokenizer) -> list[int]:
    return tokenizer_image_token(text, tokenizer)


def test_plain_masks_bos_and_image_and_supervises_the_caption(tokenizer):
    turns = [("human", "<image>\nDescribe the image."), ("gpt", "A red square.")]
    sample = preprocess(preprocess_multimodal(turns), tokenizer, conversation_template("plain"))
    caption = tokenizer("A red square.\n").input_ids
    assert caption[0] == tokenizer.bos_token_id
    expected_ids = [tokenizer.bos_token_id, IMAGE_TOKEN_INDEX] + caption[1:]
    expected_labels = [IGNORE_INDEX, IGNORE_INDEX] + caption[1:]
    assert sample["input_ids"].tolist() == expected_ids
    assert sample["labels"].tolist() == expected_labels


def test_v1_text_is_the_vicuna_prompt():
    text = render_v1(preprocess_multimodal(TWO_TURNS), conv_templates["v1"]).text
    assert text == (
        VICUNA_SYSTEM + " USER: <image>\nWhat is shown in the image? ASSISTANT: A red square.</s>"
        "USER: How many circles are there? ASSISTANT: There are 3 circles.</s>"
    )


def test_v1_masks_two_turns_like_upstream(tokenizer):
    sample = preprocess(preprocess_multimodal(TWO_TURNS), tokenizer, conversation_template("v1"))
    # Segments: [instruction 1][answer 1 + </s>][instruction 2][answer 2 + </s>]. Each boundary sits before a
    # space-led word or after </s>, so tokenizing a prefix gives a prefix of the full ids (checked below).
    instruction1 = VICUNA_SYSTEM + " USER: <image>\nWhat is shown in the image? ASSISTANT:"
    answer1 = instruction1 + " A red square.</s>"
    instruction2 = answer1 + "USER: How many circles are there? ASSISTANT:"
    full = instruction2 + " There are 3 circles.</s>"
    ids = _ids(full, tokenizer)
    bounds = [len(_ids(prefix, tokenizer)) for prefix in (instruction1, answer1, instruction2)] + [len(ids)]
    for prefix, end in zip((instruction1, answer1, instruction2), bounds):
        assert _ids(prefix, tokenizer) == ids[:end], prefix
    supervised = set(range(bounds[0], bounds[1])) | set(range(bounds[2], bounds[3]))
    expected = [token if position in supervised else IGNORE_INDEX for position, token in enumerate(ids)]
    assert sample["input_ids"].tolist() == ids
    assert sample["labels"].tolist() == expected
    eos = tokenizer.eos_token_id
    assert [ids[bounds[1] - 1], ids[bounds[3] - 1]] == [eos, eos]
    assert tokenizer.decode(ids[bounds[0] : bounds[1] - 1]).strip() == "A red square."
    assert tokenizer.decode(ids[bounds[2] : bounds[3] - 1]).strip() == "There are 3 circles."
    assert sample["labels"][0] == IGNORE_INDEX and ids[0] == tokenizer.bos_token_id


def test_v1_drops_a_leading_assistant_turn(tokenizer):
    conv = conversation_template("v1")
    with_lead = preprocess([("gpt", "Hello there."), *TWO_TURNS[:2]], tokenizer, conv)
    without = preprocess(TWO_TURNS[:2], tokenizer, conv)
    assert torch.equal(with_lead["input_ids"], without["input_ids"])
    assert torch.equal(with_lead["labels"], without["labels"])


def test_text_only_v1_sample_has_no_image_marker(tokenizer):
    sample = preprocess([("human", "Yes or no?"), ("gpt", "Yes")], tokenizer, conversation_template("vicuna_v1"))
    assert IMAGE_TOKEN_INDEX not in sample["input_ids"].tolist()
    supervised = [t for t in sample["labels"].tolist() if t != IGNORE_INDEX]
    assert supervised[-1] == tokenizer.eos_token_id and tokenizer.decode(supervised[:-1]).strip() == "Yes"


def test_turns_must_alternate(tokenizer):
    with pytest.raises(ValueError, match="alternate"):
        preprocess([("human", "a"), ("human", "b")], tokenizer, conversation_template("v1"))


@pytest.mark.parametrize("turns, match", [
    ([("human", "<image>\nx"), ("gpt", "y"), ("human", "z")], "exactly 2 turns"),
    ([("human", "no image here"), ("gpt", "y")], "'<image>' in the first turn"),
])
def test_plain_needs_two_turns_and_an_image(tokenizer, turns, match):
    with pytest.raises(ValueError, match=match):
        preprocess(turns, tokenizer, conversation_template("plain"))


@pytest.mark.parametrize("version", ["llama_2", "v0", "mpt"])
def test_templates_this_build_cannot_train_are_refused(version):
    with pytest.raises(ValueError, match="cannot be used for training"):
        conversation_template(version)


def test_unknown_version_is_refused():
    with pytest.raises(ValueError, match="unknown --version 'v9'"):
        conversation_template("v9")


def test_image_marker_moves_to_the_front_and_wraps():
    assert preprocess_multimodal([("human", "What is it?\n<image>")]) == [("human", "<image>\nWhat is it?")]
    assert preprocess_multimodal([("human", "<image> Hi")], mm_use_im_start_end=True) == [("human", "<im_start><image><im_end>\nHi")]
    assert preprocess_multimodal([("human", "<image>Hi")], mmtag=True) == [("human", "<Image><image></Image>\nHi")]
