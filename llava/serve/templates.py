"""Which conversation template a served model gets, and what text ends its answers (no torch needed)."""

from __future__ import annotations

from llava.conversation import Conversation, SeparatorStyle


def template_for_model(model_name: str) -> str:
    """Upstream web server's template for a model name, mapped onto templates that exist here.

    Upstream names ``mistral_orca`` and ``mpt_text``, which it never defined; they become
    ``mistral_instruct`` and ``mpt``.
    """
    name = model_name.lower()
    if "llava" not in name:
        if "mpt" in name:
            return "mpt"
        return "llama_2" if "llama-2" in name else "vicuna_v1"
    if "llama-2" in name:
        return "llava_llama_2"
    if "mistral" in name or "mixtral" in name:
        return "chatml_direct" if "hermes" in name else "mistral_instruct"
    if "llava-v1.6-34b" in name:
        return "chatml_direct"
    tagged = "mmtag" in name or ("plain" in name and "finetune" not in name)
    if "v1" in name:
        return "v1_mmtag" if tagged else "llava_v1"
    if "mpt" in name:
        return "mpt"
    return "v0_mmtag" if tagged else "llava_v0"


def stop_string(conv: Conversation) -> str | None:
    """The text that ends an assistant turn in ``conv``'s template (upstream's web-server rule):
    ``sep`` for the SINGLE and MPT styles, else ``sep2`` (``None`` when the template has none)."""
    if conv.sep_style in (SeparatorStyle.SINGLE, SeparatorStyle.MPT):
        return conv.sep
    return conv.sep2


__all__ = ["stop_string", "template_for_model"]
