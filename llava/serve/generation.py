"""Streaming generation: the one loop that the CLI, the model worker and the one-process demo share.

:func:`stream_answer` runs ``model.generate`` in a background thread and yields the growing answer after
every token, cutting it at a stop string (and never showing the start of one), stopping generation early when
the caller stops reading, and re-raising any error from the generation thread in the caller.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from queue import Queue
from typing import Any

import torch
from PIL import Image
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from llava.generation import GenerationConfig
from llava.mm_utils import KeywordsStoppingCriteria, images_to_pixels

logger = logging.getLogger(__name__)

#: Seconds to wait for the generation thread after the reader stopped early.
_JOIN_TIMEOUT = 30.0


def prepare_pixels(
    images: Sequence[Image.Image], image_processor: Any, model: Any
) -> tuple[torch.Tensor | list[torch.Tensor], list[tuple[int, int]]]:
    """Preprocess images as the model was trained (``process_images``) and move them to its device and dtype.

    Returns:
        ``(pixels, image_sizes)``: ``[N, 3, H, W]`` (or per-image tensors for anyres) and ``(width, height)``
        per image.
    """
    return images_to_pixels(list(images), image_processor, model.config, model.device, model.dtype)


class _StopWhenSet(StoppingCriteria):
    """Stops every row once ``event`` is set (the reader went away)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: torch.LongTensor, scores: Any = None, **kwargs: Any) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


class _AnswerStreamer(BaseStreamer):
    """Collects the generated ids and, after every token, queues the answer text no later token can change.

    Text is released up to where the decodings with and without the newest token agree (trailing U+FFFD
    excluded), so a character that the next token may still alter, such as an unfinished UTF-8 sequence of
    byte-fallback tokens, waits; iterating yields those growing texts until generation ends.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._queue: Queue[str | None] = Queue()
        self._prompt_pending = True  # generate() first hands over the prompt, which is not part of the answer
        self._previous = ""
        self._released = 0

    def decode(self) -> str:
        """The whole answer so far, decoded in one go (special tokens removed)."""
        return self.tokenizer.decode(self.ids, skip_special_tokens=True)

    def put(self, value: torch.Tensor) -> None:
        if value.dim() > 1 and value.shape[0] > 1:
            raise ValueError(f"streaming supports one sequence at a time, got a batch of {value.shape[0]}")
        if self._prompt_pending:
            self._prompt_pending = False
            return
        self.ids.extend(value.reshape(-1).tolist())
        text = self.decode()
        agreed = len(os.path.commonprefix([self._previous, text]))
        self._previous = text
        ready = len(text[:agreed].rstrip("\ufffd"))
        if ready > self._released:
            self._released = ready
            self._queue.put(text[:ready])

    def end(self) -> None:
        self._queue.put(None)

    def __iter__(self) -> Iterator[str]:
        while (text := self._queue.get()) is not None:
            yield text


def _held_back(text: str, stop: str | None) -> int:
    """Length of the longest suffix of ``text`` that could be the start of ``stop``."""
    if not stop:
        return 0
    for length in range(min(len(stop) - 1, len(text)), 0, -1):
        if stop.startswith(text[-length:]):
            return length
    return 0


def _cut(text: str, stop: str | None) -> str:
    return text[: text.index(stop)] if stop and stop in text else text


def stream_answer(
    model: Any,
    tokenizer: Any,
    input_ids: torch.Tensor,
    *,
    images: torch.Tensor | list[torch.Tensor] | None = None,
    image_sizes: Sequence[Sequence[int]] | None = None,
    temperature: float = 0.2,
    top_p: float | None = None,
    max_new_tokens: int = 512,
    stop: str | None = None,
    modalities: Sequence[str] | None = None,
    question_ids: Sequence[torch.Tensor] | None = None,
) -> Iterator[str]:
    """Generate an answer and yield it, growing, as it is decoded.

    Args:
        model: A LLaVA causal LM (``generate`` takes ``images`` and returns only new tokens).
        tokenizer: Its tokenizer.
        input_ids: ``[1, prompt_len]`` prompt ids with ``IMAGE_TOKEN_INDEX`` where images go.
        images, image_sizes: From :func:`prepare_pixels`, or ``None`` for a text-only prompt.
        temperature: 0 is greedy; above 0 samples (with ``top_p``).
        top_p: Nucleus sampling mass, used only when sampling.
        max_new_tokens: Upper bound on generated tokens.
        stop: Text that ends the answer; it and anything after it are dropped.
        modalities: ``"image"`` / ``"video"`` per ``images`` item when a video is among them (else ``None``).
        question_ids: The prompt's question ids, for a compressor that reads the question
            (:func:`llava.model.compressor_text.question_kwargs`).

    Yields:
        The answer so far, after every token that settles more of it; the last value is always the exact
        decoding of all generated tokens (special tokens removed, cut at ``stop``), yielded at least once.

    Raises:
        Exception: Whatever ``model.generate`` raised, re-raised here.
    """
    cancel = threading.Event()
    criteria = StoppingCriteriaList([_StopWhenSet(cancel)])
    if stop:
        criteria.append(KeywordsStoppingCriteria([stop], tokenizer, input_ids))
    streamer = _AnswerStreamer(tokenizer)
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    kwargs = dict(
        inputs=input_ids.to(model.device),
        images=images,
        image_sizes=image_sizes,
        streamer=streamer,
        stopping_criteria=criteria,
        pad_token_id=pad_token_id,
        **({} if question_ids is None else {"question_ids": question_ids}),
        **GenerationConfig(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens).generate_kwargs(),
    )
    if modalities is not None:
        kwargs["modalities"] = list(modalities)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            model.generate(**kwargs)
        except BaseException as error:  # handed to the reader below
            failure.append(error)
            streamer.end()

    thread = threading.Thread(target=run, name="llava-generate", daemon=True)
    thread.start()
    shown: str | None = None
    try:
        for text in streamer:
            if stop and stop in text:
                break
            visible = text[: len(text) - _held_back(text, stop)]
            if shown is None or len(visible) > len(shown):
                shown = visible
                yield shown
        cancel.set()
        thread.join(timeout=_JOIN_TIMEOUT)
        if failure:
            raise failure[0]
        final = _cut(streamer.decode(), stop)
        if final != shown:
            yield final
    finally:
        cancel.set()
        thread.join(timeout=_JOIN_TIMEOUT)
        if thread.is_alive():
            logger.warning("the generation thread did not stop within %.0f s", _JOIN_TIMEOUT)


__all__ = ["prepare_pixels", "stream_answer"]
