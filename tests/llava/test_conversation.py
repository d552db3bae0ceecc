"""Prompt rendering of the conversation templates, checked against upstream LLaVA's formats.

Every expected string is written out by hand from the upstream template facts (system texts, roles,
separators), never produced by the code under test.
"""

from __future__ import annotations

import base64
from io import BytesIO

import pytest
from PIL import Image

from llava.conversation import (
    Conversation,
    SeparatorStyle,
    conv_templates,
    default_conversation,
    is_stage1_name,
    resolve_conv_mode,
    stage1_template,
    template_for_model,
)

VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives "
    "helpful, detailed, and polite answers to the user's questions."
)
HUMAN_SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. The assistant gives "
    "helpful, detailed, and polite answers to the human's questions."
)
MMTAG_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant is able "
    "to understand the visual content that the user provides, and assist the user with a variety of "
    "tasks using natural language.The visual content will be provided with the following format: "
    "<Image>visual content</Image>."
)
LLAVA_LLAMA_2_SYSTEM = (
    "You are a helpful language and vision assistant. You are able to understand the visual content "
    "that the user provides, and assist the user with a variety of tasks using natural language."
)

UPSTREAM_KEYS = {
    "default", "v0", "v1", "vicuna_v1", "llama_2", "mistral_instruct", "chatml_direct",
    "mistral_direct", "plain", "v0_plain", "llava_v0", "v0_mmtag", "llava_v1", "v1_mmtag",
    "llava_llama_2", "mpt",
}
#: LLaVA-NeXT's keys for the templates this project adds (llava-next-interface §2).
NEXT_KEYS = {"qwen_1_5", "qwen_2", "qwen_2_5", "llava_mistral_instruct", "llava_llama_2_simple", "llava_llama_2_mmtag", "llava_llama_3", "mistral_orca", "mistral_zephyr",
             "gemma_instruct"}
QWEN_SYSTEM = "<|im_start|>system\nYou are a helpful assistant."

QUESTION = "<image>\nWhat is this?"


def _eval_prompt(key: str, question: str = QUESTION) -> str:
    conv = conv_templates[key].copy()
    conv.append_message(conv.roles[0], question)
    conv.append_message(conv.roles[1], None)
    return conv.get_prompt()


def _two_turn_prompt(key: str, open_end: bool = False) -> str:
    conv = conv_templates[key].copy()
    conv.append_message(conv.roles[0], "<image>\nQ1")
    conv.append_message(conv.roles[1], "A1")
    conv.append_message(conv.roles[0], "Q2")
    conv.append_message(conv.roles[1], None if open_end else "A2")
    return conv.get_prompt()


def _image(size: tuple[int, int] = (40, 20), color: tuple[int, int, int] = (200, 10, 10)) -> Image.Image:
    return Image.new("RGB", size, color)


# ---------------------------------------------------------------------- registry


def test_every_upstream_and_next_key_is_present() -> None:
    assert UPSTREAM_KEYS | NEXT_KEYS == set(conv_templates)


@pytest.mark.parametrize(
    ("alias", "target"),
    [("v1", "vicuna_v1"), ("v0", "default"), ("mistral_direct", "chatml_direct"), ("v0_plain", "plain"),
     ("qwen_2", "qwen_1_5"), ("llava_mistral_instruct", "mistral_instruct")],
)
def test_aliases_share_one_template(alias: str, target: str) -> None:
    assert conv_templates[alias] is conv_templates[target]


def test_default_conversation_is_vicuna_v1() -> None:
    assert default_conversation is conv_templates["vicuna_v1"]


