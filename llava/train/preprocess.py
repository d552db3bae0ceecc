"""From a LLaVA conversation to ``input_ids`` and ``labels``: training texts and target masks for every template.

Each separator style has one small function that cuts the conversation into ``(text, supervised)`` segments
(registered with :func:`register_segments`); one shared core turns segments into ids and labels. Except for
``plain``, the training text is exactly the template's prompt (``Conversation.get_prompt``), checked on every
sample, so a model is trained in the format it is later prompted with. Only assistant replies and the
separator that ends them are supervised (then the model learns to stop where generation stops):

- ``PLAIN`` (``plain``, stage 1): the human turn is replaced by the image; text ``"<image>" + caption + "\\n"``;
  the caption and its newline are supervised (as upstream).
- ``TWO`` (``v1``, ``vicuna_v1``, ``llava_v1``, ``v1_mmtag``): ``"<system> USER: Q1 ASSISTANT: A1</s>USER: Q2
  ASSISTANT: A2</s>"``; each answer and its ``</s>`` (as upstream's ``preprocess_v1``).
- ``LLAMA_2`` (``llama_2``, ``llava_llama_2``, ``mistral_instruct``): ``"[INST] <<SYS>>..<</SYS>>\\n\\nQ1 [/INST] A1
  </s><s>[INST] Q2 [/INST] A2 </s>"``; each answer and its `` </s>`` (as upstream's ``preprocess_llama_2``).
- ``SINGLE`` (``v0``, ``llava_v0``, ``v0_mmtag``): ``"<system>###Human: Q1###Assistant: A1###..."``; each answer and
  the ``###`` after it. Upstream's legacy ``preprocess`` trained these on another text (``"### Human: Q\\n"``, which
  no inference path produces) and left the first two tokens of every human turn supervised; here the text is the
  prompt the model later sees.
- ``MPT`` (``mpt``, ``chatml_direct``): ``"<|im_start|>system\\n..<|im_end|><|im_start|>user\\nQ1<|im_end|>
  <|im_start|>assistant\\nA1<|im_end|>..."``; each answer and its ``<|im_end|>`` (as upstream's ``preprocess_mpt``).
- ``CHATML`` (``qwen_1_5``, ``qwen_2``, ``qwen_2_5``): ``"<|im_start|>system\\n..<|im_end|>\\n<|im_start|>user\\nQ1
  <|im_end|>\\n<|im_start|>assistant\\nA1<|im_end|>\\n..."``; each answer and its ``<|im_end|>``, not the ``\\n`` after
  it. LLaVA-NeXT's ``preprocess_qwen`` also supervises the ``<|im_start|>assistant\\n`` header and every ``\\n``,
  ``<|im_start|>`` and ``<|im_end|>`` token, user turns included, and always uses the "You are a helpful
  assistant." system text; here those template tokens are context, and the template's own system text is used.

Masks are computed from character spans: a token is supervised when it covers a supervised character; the
text is tokenized as ``tokenizer_image_token`` tokenizes it (text chunks between ``<image>`` markers separately,
one BOS, ``IMAGE_TOKEN_INDEX`` per marker, never supervised). This gives upstream's masks without upstream's
round-by-round token counting, which depends on tokenizer details and drops a sample on a "tokenization
mismatch"; here no sample is dropped. Nothing is truncated here: the collator cuts ids and labels to
``model_max_length`` together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from llava.constants import (
    DEFAULT_IM_END_TOKEN,
    DEFAULT_IM_START_TOKEN,
    DEFAULT_IMAGE_TOKEN,
    IGNORE_INDEX,
    IMAGE_TOKEN_INDEX,
)
from llava.conversation import Conversation, SeparatorStyle, conv_templates
from llava.mm_utils import tokenizer_image_token

HUMAN, GPT = "human", "gpt"

Turn = tuple[str, str]  # (speaker: "human" | "gpt", text)
Span = tuple[int, int]  # [start, end) character offsets
Segment = tuple[str, bool]  # (text, supervised)
SegmentFn = Callable[[Sequence[Turn], Conversation], list[Segment]]


@dataclass(frozen=True)
class RenderedConversation:
    """A training text and the character spans whose tokens are supervised."""

    text: str
    supervised: tuple[Span, ...]


@dataclass(frozen=True)
class _StyleEntry:
    segments: SegmentFn
    is_prompt: bool  # the training text equals Conversation.get_prompt() of the same turns


_STYLES: dict[SeparatorStyle, _StyleEntry] = {}


def register_segments(style: SeparatorStyle, *, is_prompt: bool = True) -> Callable[[SegmentFn], SegmentFn]:
    """Register ``fn(turns, conv) -> [(text, supervised), ...]`` as the training text of ``style``.

    Args:
        style: The separator style it renders.
        is_prompt: The joined segments equal ``conv.get_prompt()`` for the same turns (checked per sample).
    """

    def register(fn: SegmentFn) -> SegmentFn:
        _STYLES[style] = _StyleEntry(fn, is_prompt)
        return fn

    return register


def trainable_templates() -> list[str]:
    """Sorted keys of ``conv_templates`` whose separator style has a registered training text."""
    return sorted(key for key, conv in conv_templates.items() if conv.sep_style in _STYLES)


def conversation_template(version: str) -> Conversation:
    """The template ``--version`` names, if this build can train with it.

    Raises:
        ValueError: For an unknown version, or one whose separator style has no training text.
    """
    conv = conv_templates.get(version)
    if conv is None or conv.sep_style not in _STYLES:
        reason = "is unknown" if conv is None else f"uses the {conv.sep_style.name} style, which cannot be trained in this build"
        raise ValueError(f"--version {version!r} {reason}; expected one of {', '.join(trainable_templates())}")
    return conv


def preprocess_multimodal(turns: Sequence[Turn], *, mm_use_im_start_end: bool = False, mmtag: bool = False) -> list[Turn]:
    """Upstream's image-marker normalisation: a turn holding ``<image>`` becomes ``"<image>\\n" + rest``.

    With ``mmtag`` the marker is wrapped as ``<Image><image></Image>``; with ``mm_use_im_start_end`` as
    ``<im_start><image><im_end>``.
    """
    marker = DEFAULT_IM_START_TOKEN + DEFAULT_IMAGE_TOKEN + DEFAULT_IM_END_TOKEN if mm_use_im_start_end else DEFAULT_IMAGE_TOKEN
    out: list[Turn] = []
    for speaker, text in turns:
        if DEFAULT_IMAGE_TOKEN in text:
            text = (DEFAULT_IMAGE_TOKEN + "\n" + text.replace(DEFAULT_IMAGE_TOKEN, "").strip()).strip()
            if mmtag:
                text = text.replace(DEFAULT_IMAGE_TOKEN, "<Image>" + DEFAULT_IMAGE_TOKEN + "</Image>")
        out.append((speaker, text.replace(DEFAULT_IMAGE_TOKEN, marker)))
    return out


def dialogue(turns: Sequence[Turn]) -> list[Turn]:
    """The turns a chat template renders: a leading assistant turn dropped (as upstream), then checked.

    Raises:
        ValueError: If the turns do not alternate human/gpt starting with human, or a turn is empty.
    """
    turns = list(turns[1:] if turns and turns[0][0] == GPT else turns)
    for index, (speaker, text) in enumerate(turns):
        expected = HUMAN if index % 2 == 0 else GPT
        if speaker != expected:
            raise ValueError(f"turn {index} is from {speaker!r} but the turns must alternate human/gpt, starting with human")
        if not text:
            raise ValueError(f"turn {index} ({speaker}) is empty; every turn needs text")
    return turns


# ------------------------------------------------------------------------------------ one function per style


@register_segments(SeparatorStyle.PLAIN, is_prompt=False)
def plain_segments(turns: Sequence[Turn], conv: Conversation) -> list[Segment]:
    """``"<image>"`` (the whole human turn) then ``caption + sep``, supervised.

    Raises:
        ValueError: Unless there are exactly two turns and the first holds ``<image>``.
    """
    if len(turns) != 2:
        raise ValueError(f"the plain template needs exactly 2 turns (the image, then its caption), got {len(turns)}")
    if DEFAULT_IMAGE_TOKEN not in turns[0][1]:
        raise ValueError("the plain template needs '<image>' in the first turn, which has none")
    return [(DEFAULT_IMAGE_TOKEN, False), (turns[1][1] + conv.sep, True)]


def _role_colon_segments(turns: Sequence[Turn], conv: Conversation, answer_end: str) -> list[Segment]:
    # "role: text" turns; a user turn ends with sep, an answer with answer_end (supervised with it).
    segments: list[Segment] = [(conv.system + conv.sep, False)]
    for index, (_, text) in enumerate(dialogue(turns)):
        role = conv.roles[index % 2]
        if index % 2 == 0:
            segments.append((f"{role}: {text}{conv.sep}", False))
        else:
            segments += [(f"{role}: ", False), (text + answer_end, True)]
    return segments


@register_segments(SeparatorStyle.TWO)
def two_segments(turns: Sequence[Turn], conv: Conversation) -> list[Segment]:
    """Vicuna v1: user turns end with ``sep``, answers with ``sep2`` (``</s>``)."""
    return _role_colon_segments(turns, conv, conv.sep2 or conv.sep)


@register_segments(SeparatorStyle.SINGLE)
def single_segments(turns: Sequence[Turn], conv: Conversation) -> list[Segment]:
    """v0: every turn ends with ``sep`` (``###``)."""
    return _role_colon_segments(turns, conv, conv.sep)


@register_segments(SeparatorStyle.MPT)
def mpt_segments(turns: Sequence[Turn], conv: Conversation) -> list[Segment]:
    """MPT / ChatML without newlines: ``role + text + sep``; roles carry their own ``\\n``."""
    segments: list[Segment] = [(conv.system + conv.sep, False)]
    for index, (_, text) in enumerate(dialogue(turns)):
        role = conv.roles[index % 2]
        if index % 2 == 0:
            segments.append((role + text + conv.sep, False))
        else:
            segments += [(role, False), (text + conv.sep, True)]
    return segments


@register_segments(SeparatorStyle.CHATML)
def chatml_segments(turns: Sequence[Turn], conv: Conversation) -> list[Segment]:
    """LLaVA-NeXT ChatML: ``role + "\\n" + text + sep + "\\n"``; the newline after ``sep`` is not supervised."""
    segments: list[Segment] = [(conv.system + conv.sep + "\n", False)] if conv.system else []
    for index, (_, text) in enumerate(dialogue(turns)):
        role = conv.roles[index % 2]
        if index % 2 == 0:
            segments.append((f"{role}\n{text}{conv.sep}\n", False))
        else:
            segments += [(role + "\n", False), (text + conv.sep, True), ("\n", False)]
    return segments


@register_segments(SeparatorStyle.LLAMA_2)
def llama_2_segments(turns: Sequence[Turn], conv: Conversation) -> list[Segment]:
    """``[INST] q [/INST]`` (the first with the ``<<SYS>>`` block, the others after ``sep``), then
    ``" " + answer + " " + sep2``."""
    segments: list[Segment] = []
    for index, (_, text) in enumerate(dialogue(turns)):
        if index % 2 == 1:
            segments += [(" ", False), (f"{text} {conv.sep2}", True)]
        elif index == 0:
            system = f"<<SYS>>\n{conv.system}\n<</SYS>>\n\n" if conv.system else ""
            segments.append((f"[INST] {system}{text} [/INST]", False))
        else:
            segments.append((f"{conv.sep}[INST] {text} [/INST]", False))
    return segments


# ------------------------------------------------------------------------------------ the shared core


def _prompt(turns: Sequence[Turn], conv: Conversation) -> str:
    rendered = conv.copy()
    rendered.messages = [[conv.roles[index % 2], text] for index, (_, text) in enumerate(dialogue(turns))]
    return rendered.get_prompt()


def render(turns: Sequence[Turn], conv: Conversation) -> RenderedConversation:
    """The training text of ``turns`` in ``conv``'s template and its supervised character spans.

    Raises:
        ValueError: If the turns do not fit the template (see :func:`dialogue`, :func:`plain_segments`), or
            the template's style has no training text.
        RuntimeError: If a chat style's text differs from the template's prompt (a bug in a segment function).
    """
    entry = _STYLES.get(conv.sep_style)
    if entry is None:
        raise ValueError(
            f"{conv.sep_style.name} templates cannot be trained in this build; expected one of {', '.join(trainable_templates())}"
        )
    parts: list[str] = []
    supervised: list[Span] = []
    cursor = 0
    for text, is_supervised in entry.segments(turns, conv):
        if is_supervised and text:
            supervised.append((cursor, cursor + len(text)))
        parts.append(text)
        cursor += len(text)
    text = "".join(parts)
    if entry.is_prompt and text != _prompt(turns, conv):
        raise RuntimeError(f"the {conv.sep_style.name} training text differs from the template's prompt; cannot mask it")
    return RenderedConversation(text, tuple(supervised))


def _offsets(tokenizer: Any, chunk: str) -> tuple[list[int], list[tuple[int, int]]]:
    try:
        encoded = tokenizer(chunk, return_offsets_mapping=True)
    except NotImplementedError:
        raise ValueError(
            f"training needs a tokenizer that reports character offsets (a tokenizers-backed one); "
            f"{type(tokenizer).__name__} does not"
        ) from None
    return list(encoded["input_ids"]), [tuple(pair) for pair in encoded["offset_mapping"]]


def tokenize_with_targets(rendered: RenderedConversation, tokenizer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``[T]`` input ids (``IMAGE_TOKEN_INDEX`` at each ``<image>``) and ``[T]`` labels (``IGNORE_INDEX`` where unsupervised).

    A token is supervised when its character span overlaps a supervised span; a zero-width token (e.g. a
    sentencepiece word-start piece) counts as covering the character after it. BOS and images are never
    supervised.
    """
    text = rendered.text
    mask = bytearray(len(text) + 1)
    for start, end in rendered.supervised:
        mask[start:end] = b"\x01" * (end - start)
    bos = tokenizer.bos_token_id
    ids: list[int] = []
    labels: list[int] = []
    base = 0
    for index, chunk in enumerate(text.split(DEFAULT_IMAGE_TOKEN)):
        if index > 0:
            ids.append(IMAGE_TOKEN_INDEX)
            labels.append(IGNORE_INDEX)
            base += len(DEFAULT_IMAGE_TOKEN)
        chunk_ids, offsets = _offsets(tokenizer, chunk)
        for position, (token, (start, end)) in enumerate(zip(chunk_ids, offsets)):
            if position == 0 and bos is not None and token == bos:
                if index == 0:
                    ids.append(token)
                    labels.append(IGNORE_INDEX)
                continue
            start, end = base + start, base + max(end, start + 1)
            ids.append(token)
            labels.append(token if any(mask[start:end]) else IGNORE_INDEX)
        base += len(chunk)
    if ids != tokenizer_image_token(text, tokenizer):
        raise RuntimeError("training tokenization differs from tokenizer_image_token's; the masks would be misaligned")
    return torch.tensor(ids, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


def preprocess(turns: Sequence[Turn], tokenizer: Any, conv: Conversation) -> dict[str, torch.Tensor]:
    """Render ``turns`` with ``conv`` and tokenize: ``{"input_ids": [T], "labels": [T]}``."""
    input_ids, labels = tokenize_with_targets(render(turns, conv), tokenizer)
    return {"input_ids": input_ids, "labels": labels}


__all__ = [
    "RenderedConversation",
    "conversation_template",
    "dialogue",
    "preprocess",
    "preprocess_multimodal",
    "register_segments",
    "render",
    "tokenize_with_targets",
    "trainable_templates",
]
