"""What text ends an assistant turn in a template, for the served models' stop strings (no torch needed).

The template itself is chosen from the model name by :func:`llava.conversation.template_for_model`.
"""

from __future__ import annotations

from llava.conversation import Conversation, SeparatorStyle

# Styles whose assistant turns end with ``sep``; the others end with ``sep2``.
_ENDS_WITH_SEP = (SeparatorStyle.SINGLE, SeparatorStyle.MPT, SeparatorStyle.CHATML, SeparatorStyle.LLAMA_3, SeparatorStyle.GEMMA)


def stop_string(conv: Conversation) -> str | None:
    """The text that ends an assistant turn in ``conv``'s template (upstream's web-server rule, plus
    LLaVA-NeXT's ChatML, Llama-3 and Gemma styles): ``sep`` for the SINGLE, MPT, CHATML, LLAMA_3 and GEMMA styles,
    else ``sep2`` (``None`` when the template has none)."""
    if conv.sep_style in _ENDS_WITH_SEP:
        return conv.sep
    return conv.sep2


__all__ = ["stop_string"]
