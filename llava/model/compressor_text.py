"""The text a compressor plugin reads (``ModelNeeds.text``), from the caller to the projector as arguments.

Three kinds (:data:`~llava.model.multimodal_projector.plugins.TEXT_NEEDS`):

- ``"question"``: the question of each sample, i.e. the first user turn of its prompt without image markers
  (:func:`llava.conversation.question_of`), tokenized on its own as the tokenizer encodes a text (with its
  special tokens: LLaMA's BOS). Only the caller knows the template and holds the tokenizer, so it passes the ids
  to ``generate`` / ``forward`` as ``question_ids`` (:func:`question_ids`, :func:`question_kwargs`); the model hands
  them on, per image, through ``prepare_inputs_labels_for_multimodal`` and ``encode_images``. This is what
  question-conditioned releases condition on, at inference and (first question only) in training.
- ``"instruction"``: the same without the answer-format line LLaVA's evaluation prompts append
  (:func:`instruction_of`), as instruction-conditioned pruners' releases cut it.
- ``"prompt"``: every non-target token of the sample (system text, roles, all turns), which the model cuts from
  its own ``input_ids`` and ``labels`` (:func:`llava.model.splice.prompts_per_image`).

Who tokenizes and encodes the question is the compressor's ``ModelNeeds.text_encoder``: the LLM (its tokenizer and
input embedding) or the vision tower's paired text encoder (:meth:`BaseVisionTower.encode_text
<llava.model.multimodal_encoder.base.BaseVisionTower.encode_text>`); :func:`question_encoder` gives the callers the
right tokenizer, so the ids still travel as ``question_ids``.

Nothing here is model state: :func:`text_per_image` turns the arguments of one call into what ``encode_images``
passes on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from llava.constants import LETTER_ANSWER_PROMPTS, SHORT_ANSWER_PROMPT
from llava.conversation import Conversation, question_of

from . import splice
from .image_encoding import TextPerImage
from .multimodal_projector.plugins import ModelNeeds, projector_needs

#: Per sample, the token ids of its question (``[L_i]`` each); see :func:`question_ids`.
QuestionIds = Sequence[torch.Tensor | Sequence[int]]


#: Lines LLaVA's evaluation prompts append to a question to fix the answer's format (:func:`instruction_of`).
ANSWER_FORMAT_LINES = frozenset({SHORT_ANSWER_PROMPT, *LETTER_ANSWER_PROMPTS.values()})
#: The text needs that read each sample's question (given by the caller as ``question_ids``).
QUESTION_TEXTS = ("question", "instruction")


def instruction_of(question: str) -> str:
    """``question`` without the answer-format lines of :data:`ANSWER_FORMAT_LINES` (each a whole line), stripped.

    ``"What is it?\nAnswer the question using a single word or phrase."`` → ``"What is it?"``; options, hints
    and OCR references stay, as instruction-conditioned releases keep them.
    """
    return "\n".join(line for line in question.split("\n") if line.strip() not in ANSWER_FORMAT_LINES).strip()


def question_ids(prompts: Sequence[str], tokenizer: Any, conv: Conversation | str, *, instruction: bool = False) -> list[torch.Tensor]:
    """Per prompt, its question (:func:`~llava.conversation.question_of`) as ``tokenizer`` encodes a text on its own.

    The special tokens are the tokenizer's (``[BOS, ...]`` for LLaMA, none for Qwen2, BOS/EOS for CLIP), as
    question-conditioned releases tokenize the question they cut from the prompt.

    Args:
        prompts: Prompts (or training texts) rendered with ``conv``.
        tokenizer: The LLM's tokenizer, or the tower's paired one (:func:`question_encoder`).
        conv: Their conversation template, or its key.
        instruction: Drop the answer-format line first (:func:`instruction_of`).

    Returns:
        ``[L_i]`` long tensors, one per prompt.
    """
    texts = [question_of(prompt, conv) for prompt in prompts]
    if instruction:
        texts = [instruction_of(text) for text in texts]
    return [torch.tensor(tokenizer(text).input_ids, dtype=torch.long) for text in texts]


def model_needs(model: Any) -> ModelNeeds | None:
    """The needs of the model's compressor, or ``None`` for a model without a projector (a plain LLM)."""
    base = model.get_model() if callable(getattr(model, "get_model", None)) else None
    projector = getattr(base, "mm_projector", None)
    return None if projector is None else projector_needs(projector)


