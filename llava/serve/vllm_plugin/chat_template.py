"""A Jinja chat template that renders OpenAI-style messages exactly as :mod:`llava.conversation` renders a
conversation: what ``vllm serve`` needs to prompt a LLaVA checkpoint the way it was trained.

    python -m llava.serve.vllm_plugin.chat_template --conv-mode llava_v1 [-o llava_v1.jinja]

The template is derived from the conversation template itself, not written by hand: a conversation of probe turns
is rendered with :meth:`~llava.conversation.Conversation.get_prompt`, and the text around the probes (before the first
user turn, between a user and an assistant turn, between an assistant and a user turn, after the last user turn) is
what the Jinja template writes around the messages. The derivation checks that those pieces stay the same for one,
two and three rounds, so a template whose rendering is not of that shape is refused instead of approximated.
A ``system`` message replaces the template's system text where the template puts it.

The plugin registers these templates as vLLM's fallback for this project's model types, choosing the template from
the checkpoint's name by :func:`llava.conversation.template_for_model` (the rule every llava command uses);
``--chat-template FILE`` overrides it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass

from llava.conversation import Conversation, check_template_name, conv_templates

_SYSTEM_PROBE = "\x00system\x00"


def _probe(index: int) -> str:
    return f"\x00turn{index}\x00"


@dataclass(frozen=True)
class TemplatePieces:
    """The literal text a conversation template puts around the turns (see the module docstring)."""

    head: str  # before the first user turn, with the template's system text
    head_before_system: str | None  # ``head`` split around the system text, when the template has one place for it
    head_after_system: str | None
    user_to_assistant: str
    assistant_to_user: str
    tail: str  # after the last user turn: the open assistant turn


def _render(template: Conversation, rounds: int, system: str | None = None) -> str:
    conv = template.copy()
    if system is not None:
        conv.system = system
    for index in range(rounds):
        conv.append_message(conv.roles[0], _probe(2 * index))
        conv.append_message(conv.roles[1], _probe(2 * index + 1) if index < rounds - 1 else None)
    return conv.get_prompt()


def _split(prompt: str, rounds: int) -> list[str]:
    """The text between the probes of a ``rounds``-round rendering (the last assistant turn is open)."""
    pieces, rest = [], prompt
    for index in range(2 * rounds - 1):
        before, found, rest = rest.partition(_probe(index))
        if not found:
            raise ValueError(f"turn {index} does not appear in the rendered prompt")
        pieces.append(before)
    return [*pieces, rest]


def template_pieces(conv_mode: str) -> TemplatePieces:
    """The pieces of ``conv_templates[conv_mode]``.

    Raises:
        ValueError: For an unknown template, or one whose rendering is not a fixed text around each turn.
    """
    check_template_name(conv_mode)
    template = conv_templates[conv_mode]
    three = _split(_render(template, 3), 3)
    head, user_to_assistant, assistant_to_user, tail = three[0], three[1], three[2], three[-1]
    expected = {1: [head, tail], 2: [head, user_to_assistant, assistant_to_user, tail], 3: three}
    for rounds, pieces in expected.items():
        if _split(_render(template, rounds), rounds) != pieces[:1] + [user_to_assistant, assistant_to_user] * (rounds - 1) + [tail]:
            raise ValueError(f"conversation template {conv_mode!r} does not put a fixed text around its turns; it has no chat template")
    probed = _render(template, 1, _SYSTEM_PROBE).partition(_probe(0))[0]
    before = after = None
    if probed.count(_SYSTEM_PROBE) == 1 and probed.replace(_SYSTEM_PROBE, template.system) == head:
        before, _, after = probed.partition(_SYSTEM_PROBE)
    return TemplatePieces(head, before, after, user_to_assistant, assistant_to_user, tail)


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def chat_template(conv_mode: str) -> str:
    """The Jinja chat template of ``conv_templates[conv_mode]`` (see the module docstring).

    Raises:
        ValueError: See :func:`template_pieces`.
    """
    pieces = template_pieces(conv_mode)
    if pieces.head_before_system is not None:
        head = (
            "{%- if messages and messages[0]['role'] == 'system' -%}"
            f"{{{{ {_literal(pieces.head_before_system)} + messages[0]['content'] + {_literal(pieces.head_after_system)} }}}}"
            f"{{%- else -%}}{{{{ {_literal(pieces.head)} }}}}{{%- endif -%}}"
        )
    else:
        head = (
            "{%- if messages and messages[0]['role'] == 'system' -%}"
            f"{{{{ raise_exception('the {conv_mode} template has no place for a system message') }}}}"
            f"{{%- endif -%}}{{{{ {_literal(pieces.head)} }}}}"
        )
    return (
        f"{{#- llava conversation template {conv_mode!r} (llava.serve.vllm_plugin.chat_template) -#}}\n"
        + head
        + "{%- set turns = messages[1:] if messages and messages[0]['role'] == 'system' else messages -%}"
        "{%- for message in turns -%}"
        "{%- if message['role'] != ('user' if loop.index0 % 2 == 0 else 'assistant') -%}"
        "{{ raise_exception('messages must alternate user and assistant turns, starting with the user') }}"
        "{%- endif -%}"
        "{{ message['content'] }}"
        "{%- if message['role'] == 'assistant' -%}"
        f"{{{{ {_literal(pieces.assistant_to_user)} }}}}"
        "{%- elif not loop.last -%}"
        f"{{{{ {_literal(pieces.user_to_assistant)} }}}}"
        "{%- elif add_generation_prompt -%}"
        f"{{{{ {_literal(pieces.tail)} }}}}"
        "{%- endif -%}"
        "{%- endfor -%}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m llava.serve.vllm_plugin.chat_template", description=__doc__.splitlines()[0])
    parser.add_argument("--conv-mode", "--conv_mode", dest="conv_mode", required=True, help="a key of llava.conversation.conv_templates")
    parser.add_argument("-o", "--output", default=None, help="write the template here (default: print it)")
    args = parser.parse_args(argv)
    from llava.utils import UserError

    try:
        text = chat_template(args.conv_mode)
    except ValueError as error:
        raise UserError(str(error)) from None
    if args.output is None:
        print(text)
        return
    from llava.outputs import check_output_file, disk_errors, write_text

    path = check_output_file(args.output, "--output")
    with disk_errors("--output", path.parent):
        write_text(path, text + "\n")


if __name__ == "__main__":
    from llava.utils import cli_main

    raise SystemExit(cli_main(main))
