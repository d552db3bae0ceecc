"""How long a prompt may be once its images and video frames are spliced in: the one rule (issue 31, group 1).

``config.tokenizer_model_max_length`` is the length a checkpoint was trained at (``--model_max_length``).
Upstream's splice cuts every spliced sequence to it without a word; for an inference input that drops whatever
follows the visual tokens (the question and the assistant's header), and the model answers a prompt nobody
wrote. Here:

- **Inference** (no labels): the splice raises :class:`PromptTooLong` (:func:`check_prompt_lengths`), naming the
  length and the limit, in the eager and the fast generation paths alike (both splice through
  :meth:`~llava.model.llava_arch.LlavaMetaForCausalLM.prepare_inputs_labels_for_multimodal`).
- **Training** (labels given): the sample is cut as upstream cuts it (:func:`cut_training_sequences`), so that a
  recipe trains on the same tokens it trains on upstream; the first cut of a process is logged with the lengths
  (docs/TRAINING.md, "Sequence length").
- **Commands** check before generating, and for videos before decoding a frame: the frame count follows from the
  container's header and NeXT's rule, and the tokens per frame from the model (:func:`video_prompt_tokens`), so an
  over-long video is one sentence naming the frames that fit (:func:`check_video_prompt`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

logger = logging.getLogger(__name__)

#: The config key that bounds a spliced sequence.
LIMIT_KEY = "tokenizer_model_max_length"


class PromptTooLong(ValueError):
    """An inference input longer than the model takes; ``str(error)`` is one sentence.

    Attributes:
        length: The spliced length in tokens (visual tokens included).
        limit: The model's :data:`LIMIT_KEY`.
    """

    def __init__(self, message: str, length: int, limit: int) -> None:
        super().__init__(message)
        self.length, self.limit = length, limit


def prompt_limit(config: Any) -> int | None:
    """The longest spliced prompt ``config`` takes (:data:`LIMIT_KEY`), or ``None`` when it sets none."""
    value = getattr(config, LIMIT_KEY, None)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def too_long(length: int, limit: int, fix: str) -> str:
    """The sentence for a spliced prompt of ``length`` tokens over ``limit``; ``fix`` says what to change."""
    return (f"the prompt is {length} tokens with its visual tokens, more than the {limit} this model takes "
            f"({LIMIT_KEY}); {fix}")


#: What the splice can say about the fix (it does not know which flag gave the images).
SPLICE_FIX = "the end of the prompt would be cut off: give fewer images or video frames, or a shorter prompt"


def check_prompt_lengths(lengths: Sequence[int], config: Any, fix: str = SPLICE_FIX) -> None:
    """Refuse an inference batch whose longest spliced sample is over the model's limit.

    Raises:
        PromptTooLong: Naming the length and the limit.
    """
    limit = prompt_limit(config)
    longest = max(lengths, default=0)
    if limit is not None and longest > limit:
        raise PromptTooLong(too_long(longest, limit, fix), longest, limit)


_CUT_LOGGED = False


def cut_training_sequences(sequences: list[torch.Tensor], labels: list[torch.Tensor], config: Any) -> tuple[list, list]:
    """Training's cut, as upstream makes it: every spliced sample (and its labels) to the model's limit; the
    first cut of the process is logged once with the lengths."""
    global _CUT_LOGGED
    limit = prompt_limit(config)
    if limit is None:
        return sequences, labels
    longest = max((int(seq.shape[0]) for seq in sequences), default=0)
    if longest > limit and not _CUT_LOGGED:
        _CUT_LOGGED = True
        logger.warning(
            "a training sample is %d tokens with its visual tokens and is cut to %d (%s = --model_max_length), as "
            "upstream LLaVA cuts it; its answer tokens past that are not trained on. Raise --model_max_length, or "
            "use fewer frames (--frames_upbound) for videos (logged once)", longest, limit, LIMIT_KEY,
        )
    return [seq[:limit] for seq in sequences], [seq[:limit] for seq in labels]


def text_token_count(input_ids: torch.Tensor) -> int:
    """The text tokens of a prompt's ids (``[L]`` or ``[1, L]``): every id but the ``<image>`` markers."""
    from llava.constants import IMAGE_TOKEN_INDEX

    return int((input_ids != IMAGE_TOKEN_INDEX).sum())


@torch.inference_mode()
def tokens_per_frame(model: Any) -> int:
    """Visual tokens one video frame (one tower-sized view) becomes before the video's pooling and newlines,
    measured once on a blank frame (a compressor's budget, or the tower's grid).

    A projector whose count depends on the picture (an adaptive budget) is measured on that blank frame; the
    splice still holds the real prompt to the limit.
    """
    tower = model.get_vision_tower()
    side = int(tower.image_size)
    blank = torch.zeros((1, 3, side, side), device=model.device, dtype=model.dtype)
    encoded = model.encode_images(blank)
    return int(encoded[0].shape[0])


def video_prompt_tokens(model: Any, text_tokens: int, frames: int, per_frame: int | None = None) -> int:
    """The spliced length of a prompt of ``text_tokens`` text tokens with one video of ``frames`` frames
    (pooling and newlines as the model applies them, :func:`llava.model.video.video_token_count`)."""
    from .image_encoding import grid_shape
    from .video import video_layout, video_token_count

    layout = video_layout(model.config, grid_shape(model.get_vision_tower()), getattr(model.get_model(), "image_newline", None))
    per_frame = tokens_per_frame(model) if per_frame is None else per_frame
    return text_tokens + video_token_count(frames, per_frame, layout)


def check_video_prompt(model: Any, text_tokens: int, frames: int, *, frames_flag: str = "--frames-upbound",
                       fix: str | None = None) -> None:
    """Refuse, before any frame is decoded, a prompt that will not fit once the video's ``frames`` are in.

    Args:
        model: The loaded LLaVA model.
        text_tokens: The prompt's text tokens (its ids without the ``<image>`` marker).
        frames: The frames the video will give (:attr:`llava.video.VideoPlan.frame_count`).
        frames_flag: The flag that sets the frame count, named in the fix.
        fix: What to change instead, for a caller whose frame count is not the user's (a server).

    Raises:
        PromptTooLong: Naming the length, the limit and how many frames fit.
    """
    limit = prompt_limit(model.config)
    if limit is None:
        return
    per_frame = tokens_per_frame(model)
    length = video_prompt_tokens(model, text_tokens, frames, per_frame)
    if length <= limit:
        return
    if fix is None:
        fitting = next((count for count in range(frames - 1, 0, -1)
                        if video_prompt_tokens(model, text_tokens, count, per_frame) <= limit), 0)
        fix = (f"pass {frames_flag} {fitting} or fewer (the video gives {frames} frames now)" if fitting
               else "even one frame does not fit: shorten the question")
    raise PromptTooLong(too_long(length, limit, fix), length, limit)


__all__ = [
    "LIMIT_KEY", "PromptTooLong", "SPLICE_FIX", "check_prompt_lengths", "check_video_prompt", "cut_training_sequences",
    "prompt_limit", "text_token_count", "tokens_per_frame", "too_long", "video_prompt_tokens",
]
