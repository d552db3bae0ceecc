"""The compressor contract: what a compressor plugin needs from the model (:class:`ModelNeeds`) and what it gets
(:class:`CompressorInputs`), and where the model keeps the resolved needs (:func:`projector_needs`).

See :mod:`llava.model.multimodal_projector.plugins` for the declaration that carries a :class:`ModelNeeds`, and
docs/PLUGINS.md, "How the projector is called". This module imports only torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

#: The text a compressor may ask for (:attr:`ModelNeeds.text`): each sample's question (the first user turn,
#: image markers removed, tokenized on its own as the tokenizer encodes a text), its instruction (the question
#: without the answer-format line LLaVA's evaluation prompts append, :func:`llava.conversation.instruction_of`),
#: or the whole prompt (every non-target token of the sample: system text, roles, every turn).
TEXT_NEEDS = ("question", "instruction", "prompt")
#: Who encodes that text (:attr:`ModelNeeds.text_encoder`): the LLM (its tokenizer and input embedding) or the
#: vision tower's paired text encoder (CLIP's text tower: its tokenizer and projected text embedding).
TEXT_ENCODERS = ("llm", "tower")


@dataclass(frozen=True)
class ModelNeeds:
    """What a compressor needs from the model besides the select layer's features.

    Resolved once, when the projector is built (``build_vision_projector``), and kept on the built module as
    ``compressor_needs`` (:func:`projector_needs`); ``encode_images`` reads it from there.

    Args:
        tower_layers: Hidden-state indices of the vision tower (as ``mm_vision_select_layer``, negative from
            the end) whose features the compressor reads (e.g. multi-level features).
        attention: The encoder layer whose self-attention the compressor reads (its queries, keys and
            probabilities), **relative to the select layer**: ``0`` is the layer that produced the select
            layer's features (their own attention, as most attention-based pruners use), ``1`` the next layer,
            whose input they are (with ``mm_vision_select_layer -2`` on CLIP-L that is the last layer, index
            23 of 24); ``None`` for no attention.
        text: ``"question"``, ``"instruction"`` or ``"prompt"`` (see :data:`TEXT_NEEDS`), or ``None`` for no text.
        square_grid: The tower's patch grid must be square.
        text_encoder: ``"llm"`` (default): the text is tokenized by the LLM's tokenizer and embedded by its input
            embedding; ``"tower"``: tokenized and encoded by the vision tower's paired text encoder (one projected
            embedding per context-length segment), and the compressor also gets the select layer's patches in
            that image–text space (:attr:`CompressorInputs.paired_features`). ``"tower"`` reads the question or
            the instruction, not the prompt (which is cut from the LLM's ids).
    """

    tower_layers: tuple[int, ...] = ()
    attention: int | None = None
    text: str | None = None
    square_grid: bool = False
    text_encoder: str = "llm"

    def __post_init__(self) -> None:
        if self.attention is not None and (isinstance(self.attention, bool) or not isinstance(self.attention, int)):
            raise ValueError(
                f"ModelNeeds.attention is a layer offset from the select layer (0: the layer that produced its "
                f"features, 1: the next layer) or None, got {self.attention!r}"
            )
        if self.text is not None and self.text not in TEXT_NEEDS:
            raise ValueError(f"ModelNeeds.text must be one of {list(TEXT_NEEDS)} or None, got {self.text!r}")
        if self.text_encoder not in TEXT_ENCODERS:
            raise ValueError(f"ModelNeeds.text_encoder must be one of {list(TEXT_ENCODERS)}, got {self.text_encoder!r}")
        if self.text_encoder == "tower" and self.text not in ("question", "instruction"):
            raise ValueError(f"ModelNeeds.text_encoder 'tower' encodes the question or the instruction, so text must be one of them, got {self.text!r}")

    @property
    def prompt(self) -> bool:
        """Whether the compressor reads any text (``text`` is set), so the model runs a text pass for it."""
        return self.text is not None

    @property
    def extra(self) -> bool:
        """Whether the projector takes a :class:`CompressorInputs` (anything beyond the select layer)."""
        return bool(self.tower_layers) or self.attention is not None or self.text is not None


@dataclass
class CompressorInputs:
    """Everything a plugin asked for, passed as ``projector(features, inputs)``.

    Attributes:
        features: ``[N, T, D]`` the select layer's features (the same tensor as the first argument).
        grid_shape: ``(H, W)`` patch grid of the tower.
        has_cls_token: Whether the tower has a CLS token (position 0 of ``queries``/``keys``/``attention``;
            in ``features`` only with ``mm_vision_select_feature cls_patch``).
        layers: ``{index: [N, T', D]}`` for each requested ``tower_layers`` index, as the tower returns them.
        attention: ``[N, heads, T', T']`` float32 attention probabilities of the layer ``ModelNeeds.attention``
            names, or ``None``.
        queries: ``[N, T', D]`` that layer's query projections (``q_proj`` outputs, all heads, before scaling).
        keys: ``[N, T', D]`` that layer's key projections (``k_proj`` outputs, all heads).
        prompt: The text the plugin asked for (``ModelNeeds.text``), one ``[L_i, hidden_size]`` tensor per image,
            embedded by the LLM's input embedding: the question (or instruction) of the image's sample (its ids as
            the caller tokenized it, e.g. with BOS), or the whole prompt (the sample's non-target tokens, padding and
            image markers removed). With ``text_encoder="tower"``: one ``[M_i, C]`` float32 tensor per image, the
            tower's projected text embedding of each ``M_i`` context-length segment. ``None`` when the images come
            without text (``encode_images`` on its own).
        prompt_ids: The token ids of the same tokens, ``[L_i]`` each.
        run_language_model: ``run_language_model(embeds [1, L, hidden]) -> [1, L, hidden]``, the LLM's last
            hidden states (an extra pass over the text, for text-conditioned compressors).
        cls_token: ``[N, D]`` the CLS token's features at the select layer (towers with one; whatever
            ``mm_vision_select_feature``), given whenever the tower's layers or attention are asked for.
        paired_features: ``[N, T, C]`` float32, the select layer's features mapped into the tower's image–text
            space (CLIP: ``visual_projection(post_layernorm(x))``), for ``text_encoder="tower"``.
    """

    features: torch.Tensor
    grid_shape: tuple[int, int]
    has_cls_token: bool
    layers: dict[int, torch.Tensor] = field(default_factory=dict)
    attention: torch.Tensor | None = None
    queries: torch.Tensor | None = None
    keys: torch.Tensor | None = None
    prompt: list[torch.Tensor] | None = None
    prompt_ids: list[torch.Tensor] | None = None
    run_language_model: Callable[[torch.Tensor], torch.Tensor] | None = None
    cls_token: torch.Tensor | None = None
    paired_features: torch.Tensor | None = None


#: Attribute of a built projector that holds its resolved :class:`ModelNeeds`.
NEEDS_ATTRIBUTE = "compressor_needs"


def attach_needs(projector: torch.nn.Module, needs: ModelNeeds) -> torch.nn.Module:
    """Keep ``needs`` on the built ``projector`` (done once, by ``build_vision_projector``); returns the projector."""
    setattr(projector, NEEDS_ATTRIBUTE, needs)
    return projector


def projector_needs(projector: torch.nn.Module) -> ModelNeeds:
    """The needs resolved when ``projector`` was built (:func:`attach_needs`); a projector built by hand, outside
    ``build_vision_projector``, belongs to no plugin and needs nothing beyond the select layer."""
    needs = getattr(projector, NEEDS_ATTRIBUTE, None)
    return needs if isinstance(needs, ModelNeeds) else ModelNeeds()


__all__ = ["NEEDS_ATTRIBUTE", "TEXT_ENCODERS", "TEXT_NEEDS", "CompressorInputs", "ModelNeeds", "attach_needs", "projector_needs"]
