"""DART through the real seam on a tiny LLaVA checkpoint loaded the way users load it: the image tokens it keeps are
the ones its selection gives on keys and final-normed states re-derived in float64 from the weights, cached decoding
equals full re-forwards, each layer's key/value cache holds the counts its schedule gives, a padded batch equals each
prompt alone, and impossible names and budgets are one sentence."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from braco_patch.reducers.dart import DartConfig, select_row, visual_tokens_per_layer
from llava.model.reduction import CACHE_ATTRIBUTE
from llava.testing.tiny import build_tiny_llava_checkpoint
from tests.llava.model._support import QUESTIONS, left_pad, load, make_images, pixels, prompt_ids

LAYERS = 4
NAME = "dart_k16"  # max_num_trunction 16 before layer 2: 4 image pivots + 2 claims for each of 8 pivots = 20 kept
IMAGE_TOKENS = 36


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_tower_dir, tiny_tokenizer_dir):
    root = Path(tmp_path_factory.mktemp("dart"))
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


def _float64_keys(model, hidden, layer_index):
    """``[T, H_kv * d]`` keys after RoPE (positions 0..T-1) of Llama layer ``layer_index`` on its input ``[1, T, D]``."""
    config, layer = model.config, model.get_model().layers[layer_index]
    x = hidden[0].double()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + layer.input_layernorm.variance_epsilon) * layer.input_layernorm.weight.double()
    head_dim = config.hidden_size // config.num_attention_heads
    k = (x @ layer.self_attn.k_proj.weight.double().T).view(x.shape[0], -1, head_dim)  # [T, H_kv, d]
    inv = 1.0 / config.rope_parameters["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(x.shape[0], dtype=torch.float64)[:, None] * inv
    cos, sin = torch.cat([angles.cos()] * 2, -1)[:, None], torch.cat([angles.sin()] * 2, -1)[:, None]
    half = head_dim // 2
    return (k * cos + torch.cat([-k[..., half:], k[..., :half]], -1) * sin).flatten(1)


def test_kept_tokens_are_the_selection_on_float64_keys_and_final_normed_states(tiny):
    _, model, _, _ = tiny
    sequences, _, _, images = _batch(tiny, 3)
    ids, image = sequences[2][None], images[2:3]
    inputs = {}
    handles = [layer.register_forward_pre_hook(lambda m, args, i=i: inputs.setdefault(i, args[0].clone()))
               for i, layer in enumerate(model.get_model().layers)]
    with torch.inference_mode():
        model(input_ids=ids, images=image)
    for handle in handles:
        handle.remove()
    norm = model.get_model().norm
    saved = norm.weight.detach().clone()
    try:  # a tiny model's norm weight is all ones, which leaves cosine similarities as they are: make it count
        with torch.no_grad():
            norm.weight.copy_(torch.rand(saved.shape, generator=torch.Generator().manual_seed(0)) * 2 - 1)
        with _reducing(model):
            state = getattr(model(input_ids=ids, images=image, use_cache=True).past_key_values, CACHE_ATTRIBUTE)
        weight = norm.weight.detach().double().clone()
    finally:
        with torch.no_grad():
            norm.weight.copy_(saved)
    x = inputs[2][0].double()
    states = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon) * weight
    want = select_row(_float64_keys(model, inputs[1], 1), states, state.visual[0], state.text[0], DartConfig(budget=16))
    kept = state.kept[2][0]
    assert torch.equal(kept[state.visual[0][kept]], want)
    assert want.numel() == 20 and int(state.text[0].sum()) >= 4


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
    # 36 in: layers 0 and 1 see them all; from layer 2 on 4 image pivots + 8 pivots x (16 // 8) claims (by hand).
    assert [length - others for length in lengths] == [36, 36, 20, 20]
    assert visual_tokens_per_layer(DartConfig(budget=16), LAYERS, IMAGE_TOKENS) == (36, 36, 20, 20)


def test_a_padded_batch_gives_each_prompt_its_own_answer(tiny):
    tokenizer, model, _, _ = tiny
    sequences, ids, mask, images = _batch(tiny, 3)
    with _reducing(model):
        batched = model.generate(ids, attention_mask=mask, images=images, **_options(tokenizer, 4))
        alone = [model.generate(seq[None], images=images[i : i + 1], **_options(tokenizer, 4))[0] for i, seq in enumerate(sequences)]
    assert torch.equal(batched, torch.stack(alone))


def test_the_reducer_changes_the_logits_and_none_restores_them(tiny):
    _, model, _, _ = tiny
    _, ids, _, images = _batch(tiny, 1)
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
        ("dart_k3", "reducer 'dart_k3' cannot run: DART budget 3 gives no claim per pivot; use at least 8 (one per pivot)"),
        ("dart_k16_l0", "DART layer must be a positive integer, got 0"),
        ("dart_k16_l4", "prunes before layer 4; the LLM has layers 0..3"),
    ],
)
def test_impossible_names_are_one_sentence(tiny, name, message):
    _, model, _, _ = tiny
    with pytest.raises(Exception, match=re.escape(message)) as error:
        model.set_reducer(name)
    assert "\n" not in str(error.value)


def test_a_budget_the_image_cannot_hold_is_one_sentence(tiny):
    _, model, _, _ = tiny
    _, ids, _, images = _batch(tiny, 1)
    with _reducing(model, "dart_k64"), pytest.raises(ValueError, match=re.escape("keeps 68 image tokens but the image has 36; use a budget below 32")) as error:
        model(input_ids=ids, images=images)
    assert "\n" not in str(error.value)