@pytest.mark.parametrize(
    ("key", "style", "sep", "sep2", "version", "roles"),
    [
        ("vicuna_v1", SeparatorStyle.TWO, " ", "</s>", "v1", ("USER", "ASSISTANT")),
        ("llava_v1", SeparatorStyle.TWO, " ", "</s>", "v1", ("USER", "ASSISTANT")),
        ("v1_mmtag", SeparatorStyle.TWO, " ", "</s>", "v1_mmtag", ("USER", "ASSISTANT")),
        ("llava_v0", SeparatorStyle.SINGLE, "###", None, "Unknown", ("Human", "Assistant")),
        ("v0_mmtag", SeparatorStyle.SINGLE, "###", None, "v0_mmtag", ("Human", "Assistant")),
        ("default", SeparatorStyle.SINGLE, "###", None, "Unknown", ("Human", "Assistant")),
        ("plain", SeparatorStyle.PLAIN, "\n", None, "Unknown", ("", "")),
        ("llama_2", SeparatorStyle.LLAMA_2, "<s>", "</s>", "llama_v2", ("USER", "ASSISTANT")),
        ("llava_llama_2", SeparatorStyle.LLAMA_2, "<s>", "</s>", "llama_v2", ("USER", "ASSISTANT")),
        ("mistral_instruct", SeparatorStyle.LLAMA_2, "", "</s>", "llama_v2", ("USER", "ASSISTANT")),
        ("mpt", SeparatorStyle.MPT, "<|im_end|>", None, "mpt",
         ("<|im_start|>user\n", "<|im_start|>assistant\n")),
        ("chatml_direct", SeparatorStyle.MPT, "<|im_end|>", None, "mpt",
         ("<|im_start|>user\n", "<|im_start|>assistant\n")),
        ("qwen_1_5", SeparatorStyle.CHATML, "<|im_end|>", None, "qwen", ("<|im_start|>user", "<|im_start|>assistant")),
        ("qwen_2_5", SeparatorStyle.CHATML, "<|im_end|>", None, "qwen", ("<|im_start|>user", "<|im_start|>assistant")),
    ],
)
def test_template_fields(key, style, sep, sep2, version, roles) -> None:
    conv = conv_templates[key]
    assert conv.sep_style is style
    assert conv.sep == sep
    assert conv.sep2 == sep2
    assert conv.version == version
    assert tuple(conv.roles) == roles


@pytest.mark.parametrize(
    ("key", "system"),
    [
        ("vicuna_v1", VICUNA_SYSTEM),
        ("llava_v1", HUMAN_SYSTEM),
        ("llava_v0", HUMAN_SYSTEM),
        ("default", HUMAN_SYSTEM),
        ("v1_mmtag", MMTAG_SYSTEM),
        ("v0_mmtag", MMTAG_SYSTEM),
        ("llava_llama_2", LLAVA_LLAMA_2_SYSTEM),
        ("mistral_instruct", ""),
        ("plain", ""),
        ("chatml_direct", "<|im_start|>system\nAnswer the questions."),
        ("mpt", "<|im_start|>system\nA conversation between a user and an LLM-based AI assistant. "
                "The assistant gives helpful and honest answers."),
        ("qwen_1_5", QWEN_SYSTEM),
        ("qwen_2_5", "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
    ],
)
def test_system_texts(key: str, system: str) -> None:
    assert conv_templates[key].system == system


def test_llama_2_system_text() -> None:
    system = conv_templates["llama_2"].system
    assert system.startswith(
        "You are a helpful, respectful and honest assistant. Always answer as helpfully as possible, "
        "while being safe.  Your answers should not include any harmful"
    )
    assert "positive in nature.\n\nIf a question does not make any sense" in system
    assert system.endswith(
        "If you don't know the answer to a question, please don't share false information."
    )


# ---------------------------------------------------------------------- get_prompt, one open turn


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("vicuna_v1", VICUNA_SYSTEM + " USER: <image>\nWhat is this? ASSISTANT:"),
        ("v1", VICUNA_SYSTEM + " USER: <image>\nWhat is this? ASSISTANT:"),
        ("llava_v1", HUMAN_SYSTEM + " USER: <image>\nWhat is this? ASSISTANT:"),
        ("plain", "<image>\nWhat is this?\n"),
        (
            "llava_llama_2",
            "[INST] <<SYS>>\n" + LLAVA_LLAMA_2_SYSTEM + "\n<</SYS>>\n\n<image>\nWhat is this? [/INST]",
        ),
        ("mistral_instruct", "[INST] <image>\nWhat is this? [/INST]"),
        (
            "chatml_direct",
            "<|im_start|>system\nAnswer the questions.<|im_end|>"
            "<|im_start|>user\n<image>\nWhat is this?<|im_end|><|im_start|>assistant\n",
        ),
        ("llava_v0", HUMAN_SYSTEM + "###Human: <image>\nWhat is this?###Assistant:"),
        # LLaVA-OneVision's eval prompt (llava-next-interface §2).
        (
            "qwen_1_5",
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<image>\nWhat is this?"
            "<|im_end|>\n<|im_start|>assistant\n",
        ),
        (
            "mpt",
            "<|im_start|>system\nA conversation between a user and an LLM-based AI assistant. The assistant gives "
            "helpful and honest answers.<|im_end|><|im_start|>user\n<image>\nWhat is this?<|im_end|>"
            "<|im_start|>assistant\n",
        ),
    ],
)
def test_eval_prompt(key: str, expected: str) -> None:
    assert _eval_prompt(key) == expected


