"""The plugin's chat templates render OpenAI-style messages, through transformers' ``apply_chat_template`` (what
vLLM calls), into exactly the prompt ``llava.conversation`` renders for the same turns, for every template."""

from __future__ import annotations

from pathlib import Path

import pytest

from llava.conversation import conv_templates
from llava.serve.vllm_plugin import chat_template as module
from llava.utils import UserError

TURNS = ["<image>\nWhat is in the picture?", "A red square.", "And what colour is the border?", "White.", "Sure?"]


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))


def _ours(conv_mode: str, turns: list[str], system: str | None = None) -> str:
    conv = conv_templates[conv_mode].copy()
    if system is not None:
        conv.system = system
    for index, text in enumerate(turns):
        conv.append_message(conv.roles[index % 2], text)
    conv.append_message(conv.roles[1], None)
    return conv.get_prompt()


def _messages(turns: list[str], system: str | None = None) -> list[dict[str, str]]:
    head = [{"role": "system", "content": system}] if system is not None else []
    return head + [{"role": ("user", "assistant")[index % 2], "content": text} for index, text in enumerate(turns)]


@pytest.mark.parametrize("conv_mode", sorted(conv_templates))
@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_every_template_renders_as_the_conversation_does(tokenizer, conv_mode: str, rounds: int) -> None:
    turns = TURNS[: 2 * rounds - 1]
    rendered = tokenizer.apply_chat_template(_messages(turns), chat_template=module.chat_template(conv_mode),
                                             tokenize=False, add_generation_prompt=True)
    assert rendered == _ours(conv_mode, turns)


@pytest.mark.parametrize("conv_mode", ["llava_v1", "qwen_2", "llava_llama_2", "mistral_instruct"])
def test_a_system_message_replaces_the_templates_system_text(tokenizer, conv_mode: str) -> None:
    if module.template_pieces(conv_mode).head_before_system is None:
        pytest.skip(f"{conv_mode} has no place for a system text")
    rendered = tokenizer.apply_chat_template(_messages(TURNS[:1], "Be brief."), chat_template=module.chat_template(conv_mode),
                                             tokenize=False, add_generation_prompt=True)
    assert rendered == _ours(conv_mode, TURNS[:1], "Be brief.")


def test_turns_out_of_order_are_refused(tokenizer) -> None:
    from jinja2.exceptions import TemplateError

    with pytest.raises(TemplateError, match="messages must alternate user and assistant turns"):
        tokenizer.apply_chat_template([{"role": "assistant", "content": "x"}], chat_template=module.chat_template("llava_v1"),
                                      tokenize=False, add_generation_prompt=True)


def test_the_command_writes_the_template_and_refuses_an_unknown_mode(tmp_path: Path, capsys) -> None:
    module.main(["--conv-mode", "llava_v1", "-o", str(tmp_path / "t.jinja")])
    assert (tmp_path / "t.jinja").read_text() == module.chat_template("llava_v1") + "\n"
    with pytest.raises(UserError, match=r"^unknown conversation template 'nope'; expected one of "):
        module.main(["--conv-mode", "nope"])
    with pytest.raises(UserError, match=r"is a folder; pass a file path"):
        module.main(["--conv-mode", "llava_v1", "-o", str(tmp_path)])
