"""Training texts and target masks for every template, checked against an independent tokenisation.

For each template the expected training text of one two-turn conversation is written out here by hand, with the
supervised parts (each answer and the separator that ends it) between ⟦ and ⟧. The expected labels come from
tokenising growing prefixes of that text with ``tokenizer_image_token`` (the test checks that each prefix's ids
are a prefix of the full ids, so the piece boundaries are token boundaries), not from the character offsets the
code under test uses. Tokenizers: the sentencepiece LLaMA one, a Qwen2-style byte-level BPE with ChatML tokens,
and the LLaMA one with ChatML tokens added.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from llava.constants import IGNORE_INDEX, IMAGE_TOKEN_INDEX
from llava.conversation import SeparatorStyle, check_template_fits, conv_templates, templates_for_tokenizer
from llava.mm_utils import tokenizer_image_token
from llava.train import preprocess as preprocess_module
from llava.train.preprocess import conversation_template, preprocess, preprocess_multimodal, render

# System texts (llava-interface §3, llava-next-interface §2), written out here rather than read from the templates.
VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
    "detailed, and polite answers to the user's questions."
)
HUMAN_SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, "
    "detailed, and polite answers to the human's questions."
)
MMTAG_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant is able to understand "
    "the visual content that the user provides, and assist the user with a variety of tasks using natural language."
    "The visual content will be provided with the following format: <Image>visual content</Image>."
)
LLAMA_2_SYSTEM = (
    "You are a helpful, respectful and honest assistant. Always answer as helpfully as possible, while being safe.  "
    "Your answers should not include any harmful, unethical, racist, sexist, toxic, dangerous, or illegal content. "
    "Please ensure that your responses are socially unbiased and positive in nature.\n\nIf a question does not make "
    "any sense, or is not factually coherent, explain why instead of answering something not correct. If you don't "
    "know the answer to a question, please don't share false information."
)
LLAVA_LLAMA_2_SYSTEM = (
    "You are a helpful language and vision assistant. You are able to understand the visual content that the user "
    "provides, and assist the user with a variety of tasks using natural language."
)
MPT_SYSTEM = (
    "<|im_start|>system\nA conversation between a user and an LLM-based AI assistant. "
    "The assistant gives helpful and honest answers."
)
CHATML_DIRECT_SYSTEM = "<|im_start|>system\nAnswer the questions."
QWEN_SYSTEM = "<|im_start|>system\nYou are a helpful assistant."
QWEN_2_5_SYSTEM = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
ORCA_SYSTEM = (
    "<|im_start|>system\nYou are MistralOrca, a large language model trained by Alignment Lab AI. Write out your "
    "reasoning step-by-step to be sure you get the right answers!"
)
SIMPLE_SYSTEM = "Answer the questions about the visual content that the user provides."
SIMPLE_MMTAG_SYSTEM = SIMPLE_SYSTEM + "The visual content will be provided with the following format: <Image>visual content</Image>."
#: LLaVA-NeXT's templates whose style (Llama-3's chat template, Gemma's turns) has no training text here.
INFERENCE_ONLY = {"llava_llama_3", "gemma_instruct"}

Q1, A1 = "<image>\nWhat is shown in the image?", "A red square."
Q2, A2 = "How many circles are there?", "There are 3 circles."
TWO_TURNS = [("human", Q1), ("gpt", A1), ("human", Q2), ("gpt", A2)]
CAPTION_TURNS = [("human", "<image>\nDescribe the image."), ("gpt", A1)]


def _two(system: str) -> str:
    return f"{system} USER: {Q1} ASSISTANT:⟦ {A1}</s>⟧USER: {Q2} ASSISTANT:⟦ {A2}</s>⟧"


def _single(system: str) -> str:
    return f"{system}###Human: {Q1}###Assistant:⟦ {A1}###⟧Human: {Q2}###Assistant:⟦ {A2}###⟧"


def _llama_2(system: str) -> str:
    return f"[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{Q1} [/INST]⟦ {A1} </s>⟧<s>[INST] {Q2} [/INST]⟦ {A2} </s>⟧"


MISTRAL = f"[INST] {Q1} [/INST]⟦ {A1} </s>⟧[INST] {Q2} [/INST]⟦ {A2} </s>⟧"


def _mpt(system: str) -> str:
    return (
        f"{system}<|im_end|><|im_start|>user\n{Q1}<|im_end|><|im_start|>assistant\n⟦{A1}<|im_end|>⟧"
        f"<|im_start|>user\n{Q2}<|im_end|><|im_start|>assistant\n⟦{A2}<|im_end|>⟧"
    )


def _chatml(system: str) -> str:
    return (
        f"{system}<|im_end|>\n<|im_start|>user\n{Q1}<|im_end|>\n<|im_start|>assistant\n⟦{A1}<|im_end|>⟧\n"
        f"<|im_start|>user\n{Q2}<|im_end|>\n<|im_start|>assistant\n⟦{A2}<|im_end|>⟧\n"
    )


ZEPHYR = (f"<|system|>\nYou are a helpful AI assistant.</s><|user|>\n{Q1}</s><|assistant|>\n⟦{A1}</s>⟧"
          f"<|user|>\n{Q2}</s><|assistant|>\n⟦{A2}</s>⟧")

PLAIN = f"<image>⟦{A1}\n⟧"

#: Every template key -> its expected training text (``plain`` for CAPTION_TURNS, the others for TWO_TURNS).
EXPECTED = {
    "plain": PLAIN, "v0_plain": PLAIN,
    "v1": _two(VICUNA_SYSTEM), "vicuna_v1": _two(VICUNA_SYSTEM), "llava_v1": _two(HUMAN_SYSTEM),
    "v1_mmtag": _two(MMTAG_SYSTEM),
    "default": _single(HUMAN_SYSTEM), "v0": _single(HUMAN_SYSTEM), "llava_v0": _single(HUMAN_SYSTEM),
    "v0_mmtag": _single(MMTAG_SYSTEM),
    "llama_2": _llama_2(LLAMA_2_SYSTEM), "llava_llama_2": _llama_2(LLAVA_LLAMA_2_SYSTEM),
    "mistral_instruct": MISTRAL, "llava_mistral_instruct": MISTRAL,
    "mpt": _mpt(MPT_SYSTEM), "chatml_direct": _mpt(CHATML_DIRECT_SYSTEM), "mistral_direct": _mpt(CHATML_DIRECT_SYSTEM),
    "qwen_1_5": _chatml(QWEN_SYSTEM), "qwen_2": _chatml(QWEN_SYSTEM), "qwen_2_5": _chatml(QWEN_2_5_SYSTEM),
    "mistral_orca": _mpt(ORCA_SYSTEM), "mistral_zephyr": ZEPHYR,
    "llava_llama_2_simple": _llama_2(SIMPLE_SYSTEM), "llava_llama_2_mmtag": _llama_2(SIMPLE_MMTAG_SYSTEM),
}

_LLAMA_STYLE = {"v1", "vicuna_v1", "llava_v1", "v1_mmtag", "llama_2", "llava_llama_2", "mistral_instruct",
                "llava_mistral_instruct", "mistral_zephyr", "llava_llama_2_simple", "llava_llama_2_mmtag"}
_CHATML_STYLE = {"mpt", "chatml_direct", "mistral_direct", "qwen_1_5", "qwen_2", "qwen_2_5", "mistral_orca"}
_ANY = {"plain", "v0_plain", "default", "v0", "llava_v0", "v0_mmtag"}
#: Which templates each tokenizer can carry: </s> (and <s>) for the LLaMA styles, <|im_start|>/<|im_end|> for ChatML.
FITS = {"llama": _ANY | _LLAMA_STYLE, "qwen": _ANY | _CHATML_STYLE, "chatml_llama": _ANY | _LLAMA_STYLE | _CHATML_STYLE}


@pytest.fixture(scope="module")
def tokenizers(tiny_tokenizer_dir: Path, tiny_qwen_tokenizer_dir: Path, tiny_chatml_llama_tokenizer_dir: Path):
    return {
        "llama": AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir), use_fast=False),
        "qwen": AutoTokenizer.from_pretrained(str(tiny_qwen_tokenizer_dir)),
        "chatml_llama": AutoTokenizer.from_pretrained(str(tiny_chatml_llama_tokenizer_dir)),
    }


@pytest.fixture(scope="module")
def tokenizer(tokenizers):
    return tokenizers["llama"]


def _pieces(marked: str) -> list[tuple[str, bool]]:
    return [(piece.strip("⟦⟧"), piece.startswith("⟦")) for piece in re.split(r"(⟦.*?⟧)", marked, flags=re.S) if piece]


def independent_labels(marked: str, tokenizer) -> tuple[list[int], list[int]]:
    """Ids of the unmarked text and labels: a token is supervised iff it lies inside a ⟦⟧ piece, found by
    tokenising the text up to the start and the end of each piece."""
    text = "".join(piece for piece, _ in _pieces(marked))
    ids = tokenizer_image_token(text, tokenizer)
    supervised: set[int] = set()
    prefix, start = "", 0
    for piece, is_supervised in _pieces(marked):
        prefix += piece
        prefix_ids = tokenizer_image_token(prefix, tokenizer)
        assert prefix_ids == ids[: len(prefix_ids)], f"piece boundary inside a token after {piece!r}"
        if is_supervised:
            supervised |= set(range(start, len(prefix_ids)))
        start = len(prefix_ids)
    return ids, [token if position in supervised else IGNORE_INDEX for position, token in enumerate(ids)]


def test_every_template_has_an_expected_text():
    assert set(EXPECTED) == set(conv_templates) - INFERENCE_ONLY
    assert set().union(*FITS.values()) == set(conv_templates) - INFERENCE_ONLY


@pytest.mark.parametrize("version", sorted(INFERENCE_ONLY))
def test_an_inference_only_template_is_one_sentence(version):
    style = conv_templates[version].sep_style.name
    with pytest.raises(ValueError, match=rf"--version '{version}' uses the {style} style, which cannot be trained in this build"):
        conversation_template(version)


@pytest.mark.parametrize("kind", sorted(FITS))
def test_templates_that_fit_each_tokenizer(tokenizers, kind):
    assert templates_for_tokenizer(tokenizers[kind]) == sorted(FITS[kind])


@pytest.mark.parametrize("kind, key", [(kind, key) for kind in sorted(FITS) for key in sorted(FITS[kind])])
def test_masks_match_an_independent_tokenisation(tokenizers, kind, key):
    tokenizer = tokenizers[kind]
    marked = EXPECTED[key]
    turns = CAPTION_TURNS if key in ("plain", "v0_plain") else TWO_TURNS
    conv = conversation_template(key)
    assert render(turns, conv).text == "".join(piece for piece, _ in _pieces(marked))
    ids, labels = independent_labels(marked, tokenizer)
    sample = preprocess(turns, tokenizer, conv)
    assert sample["input_ids"].tolist() == ids
    assert sample["labels"].tolist() == labels
    assert ids.count(IMAGE_TOKEN_INDEX) == 1 and labels[ids.index(IMAGE_TOKEN_INDEX)] == IGNORE_INDEX
    if tokenizer.bos_token_id is not None:
        assert ids[0] == tokenizer.bos_token_id and labels[0] == IGNORE_INDEX
    # The supervised tokens spell out exactly the answers with their end-of-turn separators.
    supervised_text = tokenizer.decode([token for token in labels if token != IGNORE_INDEX])
    expected_text = "".join(piece for piece, is_supervised in _pieces(marked) if is_supervised)
    assert supervised_text.replace(" ", "") == expected_text.replace(" ", "")


@pytest.mark.parametrize("kind, key, lacking", [
    ("llama", "qwen_1_5", "'<|im_start|>' and '<|im_end|>' as single tokens"),
    ("llama", "mpt", "'<|im_start|>' and '<|im_end|>' as single tokens"),
    ("qwen", "llava_v1", "'</s>' as a single token"),
    ("qwen", "mistral_instruct", "'</s>' as a single token"),
    ("qwen", "llama_2", "'<s>' and '</s>' as single tokens"),
])
def test_a_template_the_tokenizer_cannot_carry_is_refused(tokenizers, kind, key, lacking):
    with pytest.raises(ValueError) as error:
        check_template_fits(key, tokenizers[kind])
    message = str(error.value)
    assert message.startswith(f"conversation template '{key}' needs {lacking}, which the tokenizer")
    assert message.endswith("templates that fit it: " + ", ".join(sorted(FITS[kind])))


def test_training_refuses_a_template_the_tokenizer_cannot_carry(tmp_path, tiny_base_llm, tiny_tower_dir, train_data):
    from llava.train.train import train

    from .conftest import stage2_flags

    argv = stage2_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", tmp_path / "out", tmp_path / "none.bin")
    argv = [flag for flag in argv if flag not in ("--pretrain_mm_mlp_adapter", str(tmp_path / "none.bin"))]
    argv[argv.index("--version") + 1] = "qwen_1_5"
    with pytest.raises(ValueError, match=r"conversation template 'qwen_1_5' needs '<\|im_start\|>' and '<\|im_end\|>'"):
        train(argv=argv)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("checkpoint-*"))


def test_plain_masks_bos_and_image_and_supervises_the_caption(tokenizer):
    sample = preprocess(preprocess_multimodal(CAPTION_TURNS), tokenizer, conversation_template("plain"))
    caption = tokenizer(A1 + "\n").input_ids
    assert caption[0] == tokenizer.bos_token_id
    assert sample["input_ids"].tolist() == [tokenizer.bos_token_id, IMAGE_TOKEN_INDEX] + caption[1:]
    assert sample["labels"].tolist() == [IGNORE_INDEX, IGNORE_INDEX] + caption[1:]


@pytest.mark.parametrize("key", ["v1", "llama_2", "v0", "mpt", "qwen_2"])
def test_a_leading_assistant_turn_is_dropped(tokenizers, key):
    tokenizer = tokenizers["chatml_llama"]
    conv = conversation_template(key)
    with_lead = preprocess([("gpt", "Hello there."), *TWO_TURNS[:2]], tokenizer, conv)
    without = preprocess(TWO_TURNS[:2], tokenizer, conv)
    assert torch.equal(with_lead["input_ids"], without["input_ids"])
    assert torch.equal(with_lead["labels"], without["labels"])


def test_text_only_sample_has_no_image_marker(tokenizers):
    tokenizer = tokenizers["qwen"]
    sample = preprocess([("human", "Yes or no?"), ("gpt", "Yes")], tokenizer, conversation_template("qwen_2"))
    assert IMAGE_TOKEN_INDEX not in sample["input_ids"].tolist()
    supervised = [t for t in sample["labels"].tolist() if t != IGNORE_INDEX]
    assert tokenizer.decode(supervised) == "Yes<|im_end|>"


@pytest.mark.parametrize("turns, match", [
    ([("human", "a"), ("human", "b")], "alternate"),
    ([("human", "a"), ("gpt", "")], r"turn 1 \(gpt\) is empty"),
])
@pytest.mark.parametrize("key", ["v1", "qwen_1_5", "llama_2"])
def test_turns_must_alternate_and_have_text(tokenizers, key, turns, match):
    with pytest.raises(ValueError, match=match):
        preprocess(turns, tokenizers["chatml_llama"], conversation_template(key))


@pytest.mark.parametrize("turns, match", [
    ([("human", "<image>\nx"), ("gpt", "y"), ("human", "z")], "exactly 2 turns"),
    ([("human", "no image here"), ("gpt", "y")], "'<image>' in the first turn"),
])
def test_plain_needs_two_turns_and_an_image(tokenizer, turns, match):
    with pytest.raises(ValueError, match=match):
        preprocess(turns, tokenizer, conversation_template("plain"))


def test_unknown_version_is_refused():
    with pytest.raises(ValueError, match=r"--version 'v9' is unknown; expected one of chatml_direct, default, "):
        conversation_template("v9")


def test_a_style_without_training_text_is_refused(monkeypatch):
    monkeypatch.delitem(preprocess_module._STYLES, SeparatorStyle.MPT)
    message = r"--version 'mpt' uses the MPT style, which cannot be trained in this build; expected one of default, "
    with pytest.raises(ValueError, match=message):
        conversation_template("mpt")
    with pytest.raises(ValueError, match="MPT templates cannot be trained in this build; expected one of default, "):
        render(TWO_TURNS, conv_templates["chatml_direct"])


def test_image_marker_moves_to_the_front_and_wraps():
    assert preprocess_multimodal([("human", "What is it?\n<image>")]) == [("human", "<image>\nWhat is it?")]
    assert preprocess_multimodal([("human", "<image> Hi")], mm_use_im_start_end=True) == [("human", "<im_start><image><im_end>\nHi")]
    assert preprocess_multimodal([("human", "<image>Hi")], mmtag=True) == [("human", "<Image><image></Image>\nHi")]


@pytest.mark.parametrize("version", ["llava_llama_2", "v0"])
def test_a_newly_trainable_template_trains(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, version):
    """One projector-only pass over the chat data through ``llava.train.train`` with the template's masks."""
    import math

    from llava.train.train import train

    from .conftest import stage2_flags

    adapter = tmp_path / "none.bin"
    argv = stage2_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", tmp_path / "out", adapter)
    argv = [flag for flag in argv if flag not in ("--pretrain_mm_mlp_adapter", str(adapter))]
    argv[argv.index("--version") + 1] = version
    trainer = train(argv=argv + ["--tune_mm_mlp_adapter", "True", "--max_steps", "2"])
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(math.isfinite(loss) and loss > 0 for loss in losses)