# ---------------------------------------------------------------------- get_prompt, two turns


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("vicuna_v1", VICUNA_SYSTEM + " USER: <image>\nQ1 ASSISTANT: A1</s>USER: Q2 ASSISTANT: A2</s>"),
        ("llava_v1", HUMAN_SYSTEM + " USER: <image>\nQ1 ASSISTANT: A1</s>USER: Q2 ASSISTANT: A2</s>"),
        ("plain", "<image>\nQ1\nA1\nQ2\nA2\n"),
        (
            "llava_llama_2",
            "[INST] <<SYS>>\n" + LLAVA_LLAMA_2_SYSTEM + "\n<</SYS>>\n\n<image>\nQ1 [/INST] A1 </s>"
            "<s>[INST] Q2 [/INST] A2 </s>",
        ),
        ("mistral_instruct", "[INST] <image>\nQ1 [/INST] A1 </s>[INST] Q2 [/INST] A2 </s>"),
        (
            "chatml_direct",
            "<|im_start|>system\nAnswer the questions.<|im_end|><|im_start|>user\n<image>\nQ1<|im_end|>"
            "<|im_start|>assistant\nA1<|im_end|><|im_start|>user\nQ2<|im_end|>"
            "<|im_start|>assistant\nA2<|im_end|>",
        ),
        ("llava_v0", HUMAN_SYSTEM + "###Human: <image>\nQ1###Assistant: A1###Human: Q2###Assistant: A2###"),
        (
            "qwen_2",
            QWEN_SYSTEM + "<|im_end|>\n<|im_start|>user\n<image>\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\nA2<|im_end|>\n",
        ),
    ],
)
def test_two_turn_prompt(key: str, expected: str) -> None:
    assert _two_turn_prompt(key) == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("vicuna_v1", VICUNA_SYSTEM + " USER: <image>\nQ1 ASSISTANT: A1</s>USER: Q2 ASSISTANT:"),
        (
            "llava_llama_2",
            "[INST] <<SYS>>\n" + LLAVA_LLAMA_2_SYSTEM + "\n<</SYS>>\n\n<image>\nQ1 [/INST] A1 </s>"
            "<s>[INST] Q2 [/INST]",
        ),
        ("mistral_instruct", "[INST] <image>\nQ1 [/INST] A1 </s>[INST] Q2 [/INST]"),
        (
            "chatml_direct",
            "<|im_start|>system\nAnswer the questions.<|im_end|><|im_start|>user\n<image>\nQ1<|im_end|>"
            "<|im_start|>assistant\nA1<|im_end|><|im_start|>user\nQ2<|im_end|><|im_start|>assistant\n",
        ),
        ("llava_v0", HUMAN_SYSTEM + "###Human: <image>\nQ1###Assistant: A1###Human: Q2###Assistant:"),
        (
            "qwen_1_5",
            QWEN_SYSTEM + "<|im_end|>\n<|im_start|>user\n<image>\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n",
        ),
    ],
)
def test_second_turn_open(key: str, expected: str) -> None:
    assert _two_turn_prompt(key, open_end=True) == expected


