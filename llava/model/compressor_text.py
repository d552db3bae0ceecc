"""The text a compressor plugin reads (``ModelNeeds.text``), from the caller to the projector as arguments.

Two kinds (:data:`~llava.model.multimodal_projector.plugins.TEXT_NEEDS`):

- ``"question"``: the question of each sample, i.e. the first user turn of its prompt without image markers
  (:func:`llava.conversation.question_of`), tokenized on its own as the tokenizer encodes a text (with its
  special tokens: LLaMA's BOS). Only the caller knows the template and holds the tokenizer, so it passes the ids
  to ``generate`` / ``forward`` as ``question_ids`` (:func:`question_ids`, :func:`question_kwargs`); the model hands
  them on, per image, through ``prepare_inputs_labels_for_multimodal`` and ``encode_images``. This is what
  question-conditioned releases condition on, at inference and (first question only) in training.
- ``"prompt"``: every non-target token of the sample (system text, roles, all turns), which the model cuts from
  its own ``input_ids`` and ``labels`` (:func:`llava.model.splice.prompts_per_image`).

Nothing here is model state: :func:`text_per_image` turns the arguments of one call into what ``encode_images``
passes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from llava.conversation import Conversation, question_of

from . import splice
from .image_encoding import TextPerImage
from .multimodal_projector.plugins import projector_needs

#: Per sample, the token ids of its question (``[L_i]`` each); see :func:`question_ids`.
QuestionIds = Sequence[torch.Tensor | Sequence[int]]


def question_ids(prompts: Sequence[str], tokenizer: Any, conv: Conversation | str) -> list[torch.Tensor]:
    """Per prompt, its question (:func:`~llava.conversation.question_of`) as ``tokenizer`` encodes a text on its own.

    The special tokens are the tokenizer's (``[BOS, ...]`` for LLaMA, none for Qwen2), as question-conditioned
    releases tokenize the question they cut from the prompt.

    Args:
        prompts: Prompts (or training texts) rendered with ``conv``.
        tokenizer: The LLM's tokenizer.
        conv: Their conversation template, or its key.

    Returns:
        ``[L_i]`` long tensors, one per prompt.
    """
    return [torch.tensor(tokenizer(question_of(prompt, conv)).input_ids, dtype=torch.long) for prompt in prompts]


def text_need(model: Any) -> str | None:
    """The text the model's compressor reads (``"question"``, ``"prompt"``) or ``None`` (also for a plain LLM)."""
    base = model.get_model() if callable(getattr(model, "get_model", None)) else None
    projector = getattr(base, "mm_projector", None)
    return None if projector is None else projector_needs(projector).text


def question_kwargs(model: Any, tokenizer: Any, prompts: Sequence[str], conv: Conversation | str) -> dict[str, Any]:
    """``{"question_ids": ...}`` for ``model.generate`` when the model's compressor reads the question, else ``{}``.

    Callers that render prompts with a template add ``**question_kwargs(...)`` to their ``generate`` call.
    """
    if text_need(model) != "question":
        return {}
    return {"question_ids": question_ids(prompts, tokenizer, conv)}


def text_per_image(
    need: str | None,
    id_rows: Sequence[torch.Tensor],
    label_rows: Sequence[torch.Tensor],
    taken: Sequence[int],
    embed_tokens: nn.Module,
    questions: QuestionIds | None,
    projector_type: str | None = None,
) -> TextPerImage | None:
    """What ``encode_images`` passes to a text-reading compressor for this batch, or ``None`` when it reads none.

    Args:
        need: ``ModelNeeds.text`` of the model's projector.
        id_rows, label_rows: Each sample's unpadded ids and labels ``[T_i]``.
        taken: Images each sample consumes (:func:`llava.model.splice.images_per_sample`).
        embed_tokens: The LLM's input embedding.
        questions: ``question_ids`` as given to ``forward`` / ``generate``: one id sequence per sample.
        projector_type: For messages.

    Returns:
        ``(embeds [L, hidden] per image, ids [L] per image)``: each image gets its sample's text.

    Raises:
        ValueError: If the compressor reads the question and ``questions`` is missing or has another length than
            the batch.
    """
    if need is None:
        return None
    if need == "prompt":
        return splice.prompts_per_image(id_rows, label_rows, taken, embed_tokens)
    if questions is None:
        raise ValueError(
            f"mm_projector_type {projector_type!r} conditions each image on its sample's question, but no "
            "question_ids were given; pass question_ids=llava.model.compressor_text.question_ids(prompts, tokenizer, "
            "conv_mode) to generate/forward"
        )
    if len(questions) != len(id_rows):
        raise ValueError(f"question_ids holds {len(questions)} questions for a batch of {len(id_rows)} samples; give one per sample")
    device = embed_tokens.weight.device
    embeds: list[torch.Tensor] = []
    ids: list[torch.Tensor] = []
    for question, take in zip(questions, taken):
        row = torch.as_tensor(question, dtype=torch.long, device=device).reshape(-1)
        embedded = embed_tokens(row)
        embeds.extend([embedded] * take)
        ids.extend([row] * take)
    return embeds, ids


__all__ = ["QuestionIds", "question_ids", "question_kwargs", "text_need", "text_per_image"]
