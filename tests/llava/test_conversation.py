"""Prompt rendering of the conversation templates, checked against upstream LLaVA's formats.

Every expected string is written out by hand from the upstream template facts (system texts, roles,
separators), never produced by the code under test.
"""

from __future__ import annotations

import base64
from io import BytesIO

import pytest
from PIL import Image

from llava.conversation import Conversation, SeparatorStyle, conv_templates, default_conversation

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


def test_every_upstream_key_is_present() -> None:
    assert UPSTREAM_KEYS <= set(conv_templates)


@pytest.mark.parametrize(
    ("alias", "target"),
    [("v1", "vicuna_v1"), ("v0", "default"), ("mistral_direct", "chatml_direct"), ("v0_plain", "plain")],
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