def test_default_template_includes_the_few_shot_example() -> None:
    prompt = _eval_prompt("default", "Hi")
    assert prompt.startswith(
        HUMAN_SYSTEM + "###Human: What are the key differences between renewable and non-renewable "
        "energy sources?###Assistant: Renewable energy sources are those that can be replenished"
    )
    assert prompt.endswith(
        "their depletion can lead to economic and social instability.\n###Human: Hi###Assistant:"
    )
    assert conv_templates["default"].offset == 2


def test_llama_2_requires_a_user_first_turn() -> None:
    conv = conv_templates["llava_llama_2"].copy()
    conv.append_message(conv.roles[0], None)
    with pytest.raises(ValueError, match="open turn"):
        conv.get_prompt()
    conv = conv_templates["llava_llama_2"].copy()
    conv.append_message(conv.roles[1], "hello")
    with pytest.raises(ValueError, match="'ASSISTANT'"):
        conv.get_prompt()


# ---------------------------------------------------------------------- copies and templates


def test_copy_is_independent_of_the_template() -> None:
    template = conv_templates["vicuna_v1"]
    first = template.copy()
    first.append_message(first.roles[0], "hello")
    second = template.copy()
    assert len(template.messages) == 0
    assert second.messages == []
    third = first.copy()
    third.append_message(third.roles[1], "hi")
    third.messages[0][1] = "changed"
    assert first.messages == [["USER", "hello"]]
    assert _eval_prompt("vicuna_v1", "x") == VICUNA_SYSTEM + " USER: x ASSISTANT:"


def test_deepcopy_of_a_template_is_editable_as_in_llava_next() -> None:
    """NeXT's README: ``conv = copy.deepcopy(conv_templates["qwen_1_5"])`` then ``append_message`` (issue 23)."""
    import copy

    template = conv_templates["qwen_1_5"]
    conv = copy.deepcopy(template)
    conv.append_message(conv.roles[0], "<image>\nWhat is shown in this image?")
    conv.append_message(conv.roles[1], None)
    assert conv.get_prompt() == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<image>\n"
        "What is shown in this image?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert len(template.messages) == 0
    again = copy.deepcopy(conv)  # a deep copy of a conversation is independent of it
    again.messages[0][1] = "changed"
    assert conv.messages[0][1].startswith("<image>")


def test_appending_to_a_template_is_refused() -> None:
    with pytest.raises(RuntimeError, match="copy"):
        conv_templates["llava_v1"].append_message("USER", "hi")


# ---------------------------------------------------------------------- demo image messages


def test_tuple_image_message_gets_image_prefix() -> None:
    conv = conv_templates["vicuna_v1"].copy()
    conv.append_message(conv.roles[0], ("Describe it.", _image(), "Default"))
    conv.append_message(conv.roles[1], None)
    assert conv.get_prompt() == VICUNA_SYSTEM + " USER: <image>\nDescribe it. ASSISTANT:"

    conv = conv_templates["llava_v1"].copy()
    conv.append_message(conv.roles[0], ("<image>\nWhat is this?", _image(), "Pad"))
    conv.append_message(conv.roles[1], "A flag.")
    assert conv.get_prompt() == HUMAN_SYSTEM + " USER: <image>\nWhat is this? ASSISTANT: A flag.</s>"


def test_mmtag_tuple_image_message() -> None:
    conv = conv_templates["v1_mmtag"].copy()
    conv.append_message(conv.roles[0], ("What is this?", _image(), "Default"))
    conv.append_message(conv.roles[1], None)
    assert conv.get_prompt() == (
        MMTAG_SYSTEM + " USER: <Image><image></Image> ASSISTANT: Received.</s>USER: What is this? ASSISTANT:"
    )


def test_get_images_modes() -> None:
    conv = conv_templates["vicuna_v1"].copy()
    conv.append_message(conv.roles[0], ("a", _image((40, 20)), "Pad"))
    conv.append_message(conv.roles[1], "b")
    conv.append_message(conv.roles[0], ("c", _image((40, 20)), "Resize"))
    conv.append_message(conv.roles[1], None)
    padded, resized = conv.get_images(return_pil=True)
    assert padded.size == (40, 40)
    assert padded.getpixel((0, 0)) == (122, 116, 104)
    assert padded.getpixel((20, 20)) == (200, 10, 10)
    assert resized.size == (336, 336)

    encoded = conv.get_images()
    assert len(encoded) == 2
    decoded = Image.open(BytesIO(base64.b64decode(encoded[0])))
    assert decoded.format == "PNG"
    assert decoded.size == (40, 40)


