"""What the reducer tests on a tiny LLaVA checkpoint (the ``tiny`` fixture of conftest.py) share: prompts and images,
inference under a reducer, each layer's cache length, a refusal's message, and the checks every reducer must pass
through the real seam (:class:`ReducerSeamChecks`: cached decoding equals full re-forwards, a padded batch equals each
prompt alone, the reducer changes the logits and turning it off restores them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from tests.llava.model._support import QUESTIONS, left_pad, make_images, pixels, prompt_ids

#: The tiny LLM's decoder layers, and the image tokens one image gives (the tiny tower's 6 x 6 grid).
LAYERS = 4
IMAGE_TOKENS = 36


def batch(tiny: tuple, count: int) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sequences, ids, mask, images)``: ``count`` prompts alone and left-padded into a batch, with one image each."""
    tokenizer, model, image_processor, _ = tiny
    sequences = [prompt_ids(tokenizer, question, conv_mode="vicuna_v1") for question in QUESTIONS[:count]]
    ids, mask = left_pad(sequences, tokenizer.pad_token_id)
    return sequences, ids, mask, pixels(make_images(count), image_processor, model)


@contextmanager
def reducing(model: Any, name: str) -> Iterator[None]:
    """Inference with the reducer ``name`` set, and the model left without one afterwards."""
    model.set_reducer(name)
    try:
        with torch.inference_mode():
            yield
    finally:
        model.set_reducer(None)


def greedy(tokenizer: Any, steps: int) -> dict[str, Any]:
    """``generate`` options for exactly ``steps`` greedy tokens."""
    return {"max_new_tokens": steps, "min_new_tokens": steps, "do_sample": False, "num_beams": 1, "pad_token_id": tokenizer.pad_token_id}


def cached_image_tokens(tiny: tuple, name: str) -> list[int]:
    """The image tokens each decoder layer's key/value cache holds after one prefill under ``name`` (the cache's length
    less the prompt's other tokens)."""
    _, model, _, _ = tiny
    _, ids, mask, images = batch(tiny, 1)
    with reducing(model, name):
        out = model(input_ids=ids, attention_mask=mask, images=images, use_cache=True)
    others = ids.shape[1] - 1  # the image marker becomes the image tokens
    return [out.past_key_values.layers[i].keys.shape[2] - others for i in range(LAYERS)]


def refusal(model: Any, name: str) -> str:
    """The message of what ``model.set_reducer(name)`` raises (the test fails when it raises nothing)."""
    with pytest.raises(Exception) as error:
        model.set_reducer(name)
    return str(error.value)


class ReducerSeamChecks:
    """What every reducer must do through the real seam, whatever its selection; a method's test module subclasses it
    as ``class TestSeam(ReducerSeamChecks)`` with :attr:`NAME` its type on the 4-layer tiny LLM."""

    NAME: str

    @pytest.mark.parametrize("prompt", [0, 1])
    def test_cached_decoding_equals_full_reforwards(self, tiny, prompt):
        tokenizer, model, _, _ = tiny
        sequences, _, _, images = batch(tiny, 2)
        ids, images = sequences[prompt][None], images[prompt : prompt + 1]
        with reducing(model, self.NAME):
            cached = model.generate(ids, images=images, **greedy(tokenizer, 5))
            generated = torch.empty((1, 0), dtype=torch.long)
            for step in range(5):
                logits = model(input_ids=torch.cat([ids, generated], 1), images=images, use_cache=False, generated_tokens=step).logits
                generated = torch.cat([generated, logits[:, -1].argmax(-1, keepdim=True)], 1)
        assert torch.equal(cached, generated)

    def test_a_padded_batch_gives_each_prompt_its_own_answer(self, tiny):
        tokenizer, model, _, _ = tiny
        sequences, ids, mask, images = batch(tiny, 3)
        with reducing(model, self.NAME):
            batched = model.generate(ids, attention_mask=mask, images=images, **greedy(tokenizer, 4))
            alone = [model.generate(seq[None], images=images[i : i + 1], **greedy(tokenizer, 4))[0] for i, seq in enumerate(sequences)]
        assert torch.equal(batched, torch.stack(alone))

    def test_the_reducer_changes_the_logits_and_none_restores_them(self, tiny):
        _, model, _, _ = tiny
        _, ids, _, images = batch(tiny, 1)
        with torch.inference_mode():
            plain = model(input_ids=ids, images=images).logits[:, -1]
        with reducing(model, self.NAME):
            reduced = model(input_ids=ids, images=images).logits[:, -1]
        with torch.inference_mode():
            again = model(input_ids=ids, images=images).logits[:, -1]
        assert not torch.allclose(plain, reduced)
        assert torch.equal(plain, again)
