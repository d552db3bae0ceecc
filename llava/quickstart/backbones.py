"""The quickstart's backbones: which tiny vision tower and language model a run builds, and its chat template.

A backbone is a row of :data:`BACKBONES`, resolved through the registries rather than by its name:

* ``tower_dir`` / ``llm_dir``: folder names under ``models/``;
* ``tower_kind``: a key of :data:`llava.testing.tiny.TINY_TOWER_BUILDERS`; the saved tower's ``model_type`` selects
  its class in the vision-tower registry (CLIP drops its CLS token, SigLIP has none);
* ``llm``: a plain LLM ``model_type`` (a key of :data:`llava.testing.tiny.TINY_LLM_CONFIG_KEYS`); the language-model
  registry maps it to its LLaVA class (``llama`` → ``llava_llama``, ``qwen2`` → ``llava_qwen``), and
  :data:`llava.testing.tiny.TINY_TOKENIZER_BUILDERS` to its tokenizer;
* ``llm_dir`` is named after the release the tiny model stands in for, so that the
  one model-name rule (:func:`llava.conversation.template_for_model`) gives the stage-2 and answering template
  (``vicuna-tiny`` → ``vicuna_v1``, upstream's ``--version v1``; ``qwen2.5-tiny`` → ``qwen_1_5``).

Adding a backbone is one row.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backbone:
    """One tower × LLM pair of the quickstart (see the module docstring for the fields)."""

    name: str
    tower_kind: str
    tower_dir: str
    llm: str
    llm_dir: str
    description: str

    @property
    def template(self) -> str:
        """The conversation template of stage 2 (``--version``) and of the answers (``--conv-mode``)."""
        from llava.conversation import template_for_model

        return template_for_model(self.llm_dir)


#: The quickstart's backbones, the default first. Both towers give an 8×8 grid at the quickstart's sizes.
BACKBONES: dict[str, Backbone] = {
    b.name: b
    for b in (
        Backbone("llama-clip", "clip", "clip-tiny", "llama", "vicuna-tiny",
                 "tiny LLaMA (Vicuna stand-in) + tiny CLIP tower (CLS token dropped; a whole CLIP checkpoint: text tower and tokenizer too)"),
        Backbone("qwen2-siglip", "siglip_vision_model", "siglip-tiny", "qwen2", "qwen2.5-tiny",
                 "tiny Qwen2 (Qwen2.5-Instruct stand-in, ChatML) + tiny SigLIP tower (no CLS token)"),
    )
}
DEFAULT_BACKBONE = "llama-clip"


def resolve_backbone(name: str) -> Backbone:
    """The backbone called ``name``.

    Raises:
        ValueError: If ``name`` is not a key of :data:`BACKBONES`.
    """
    if name not in BACKBONES:
        raise ValueError(f"unknown quickstart backbone {name!r}; expected one of {', '.join(BACKBONES)}")
    return BACKBONES[name]


__all__ = ["BACKBONES", "Backbone", "DEFAULT_BACKBONE", "resolve_backbone"]
