"""SparseVLM through the real seam on a tiny LLaVA checkpoint loaded the way users load it: cached decoding equals full
re-forwards, each layer's key/value cache holds the per-layer counts the schedule gives, a padded batch equals each
prompt alone, and the reducer changes what the LLM computes."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from braco_patch.reducers.sparsevlm import visual_tokens_per_layer
from llava.testing.tiny import build_tiny_llava_checkpoint
from tests.llava.model._support import QUESTIONS, left_pad, load, make_images, pixels, prompt_ids

LAYERS = 4
NAME = "sparsevlm_k64_l0_1_2"  # the release's schedule for 64, sparsifying after layers 0, 1, 2
IMAGE_TOKENS = 36


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_tower_dir, tiny_tokenizer_dir):
    root = Path(tmp_path_factory.mktemp("sparsevlm"))
    path = build_tiny_llava_checkpoint(root / "llava", tiny_tower_dir, tiny_tokenizer_dir, llm="llama", layers=LAYERS, projector_type="mlp2x_gelu")
    return load(path)


def _batch(tiny, count):
    tokenizer, model, image_processor, _ = tiny
    sequences = [prompt_ids(tokenizer, question, conv_mode="vicuna_v1") for question in QUESTIONS[:count]]
    ids, mask = left_pad(sequences, tokenizer.pad_token_id)
    return sequences, ids, mask, pixels(make_images(count), image_processor, model)


@contextmanager
def _reducing(model, name=NAME):
    """Inference with the reducer ``name`` set, and the model left without one afterwards."""
    model.set_reducer(name)
    try:
        with torch.inference_mode():
            yield
    finally:
        model.set_reducer(None)


def _options(tokenizer, steps):
    return {"max_new_tokens": steps, "min_new_tokens": steps, "do_sample": False, "num_beams": 1, "pad_token_id": tokenizer.pad_token_id}


@pytest.mark.parametrize("prompt", [0, 1])
def test_cached_decoding_equals_full_reforwards(tiny, prompt):
    tokenizer, model, _, _ = tiny
    sequences, _, _, images = _batch(tiny, 2)
    ids, images = sequences[prompt][None], images[prompt : prompt + 1]
    with _reducing(model):
        cached = model.generate(ids, images=images, **_options(tokenizer, 5))
        generated = torch.empty((1, 0), dtype=torch.long)
        for step in range(5):
            logits = model(input_ids=torch.cat([ids, generated], 1), images=images, use_cache=False, generated_tokens=step).logits
            generated = torch.cat([generated, logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(cached, generated)


def test_each_layers_cache_holds_the_schedules_count(tiny):
    _, model, _, _ = tiny
    _, ids, mask, images = _batch(tiny, 1)
    with _reducing(model):
        out = model(input_ids=ids, attention_mask=mask, images=images, use_cache=True)
    lengths = [out.past_key_values.layers[i].keys.shape[2] for i in range(LAYERS)]
    others = ids.shape[1] - 1  # the image marker becomes the image tokens
    # 36 in: stage 0 keeps 35 + 1 recycled, stage 1 keeps 30 + 1, stage 2 keeps 17 + 1 (by hand from the schedule).
    assert [length - others for length in lengths] == [36, 36, 31, 18]
    assert visual_tokens_per_layer(64, LAYERS, IMAGE_TOKENS, (0, 1, 2)) == (36, 36, 31, 18)


def test_a_padded_batch_gives_each_prompt_its_own_answer(tiny):
    tokenizer, model, _, _ = tiny
    sequences, ids, mask, images = _batch(tiny, 3)
    with _reducing(model):
        batched = model.generate(ids, attention_mask=mask, images=images, **_options(tokenizer, 4))
        alone = [model.generate(seq[None], images=images[i : i + 1], **_options(tokenizer, 4))[0] for i, seq in enumerate(sequences)]
    assert torch.equal(batched, torch.stack(alone))


def test_the_reducer_changes_the_logits_and_none_restores_them(tiny):
    _, model, _, _ = tiny
    _, ids, mask, images = _batch(tiny, 1)
    with torch.inference_mode():
        plain = model(input_ids=ids, images=images).logits[:, -1]
    with _reducing(model):
        reduced = model(input_ids=ids, images=images).logits[:, -1]
    with torch.inference_mode():
        again = model(input_ids=ids, images=images).logits[:, -1]
    assert not torch.allclose(plain, reduced)
    assert torch.equal(plain, again)


@pytest.mark.parametrize(
    "name, message",
    [
        ("sparsevlm_k100", "schedules are K = [64, 96, 128, 192]"),
        ("sparsevlm_k64_l1_0_2", "three increasing layers"),
        ("sparsevlm_k64", "the LLM has layers 0..3"),
    ],
)
def test_impossible_names_are_one_sentence(tiny, name, message):
    _, model, _, _ = tiny
    with pytest.raises(Exception, match=re.escape(message)) as error:
        model.set_reducer(name)
    assert "\n" not in str(error.value)
