"""From a LLaVA conversation to ``input_ids`` and ``labels``: prompt templates and upstream's target masking.

Two templates train, as in LLaVA-1.5:

- ``plain`` (stage 1): the human turn is replaced by the image; text ``"<image>" + caption + "\\n"``, so ids
  ``[BOS, IMAGE_TOKEN_INDEX, caption..., newline]``; the BOS and the image are ignored, the caption and its
  newline are supervised.
- ``v1`` / ``vicuna_v1`` / ``llava_v1`` / ``v1_mmtag`` (stage 2): ``"<system> USER: Q1 ASSISTANT: A1</s>USER: Q2
  ASSISTANT: A2</s>"``; the system text and the user turns (with their ``ASSISTANT:`` lead-in) are ignored,
  every answer and its ``</s>`` are supervised.

Masks are computed from character spans: the template is rendered with the span of each supervised part
recorded, the text is tokenized as ``tokenizer_image_token`` tokenizes it (text chunks between ``<image>``
markers separately, one BOS), and a token is supervised when it covers a supervised character. This gives
upstream's masks without upstream's round-by-round token counting, which depends on tokenizer details and
drops a sample on a "tokenization mismatch"; here no sample is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
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
TRAINABLE_VERSIONS = "'plain' (stage 1) or a v1 template such as 'v1', 'vicuna_v1', 'llava_v1' (stage 2)"

Turn = tuple[str, str]  # (speaker: "human" | "gpt", text)
Span = tuple[int, int]  # [start, end) character offsets


@dataclass(frozen=True)
class RenderedConversation:
    """A training text and the character spans whose tokens are supervised."""

    text: str
    supervised: tuple[Span, ...]


def conversation_template(version: str) -> Conversation:
    """The template ``--version`` names, if this build can train with it.

    Raises:
        ValueError: For an unknown version or one whose template is neither ``PLAIN`` nor a v1 ``TWO`` template.
    """
    if version not in conv_templates:
        raise ValueError(f"unknown --version {version!r}; expected {TRAINABLE_VERSIONS}")
    conv = conv_templates[version]
    if conv.sep_style is SeparatorStyle.PLAIN or (conv.sep_style is SeparatorStyle.TWO and conv.version.startswith("v1")):
        return conv
    raise ValueError(
        f"--version {version!r} ({conv.sep_style.name} template, version {conv.version!r}) cannot be used for "
        f"training in this build; expected {TRAINABLE_VERSIONS}"
    )


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


def render_plain(turns: Sequence[Turn]) -> RenderedConversation:
    """``"<image>" + caption + "\\n"``; the caption and newline are supervised.

    Raises:
        ValueError: Unless there are exactly two turns and the first holds ``<image>``.
    """
    if len(turns) != 2:
        raise ValueError(f"the plain template needs exactly 2 turns (the image, then its caption), got {len(turns)}")
    if DEFAULT_IMAGE_TOKEN not in turns[0][1]:
        raise ValueError("the plain template needs '<image>' in the first turn, which has none")
    text = DEFAULT_IMAGE_TOKEN + turns[1][1] + "\n"
    return RenderedConversation(text, ((len(DEFAULT_IMAGE_TOKEN), len(text)),))


def render_v1(turns: Sequence[Turn], conv: Conversation) -> RenderedConversation:
    """``system + sep``, then ``"USER: q" + sep`` and ``"ASSISTANT: a" + sep2`` turns; answers + ``sep2`` supervised.

    A leading assistant turn is dropped (as upstream does).

    Raises:
        ValueError: If the turns do not alternate user/assistant starting with the user.
    """
    turns = list(turns[1:] if turns and turns[0][0] == GPT else turns)
    parts = [conv.system, conv.sep]
    cursor = len(conv.system) + len(conv.sep)
    supervised: list[Span] = []
    rendered = conv.copy()
    rendered.messages = []
    for index, (speaker, text) in enumerate(turns):
        expected = HUMAN if index % 2 == 0 else GPT
        if speaker != expected:
            raise ValueError(f"turn {index} is from {speaker!r} but the turns must alternate human/gpt, starting with human")
        role = conv.roles[index % 2]
        sep = conv.sep if index % 2 == 0 else conv.sep2
        lead = f"{role}: "
        if speaker == GPT:
            supervised.append((cursor + len(lead), cursor + len(lead) + len(text) + len(sep)))
        piece = lead + text + sep
        parts.append(piece)
        cursor += len(piece)
        rendered.append_message(role, text)
    text = "".join(parts)
    if text != rendered.get_prompt():
        raise RuntimeError(f"the v1 training text differs from the {conv.version!r} template's prompt; cannot mask it")
    return RenderedConversation(text, tuple(supervised))


def render(turns: Sequence[Turn], conv: Conversation) -> RenderedConversation:
    """Dispatch on the template style (see :func:`conversation_template`)."""
    if conv.sep_style is SeparatorStyle.PLAIN:
        return render_plain(turns)
    return render_v1(turns, conv)


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
            if position == 0 and token == bos:
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
    "preprocess",
    "preprocess_multimodal",
    "render",
    "render_plain",
    "render_v1",
    "tokenize_with_targets",
]