def test_get_images_downscales_large_images() -> None:
    conv = conv_templates["vicuna_v1"].copy()
    conv.append_message(conv.roles[0], ("a", _image((3000, 1000)), "Default"))
    conv.append_message(conv.roles[1], "b")
    conv.append_message(conv.roles[0], ("c", _image((100, 50)), "Crop"))
    large, small = conv.get_images(return_pil=True)
    # Aspect 3: shorter side min(1344 / 3, 672, 1000) = 448, longer side 3 * 448 = 1344.
    assert large.size == (1344, 448)
    assert small.size == (100, 50)


def test_unknown_image_mode_is_rejected() -> None:
    conv = conv_templates["vicuna_v1"].copy()
    conv.append_message(conv.roles[0], ("a", _image(), "Stretch"))
    with pytest.raises(ValueError, match="'Stretch'"):
        conv.get_images()


def test_to_gradio_chatbot_and_dict() -> None:
    conv = conv_templates["vicuna_v1"].copy()
    conv.append_message(conv.roles[0], ("<image>\nWhat is this?", _image(), "Default"))
    conv.append_message(conv.roles[1], "A flag.")
    conv.append_message(conv.roles[0], "Sure?")
    conv.append_message(conv.roles[1], None)
    chat = conv.to_gradio_chatbot()
    assert len(chat) == 2
    assert chat[0][0].startswith('<img src="data:image/jpeg;base64,')
    assert chat[0][0].endswith('" alt="user upload image" />What is this?')
    assert chat[0][1] == "A flag."
    assert chat[1] == ["Sure?", None]

    summary = conv.dict()
    assert summary["messages"][0] == ["USER", "<image>\nWhat is this?"]
    assert summary["sep"] == " " and summary["sep2"] == "</s>"
    assert summary["system"] == VICUNA_SYSTEM


def test_offset_hides_few_shot_turns_from_the_chatbot() -> None:
    conv = conv_templates["default"].copy()
    conv.append_message(conv.roles[0], "Hi")
    conv.append_message(conv.roles[1], None)
    assert conv.to_gradio_chatbot() == [["Hi", None]]


def test_conversation_can_be_built_directly() -> None:
    conv = Conversation(system="S", roles=("U", "A"), messages=[], offset=0)
    conv.append_message("U", "q")
    conv.append_message("A", None)
    assert conv.get_prompt() == "S###U: q###A:"


def test_chatml_without_system_text_starts_with_the_user_turn() -> None:
    conv = Conversation(system="", roles=("<|im_start|>user", "<|im_start|>assistant"), messages=[], offset=0,
                        sep_style=SeparatorStyle.CHATML, sep="<|im_end|>")
    conv.append_message(conv.roles[0], "Hi")
    conv.append_message(conv.roles[1], None)
    assert conv.get_prompt() == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_chatml_demo_image_message() -> None:
    conv = conv_templates["qwen_1_5"].copy()
    conv.append_message(conv.roles[0], ("Describe it.", _image(), "Default"))
    conv.append_message(conv.roles[1], None)
    assert conv.get_prompt() == (
        QWEN_SYSTEM + "<|im_end|>\n<|im_start|>user\n<image>\nDescribe it.<|im_end|>\n<|im_start|>assistant\n"
    )


# ---------------------------------------------------------------------- model name -> template


