"""LLaVA-NeXT's templates that upstream LLaVA lacks, against the exact prompts NeXT's own ``llava/conversation.py``
(LLaVA-VL/LLaVA-NeXT df17966) printed for the same messages in a side-by-side run (docs/BACKBONES.md has the run and
its figures). ``llava_llama_3`` renders there through Llama-3-8B-Instruct's chat template (NeXT downloads that
tokenizer); the side-by-side gave NeXT a local tokenizer carrying that template and BOS."""

from __future__ import annotations

import copy

import pytest
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from llava.conversation import check_template_fits, conv_templates, question_of
from llava.serve.templates import stop_string

LLAVA_SYSTEM = ("You are a helpful language and vision assistant. You are able to understand the visual content that the "
                "user provides, and assist the user with a variety of tasks using natural language.")
SIMPLE = "Answer the questions about the visual content that the user provides."

#: (key, prompt NeXT renders for: user "<image>\nWhat colour is the car?", assistant "Red.", user "And the sky? ", open).
TWO_ROUNDS = [
    ("llava_llama_3",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + LLAVA_SYSTEM + "<|eot_id|><|start_header_id|>user"
     "<|end_header_id|>\n\n<image>\nWhat colour is the car?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nRed."
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd the sky?<|eot_id|><|start_header_id|>assistant"
     "<|end_header_id|>\n\n"),
    ("gemma_instruct",
     "<start_of_turn>user\n<image>\nWhat colour is the car?<end_of_turn>\n<start_of_turn>model\nRed.<end_of_turn>\n"
     "<start_of_turn>user\nAnd the sky? <end_of_turn>\n<start_of_turn>model\n"),
    ("mistral_orca",
     "<|im_start|>system\nYou are MistralOrca, a large language model trained by Alignment Lab AI. Write out your reasoning "
     "step-by-step to be sure you get the right answers!<|im_end|><|im_start|>user\n<image>\nWhat colour is the car?"
     "<|im_end|><|im_start|>assistant\nRed.<|im_end|><|im_start|>user\nAnd the sky? <|im_end|><|im_start|>assistant\n"),
    ("mistral_zephyr",
     "<|system|>\nYou are a helpful AI assistant.</s><|user|>\n<image>\nWhat colour is the car?</s><|assistant|>\nRed.</s>"
     "<|user|>\nAnd the sky? </s><|assistant|>\n"),
    ("llava_llama_2_simple",
     "[INST] <<SYS>>\n" + SIMPLE + "\n<</SYS>>\n\n<image>\nWhat colour is the car? [/INST] Red. </s><s>[INST] And the sky?  "
     "[/INST]"),
    ("llava_llama_2_mmtag",
     "[INST] <<SYS>>\n" + SIMPLE + "The visual content will be provided with the following format: <Image>visual content"
     "</Image>.\n<</SYS>>\n\n<image>\nWhat colour is the car? [/INST] Red. </s><s>[INST] And the sky?  [/INST]"),
]


def _render(key: str, turns: list[str | None]) -> str:
    conv = copy.deepcopy(conv_templates[key])  # NeXT's idiom
    for index, text in enumerate(turns):
        conv.append_message(conv.roles[index % 2], text)
    return conv.get_prompt()


@pytest.mark.parametrize("key, expected", TWO_ROUNDS, ids=[key for key, _ in TWO_ROUNDS])
def test_two_rounds_match_next(key, expected):
    assert _render(key, ["<image>\nWhat colour is the car?", "Red.", "And the sky? ", None]) == expected


def test_llama3_eval_prompt_and_question():
    prompt = _render("llava_llama_3", ["<image>\nWhat is shown here?", None])
    assert prompt == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + LLAVA_SYSTEM + "<|eot_id|>"
                      "<|start_header_id|>user<|end_header_id|>\n\n<image>\nWhat is shown here?<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert question_of(prompt, "llava_llama_3") == "What is shown here?"
    assert question_of(_render("gemma_instruct", ["<image>\nHow many?", None]), "gemma_instruct") == "How many?"


def test_stop_strings_end_the_assistant_turn():
    assert stop_string(conv_templates["llava_llama_3"]) == "<|eot_id|>"
    assert stop_string(conv_templates["gemma_instruct"]) == "<end_of_turn>\n"
    assert stop_string(conv_templates["mistral_zephyr"]) == "</s>"


def test_gemma_turns_must_alternate():
    conv = copy.deepcopy(conv_templates["gemma_instruct"])
    conv.append_message(conv.roles[0], "hi")
    conv.append_message(conv.roles[0], "again")
    with pytest.raises(ValueError, match="alternates '<start_of_turn>user\\\\n' and '<start_of_turn>model\\\\n'; turn 1"):
        conv.get_prompt()


def test_llama3_template_needs_llama3_tokens():
    vocab = {"[UNK]": 0, "<|begin_of_text|>": 1, "<|start_header_id|>": 2, "<|end_header_id|>": 3, "<|eot_id|>": 4}
    llama3 = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")), unk_token="[UNK]")
    check_template_fits("llava_llama_3", llama3)
    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]")),
                                    unk_token="[UNK]")
    with pytest.raises(ValueError, match="conversation template 'llava_llama_3' needs '<\\|begin_of_text\\|>'"):
        check_template_fits("llava_llama_3", plain)
