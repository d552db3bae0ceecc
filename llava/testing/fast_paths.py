"""Eager-versus-fast generation on tiny checkpoints: the logic the CPU tests (``--fast compile``) and the GPU tests
(``cudagraph`` and the CUDA default, float16) share.

:func:`prompt_batch` builds one ``generate`` call's inputs the way :class:`llava.generation.LlavaGenerator` does
(the template, one image marker per question, left padding); :func:`eager_and_fast` runs the same calls with the
fast path off and then on and returns both token tensors, which must be equal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from PIL import Image

#: Questions of different lengths, so a batch of them is left-padded unevenly.
QUESTIONS = (
    "What is in the image?",
    "Describe the colours of every shape in the picture in detail, please.",
    "Is it dark?",
)


def plain_call(fn: Callable[..., Any], *example: torch.Tensor) -> Callable[..., Any]:
    """A ``capture`` that keeps ``fn`` as it is: the static-cache machinery with eager kernels (cheap in tests)."""
    return fn


def sample_images(count: int) -> list[Image.Image]:
    """``count`` RGB images: seven different sizes and colours, then again, with a mark at a different place each
    time round, so that any batch size (32 in the GPU benchmark) gets valid images, no two alike."""
    images = []
    for index in range(count):
        shape = index % 7
        image = Image.new("RGB", (40 + 8 * shape, 48 - 4 * shape), (40 * shape, 120, 200 - 30 * shape))
        if index >= 7:
            image.putpixel((index // 7 % 40, index // 7 % 24), (255, 255, 255))
        images.append(image)
    return images


def prompt_batch(tokenizer: Any, image_processor: Any, model: Any, questions: Sequence[str], *, conv_mode: str = "vicuna_v1",
                 with_images: bool = True) -> dict[str, Any]:
    """``generate`` keyword arguments for ``questions`` (one image each unless ``with_images`` is false)."""
    from llava.generation import LlavaGenerator

    generator = LlavaGenerator(tokenizer, model, image_processor, conv_mode=conv_mode, device=str(model.device), dtype=model.dtype)
    prompts = [generator.build_prompt(question, 1 if with_images else 0) for question in questions]
    input_ids, attention_mask = generator._batch_inputs(prompts)
    call: dict[str, Any] = {"inputs": input_ids, "attention_mask": attention_mask, "pad_token_id": generator.pad_token_id}
    if with_images:
        from llava.mm_utils import visuals_to_pixels

        pixels, sizes, _ = visuals_to_pixels(sample_images(len(questions)), image_processor, model.config, model.device, model.dtype)
        call.update(images=pixels, image_sizes=sizes)
    return call


def eager_and_fast(model: Any, mode: str, calls: Sequence[Mapping[str, Any]], *,
                   capture: Callable[..., Any] | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(eager tokens, fast tokens)`` of each ``model.generate(**call)``; the model is left on the eager path.

    Each fast call runs twice and must give the same tokens both times (the second replays what the first
    captured or compiled).
    """
    from llava.model.fast_generation import enable_fast_path

    enable_fast_path(model, "none")
    with torch.inference_mode():
        eager = [model.generate(**call) for call in calls]
    fast_path = enable_fast_path(model, mode, capture=capture)
    if fast_path is None:
        raise AssertionError(f"--fast {mode} was refused for {type(model).__name__}")
    try:
        with torch.inference_mode():
            fast = [model.generate(**call) for call in calls]
            again = [model.generate(**call) for call in calls]
    finally:
        enable_fast_path(model, "none")
    for first, second in zip(fast, again):
        if not torch.equal(first, second):
            raise AssertionError(f"a replayed fast call gave other tokens: {first.tolist()} then {second.tolist()}")
    return list(zip(eager, fast))


def sampled_twice(model: Any, mode: str, call: Mapping[str, Any], *, seed: int = 0,
                  capture: Callable[..., Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A sampled ``model.generate(**call)`` on the fast path ``mode``, twice from the same seed (the two must agree);
    the model is left on the eager path."""
    from llava.model.fast_generation import enable_fast_path

    enable_fast_path(model, mode, capture=capture)
    try:
        with torch.inference_mode():
            torch.manual_seed(seed)
            first = model.generate(**call)
            torch.manual_seed(seed)
            second = model.generate(**call)
    finally:
        enable_fast_path(model, "none")
    return first, second


__all__ = ["QUESTIONS", "eager_and_fast", "plain_call", "prompt_batch", "sample_images", "sampled_twice"]