def text_need(model: Any) -> str | None:
    """The text the model's compressor reads (``"question"``, ``"instruction"``, ``"prompt"``) or ``None``."""
    needs = model_needs(model)
    return None if needs is None else needs.text


@dataclass(frozen=True)
class QuestionEncoder:
    """How a model's compressor wants each sample's question tokenized: ``encoder(prompts, conv) -> [ids, ...]``.

    Attributes:
        tokenizer: The LLM's tokenizer, or the vision tower's paired one (``ModelNeeds.text_encoder == "tower"``).
        instruction: Drop the answer-format line (``ModelNeeds.text == "instruction"``).
    """

    tokenizer: Any
    instruction: bool = False

    def __call__(self, prompts: Sequence[str], conv: Conversation | str) -> list[torch.Tensor]:
        return question_ids(prompts, self.tokenizer, conv, instruction=self.instruction)


def question_encoder(model: Any, tokenizer: Any) -> QuestionEncoder | None:
    """The :class:`QuestionEncoder` of ``model``'s compressor (``tokenizer``: the LLM's), or ``None`` when it reads no
    question (training passes it to the dataset; :func:`question_kwargs` uses it).

    Raises:
        ValueError: When the compressor asks for the tower's paired text encoder and the tower has none.
    """
    needs = model_needs(model)
    if needs is None or needs.text not in QUESTION_TEXTS:
        return None
    if needs.text_encoder == "tower":
        tokenizer = model.get_vision_tower().text_tokenizer
    return QuestionEncoder(tokenizer, instruction=needs.text == "instruction")


def question_kwargs(model: Any, tokenizer: Any, prompts: Sequence[str], conv: Conversation | str) -> dict[str, Any]:
    """``{"question_ids": ...}`` for ``model.generate`` when the model's compressor reads the question, else ``{}``.

    Callers that render prompts with a template add ``**question_kwargs(...)`` to their ``generate`` call.
    """
    encoder = question_encoder(model, tokenizer)
    return {} if encoder is None else {"question_ids": encoder(prompts, conv)}


def text_per_image(
    need: str | None,
    id_rows: Sequence[torch.Tensor],
    label_rows: Sequence[torch.Tensor],
    taken: Sequence[int],
    embed_tokens: nn.Module,
    questions: QuestionIds | None,
    projector_type: str | None = None,
    encode_question: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> TextPerImage | None:
    """What ``encode_images`` passes to a text-reading compressor for this batch, or ``None`` when it reads none.

    Args:
        need: ``ModelNeeds.text`` of the model's projector.
        id_rows, label_rows: Each sample's unpadded ids and labels ``[T_i]``.
        taken: Images each sample consumes (:func:`llava.model.splice.images_per_sample`).
        embed_tokens: The LLM's input embedding.
        questions: ``question_ids`` as given to ``forward`` / ``generate``: one id sequence per sample.
        projector_type: For messages.
        encode_question: ``ids [L] -> [M, C]`` in place of ``embed_tokens`` for the question (the tower's paired
            text encoder, for ``ModelNeeds.text_encoder == "tower"``).

    Returns:
        ``(embeds [L, hidden] per image, ids [L] per image)``: each image gets its sample's text (``[M, C]`` per
        image with ``encode_question``).

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
            "question_ids were given; pass **llava.model.compressor_text.question_kwargs(model, tokenizer, prompts, "
            "conv_mode) to generate/forward"
        )
    if len(questions) != len(id_rows):
        raise ValueError(f"question_ids holds {len(questions)} questions for a batch of {len(id_rows)} samples; give one per sample")
    device = embed_tokens.weight.device
    embeds: list[torch.Tensor] = []
    ids: list[torch.Tensor] = []
    for question, take in zip(questions, taken):
        row = torch.as_tensor(question, dtype=torch.long, device=device).reshape(-1)
        embedded = embed_tokens(row) if encode_question is None else encode_question(row)
        embeds.extend([embedded] * take)
        ids.extend([row] * take)
    return embeds, ids


__all__ = [
    "ANSWER_FORMAT_LINES", "QUESTION_TEXTS", "QuestionEncoder", "QuestionIds", "instruction_of", "model_needs", "question_encoder",
    "question_ids", "question_kwargs", "text_need", "text_per_image",
]