@pytest.mark.parametrize(
    ("name", "template"),
    [
        # upstream run_llava / cli / web server rules (llava-interface §9)
        ("llava-v1.5-7b", "llava_v1"),
        ("llava-v1.5-13b-lora", "llava_v1"),
        ("llava-llama-2-13b-chat-lightning-preview", "llava_llama_2"),
        ("llava-v1.6-mistral-7b", "mistral_instruct"),
        ("llava-v1.6-34b", "chatml_direct"),
        ("llava-v1.6-nous-hermes-2-mixtral", "chatml_direct"),
        ("llava-mpt-7b", "mpt"),
        ("llava-tiny", "llava_v0"),
        ("LLaVA-Lightning-MPT-7B-preview", "mpt"),
        ("llava-v1.5-7b-pretrain-plain", "v1_mmtag"),
        ("llava-v1.5-7b-plain-finetune", "llava_v1"),
        ("llava-336px-pretrain-vicuna-mmtag", "v0_mmtag"),
        ("vicuna-7b-v1.5", "vicuna_v1"),
        ("Llama-2-7b-chat-hf", "llama_2"),
        ("mpt-7b-chat", "mpt"),
        # LLaVA-NeXT / OneVision Qwen checkpoints (llava-next-interface §2)
        ("llava-onevision-qwen2-7b-ov", "qwen_1_5"),
        ("LLaVA-NeXT-Video-7B-Qwen2", "qwen_1_5"),
        ("Qwen2.5-3B-Instruct", "qwen_1_5"),
    ],
)
def test_template_for_model(name: str, template: str) -> None:
    assert template_for_model(name) == template


@pytest.mark.parametrize(
    ("name", "requested", "used"),
    [
        ("llava-v1.5-7b-pretrain-plain", "v1", "v1_mmtag"),
        ("llava-v1.5-7b-pretrain-plain", "llava_v1", "llava_v1"),  # no llava_v1_mmtag template: kept
        ("llava-v1.5-7b-plain-finetune", "v1", "v1"),
        ("llava-v1.5-7b", "v0", "v0"),
    ],
)
def test_stage1_template(name: str, requested: str, used: str) -> None:
    assert stage1_template(name, requested) == used


@pytest.mark.parametrize(("name", "stage1"), [
    ("llava-v1.5-7b-pretrain-plain", True), ("LLaVA-Pretrain-PLAIN", True), ("llava-plain-FineTune", False),
    ("llava-v1.5-7b", False), ("llava-v1.5-mmtag", False),
])
def test_one_stage1_rule_for_templates_and_loaders(name: str, stage1: bool) -> None:
    # template_for_model and model_vqa*'s stage1_template fold case alike: both follow is_stage1_name
    assert is_stage1_name(name) is stage1
    assert (stage1_template(name, "v1") == "v1_mmtag") is stage1
    assert template_for_model(name).endswith("_mmtag") is (stage1 or "mmtag" in name)


def test_resolve_conv_mode_prefers_the_requested_template(caplog) -> None:
    assert resolve_conv_mode("llava-v1.5-7b", None) == "llava_v1"
    with caplog.at_level("WARNING", logger="llava.conversation"):
        assert resolve_conv_mode("llava-v1.5-7b", "vicuna_v1") == "vicuna_v1"
    assert "inferred from 'llava-v1.5-7b' is llava_v1; using vicuna_v1" in caplog.text
    with pytest.raises(ValueError, match="unknown conversation template 'v9'; expected one of chatml_direct, default"):
        resolve_conv_mode("llava-v1.5-7b", "v9")


def test_resolve_conv_mode_checks_the_tokenizer(tiny_tokenizer_dir, tiny_qwen_tokenizer_dir) -> None:
    from transformers import AutoTokenizer

    llama = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    qwen = AutoTokenizer.from_pretrained(str(tiny_qwen_tokenizer_dir))
    assert resolve_conv_mode("llava-onevision-qwen2-0.5b-ov", None, qwen) == "qwen_1_5"
    assert resolve_conv_mode("llava-v1.5-7b", None, llama) == "llava_v1"
    with pytest.raises(ValueError, match=r"^conversation template 'qwen_1_5' needs '<\|im_start\|>' and '<\|im_end\|>' "
                       r"as single tokens, which the tokenizer \(LlamaTokenizer\) lacks; templates that fit it: default, "):
        resolve_conv_mode("llava-onevision-qwen2-0.5b-ov", None, llama)
    with pytest.raises(ValueError, match=r"^conversation template 'llava_v1' needs '</s>' as a single token, which"):
        resolve_conv_mode("llava-v1.5-7b", None, qwen)
