"""What a loader asks: one question record becomes one or more :class:`EvalItem` (text, prompt, images), in
chunks as upstream slices them. The loop that answers them is :mod:`llava.eval.core`."""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

import shortuuid
from PIL import Image

from llava.eval.files import AnswerIdentity, answer_identity, describe_identity, ordinal
from llava.mm_utils import load_image, load_image_from_base64
from llava.utils import UserError

# ------------------------------------------------------------------------------------------------ items


@dataclass(frozen=True)
class ImageRef:
    """An image a question needs: a file path, or base64-encoded file content (MMBench)."""

    path: str | None = None
    base64: str | None = None
    #: Whether :meth:`load_for` reads the model or its tokenizer (then the core loads it in the main thread).
    reads_model: ClassVar[bool] = False

    def describe(self) -> str:
        return repr(self.path) if self.path is not None else "the embedded base64 image"

    def exists(self) -> bool:
        """Whether a file image is present (embedded images are checked when decoded)."""
        return self.path is None or os.path.isfile(self.path)

    def load(self) -> Image.Image:
        """Decode the image as RGB.

        Raises:
            ValueError: If the file is missing or the data is not a readable image.
        """
        if self.path is not None:
            return load_image(self.path)
        return load_image_from_base64(self.base64 or "").convert("RGB")

    def load_for(self, generator: Any, question: str) -> Image.Image:
        """:meth:`load` (what the core calls for every input; a video checks its length against the model first)."""
        return self.load()


@dataclass(frozen=True)
class EvalItem:
    """One generation request.

    Attributes:
        question_id: Written as ``question_id``.
        question: The user turn without image markers; the core prepends one per image.
        prompt: Written as ``prompt`` (each loader keeps upstream's choice of text).
        images: Images for this question (none for text-only ScienceQA items).
        extra: Extra answer fields, e.g. ``{"round_id": 0, "options": [...], "option_char": [...]}``.
        text_aliases: More fields that also hold the generated text (Q-Bench's tools read ``response``).
        position: The question's place in its file, counting from 1 (set by the core, for messages).
    """

    question_id: Any
    question: str
    prompt: str
    images: tuple[ImageRef, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    text_aliases: tuple[str, ...] = ()
    position: int | None = None

    @property
    def key(self) -> AnswerIdentity:
        """The identity of this item's answer (:func:`llava.eval.files.answer_identity`, with the prompt)."""
        return answer_identity({"question_id": self.question_id, "round_id": self.extra.get("round_id"), "prompt": self.prompt},
                               by_prompt=True)


BuildItems = Callable[[dict[str, Any], argparse.Namespace], Sequence[EvalItem]]


@dataclass(frozen=True)
class LoaderSpec:
    """What a ``model_vqa*`` module contributes to :func:`run_loader`.

    Attributes:
        name: Module name, used for ``prog`` and logging.
        description: ``--help`` text.
        build_items: Turns one question record into its items; raises ValueError for a malformed record.
        fields: The fields every question record must have, with their types (checked, with the question's
            position, before ``build_items`` sees the record).
        max_new_tokens: Default of ``--max_new_tokens`` (upstream: 128 for the loader, else 1024).
        temperature: Default of ``--temperature`` (upstream: 0.2; Q-Bench's loader decodes greedily).
        question_file_default: Default of ``--question-file`` (upstream's placeholder).
        add_arguments: Adds the module's own flags.
        prepare_records: Runs on the whole question file before chunking (e.g. numbering records that
            carry no id, so that every chunk numbers them alike).
    """

    name: str
    description: str
    build_items: BuildItems
    fields: Mapping[str, Any] = field(default_factory=dict)
    max_new_tokens: int = 1024
    temperature: float = 0.2
    question_file_default: str = "tables/question.jsonl"
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    prepare_records: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None


# ------------------------------------------------------------------------------------------------ chunks


def split_list(items: Sequence[Any], num_chunks: int) -> list[list[Any]]:
    """All chunks of :func:`get_chunk`, in order (upstream's ``split_list``: slices of size ``ceil(len / n)``).

    Raises:
        ValueError: If ``num_chunks < 1``.
    """
    if num_chunks < 1:
        raise ValueError(f"--num-chunks must be at least 1, got {num_chunks}")
    size = math.ceil(len(items) / num_chunks)
    return [list(items[start : start + size]) for start in range(0, len(items), size)] if size else []


def get_chunk(items: Sequence[Any], num_chunks: int, chunk_idx: int) -> list[Any]:
    """Return chunk ``chunk_idx`` of ``num_chunks``: upstream's slices of size ``ceil(len / num_chunks)``.

    With more chunks than the slicing produces (e.g. 5 items in 4 chunks gives 3 slices of 2), the
    surplus chunks are empty, where upstream would fail.

    Raises:
        ValueError: If ``num_chunks < 1`` or ``chunk_idx`` is not in ``[0, num_chunks)``.
    """
    start, stop = chunk_bounds(len(items), num_chunks, chunk_idx)
    return list(items[start:stop])


def chunk_bounds(length: int, num_chunks: int, chunk_idx: int) -> tuple[int, int]:
    """``(start, stop)`` of chunk ``chunk_idx`` of ``num_chunks`` over ``length`` items (see :func:`get_chunk`).

    Raises:
        UserError: If ``num_chunks < 1`` or ``chunk_idx`` is not in ``[0, num_chunks)``.
    """
    if num_chunks < 1:
        raise UserError(f"--num-chunks must be at least 1, got {num_chunks}")
    if not 0 <= chunk_idx < num_chunks:
        raise UserError(f"--chunk-idx must be in [0, {num_chunks - 1}] for --num-chunks {num_chunks}, got {chunk_idx}")
    size = math.ceil(length / num_chunks)
    return min(chunk_idx * size, length), min((chunk_idx + 1) * size, length)


# ------------------------------------------------------------------------------------------------ answers


def answer_record(item: EvalItem, text: str, model_id: str) -> dict[str, Any]:
    """Upstream's answer line; a loader's extras go after ``text`` (``round_id`` right after the id)."""
    record: dict[str, Any] = {"question_id": item.question_id}
    if "round_id" in item.extra:
        record["round_id"] = item.extra["round_id"]
    record["prompt"] = item.prompt
    record["text"] = text
    record.update((key, value) for key, value in item.extra.items() if key != "round_id")
    record.update((key, text) for key in item.text_aliases)
    record.update(answer_id=shortuuid.uuid(), model_id=model_id, metadata={})
    return record


def check_unique_items(items: Sequence[EvalItem], source: str = "the questions") -> None:
    """Refuse two items with the same answer identity (question id, round and prompt), naming both questions.

    Raises:
        UserError: ``"<source>: the 9th question repeats the 2nd (question_id 'x' and the same prompt); ..."``.
    """
    first: dict[AnswerIdentity, EvalItem] = {}
    for number, item in enumerate(items, start=1):
        earlier = first.setdefault(item.key, item)
        if earlier is not item:
            this, that = item.position or number, earlier.position or list(items).index(earlier) + 1
            raise UserError(
                f"{source}: the {ordinal(this)} question repeats the {ordinal(that)} ({describe_identity(item.key)}); "
                "each question must appear once, or its answers cannot be told apart"
            )


__all__ = [
    "BuildItems", "EvalItem", "ImageRef", "LoaderSpec", "answer_record", "check_unique_items", "chunk_bounds", "get_chunk",
    "ordinal", "split_list",
]
