"""DART through the real seam on a tiny LLaVA checkpoint loaded the way users load it: the image tokens it keeps are
the ones its selection gives on keys and final-normed states re-derived in float64 from the weights, cached decoding
equals full re-forwards, each layer's key/value cache holds the counts its schedule gives, a padded batch equals each
prompt alone, and impossible names and budgets are one sentence."""

from __future__ import annotations

import re

import pytest
import torch

from braco_patch.reducers.dart import DartConfig, select_row, visual_tokens_per_layer
from llava.model.reduction import CACHE_ATTRIBUTE

from .seam import IMAGE_TOKENS, LAYERS, ReducerSeamChecks, batch, cached_image_tokens, reducing, refusal

NAME = "dart_k16"  # max_num_trunction 16 before layer 2: 4 image pivots + 2 claims for each of 8 pivots = 20 kept


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
    sequences, _, _, images = batch(tiny, 3)
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
        with reducing(model, NAME):
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


class TestSeam(ReducerSeamChecks):
    """The checks every reducer passes through the seam, on this module's type."""

    NAME = NAME


def test_each_layers_cache_holds_the_schedules_count(tiny):
    # 36 in: layers 0 and 1 see them all; from layer 2 on 4 image pivots + 8 pivots x (16 // 8) claims (by hand).
    assert cached_image_tokens(tiny, NAME) == [36, 36, 20, 20]
    assert visual_tokens_per_layer(DartConfig(budget=16), LAYERS, IMAGE_TOKENS) == (36, 36, 20, 20)


@pytest.mark.parametrize(
    "name, message",
    [
        ("dart_k3", "reducer 'dart_k3' cannot run: DART budget 3 gives no claim per pivot; use at least 8 (one per pivot)"),
        ("dart_k16_l0", "DART layer must be a positive integer, got 0"),
        ("dart_k16_l4", "prunes before layer 4; the LLM has layers 0..3"),
    ],
)
def test_impossible_names_are_one_sentence(tiny, name, message):
    said = refusal(tiny[1], name)
    assert message in said and "\n" not in said


def test_a_budget_the_image_cannot_hold_is_one_sentence(tiny):
    _, model, _, _ = tiny
    _, ids, _, images = batch(tiny, 1)
    with reducing(model, "dart_k64"), pytest.raises(ValueError, match=re.escape("keeps 68 image tokens but the image has 36; use a budget below 32")) as error:
        model(input_ids=ids, images=images)
    assert "\n" not in str(error.value)
