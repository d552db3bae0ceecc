"""The greedy decoding loop (``llava.model.greedy``) against transformers' own ``generate`` on the same model.

transformers' greedy search is the independent reference: a call that the plan refuses (here, one with an
empty ``logits_processor`` list, which changes no token) goes through ``GenerationMixin.generate``; the
same call without it must take the loop and give the same ids, for every registered LLM family, with images
and without, at batch 1 and left-padded batches, with EOS ids that stop rows at different steps.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from transformers import GenerationConfig, GenerationMixin, LogitsProcessorList, StoppingCriteriaList

from llava.model.cache_argument import cache_argument, take_cache
from llava.model.greedy import GreedyPlan, greedy_decode, greedy_plan

from ._support import QUESTIONS, left_pad, make_images, pixels, prompt_ids

#: llm → conversation template of its released checkpoints.
TEMPLATES = {"llama": "vicuna_v1", "qwen2": "qwen_1_5", "mistral": "mistral_instruct"}
NEW_TOKENS = 8


def _generate(model, *args, reference: bool, **kwargs) -> tuple[torch.Tensor, int]:
    """``model.generate`` and how many times transformers' ``GenerationMixin.generate`` ran inside it."""
    calls = []
    original = GenerationMixin.generate

    def counting(self, *inner_args, **inner_kwargs):
        calls.append(1)
        return original(self, *inner_args, **inner_kwargs)

    GenerationMixin.generate = counting
    try:
        if reference:
            kwargs["logits_processor"] = LogitsProcessorList()
        out = model.generate(*args, **kwargs)
    finally:
        GenerationMixin.generate = original
    return out, len(calls)


def _batch(llm, tokenizer, image_processor, model, with_images: bool):
    template = TEMPLATES[llm]
    sequences = [prompt_ids(tokenizer, question, num_images=int(with_images), conv_mode=template) for question in QUESTIONS]
    ids, mask = left_pad(sequences, tokenizer.pad_token_id)
    images = pixels(make_images(len(QUESTIONS)), image_processor, model) if with_images else None
    return sequences, ids, mask, images


@pytest.mark.parametrize("with_images", [True, False], ids=["images", "text"])
@pytest.mark.parametrize("llm", list(TEMPLATES))
def test_loop_equals_transformers_generate(family, llm, with_images) -> None:
    tokenizer, model, image_processor, _ = family(llm)
    sequences, ids, mask, images = _batch(llm, tokenizer, image_processor, model, with_images)
    options = {"do_sample": False, "num_beams": 1, "max_new_tokens": NEW_TOKENS, "pad_token_id": tokenizer.pad_token_id}

    with torch.inference_mode():
        expected, reference_calls = _generate(model, ids, attention_mask=mask, images=images, reference=True, **options)
        got, loop_calls = _generate(model, ids, attention_mask=mask, images=images, reference=False, **options)
        single, _ = _generate(model, sequences[0][None], images=None if images is None else images[:1], reference=False, **options)
    assert (reference_calls, loop_calls) == (1, 0)
    assert expected.shape == (len(QUESTIONS), NEW_TOKENS)
    assert torch.equal(got, expected)
    assert torch.equal(single[0], expected[0])


def _eos_case(family, llm):
    """The batch, options, and two EOS ids (row 0's second free token, the last row's fourth)."""
    tokenizer, model, image_processor, _ = family(llm)
    _, ids, mask, images = _batch(llm, tokenizer, image_processor, model, with_images=True)
    options = {"do_sample": False, "max_new_tokens": NEW_TOKENS, "pad_token_id": tokenizer.pad_token_id}
    with torch.inference_mode():
        free, _ = _generate(model, ids, attention_mask=mask, images=images, reference=True, eos_token_id=[], **options)
    eos = sorted({int(free[0, 1]), int(free[-1, 3])})
    return tokenizer, model, (ids,), {"attention_mask": mask, "images": images, "eos_token_id": eos, **options}, free


@pytest.mark.parametrize("llm", list(TEMPLATES))
def test_eos_stops_rows_and_pads_them_as_transformers_does(family, llm) -> None:
    tokenizer, model, args, options, free = _eos_case(family, llm)
    with torch.inference_mode():
        expected, _ = _generate(model, *args, reference=True, **options)
        got, loop_calls = _generate(model, *args, reference=False, **options)
    assert loop_calls == 0
    assert torch.equal(got, expected)
    first_row_end = int(torch.isin(free[0], torch.tensor(options["eos_token_id"])).nonzero()[0]) + 1
    assert first_row_end <= 2
    if got.shape[1] > first_row_end:  # another row went on: the finished one is filled with pad ids
        assert (got[0, first_row_end:] == tokenizer.pad_token_id).all()


@pytest.mark.parametrize("llm", ["llama", "mistral"])
def test_min_new_tokens_holds_eos_back_as_transformers_does(family, llm) -> None:
    _, model, args, options, _ = _eos_case(family, llm)
    options["min_new_tokens"] = 5
    with torch.inference_mode():
        expected, _ = _generate(model, *args, reference=True, **options)
        got, loop_calls = _generate(model, *args, reference=False, **options)
    assert loop_calls == 0
    assert torch.equal(got, expected)
    assert not torch.isin(got[:, :5], torch.tensor(options["eos_token_id"])).any()


def test_plan_takes_plain_greedy_calls() -> None:
    config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0, max_length=4096, temperature=0.9, top_p=0.6)
    assert greedy_plan(config, {"do_sample": False, "max_new_tokens": 16}) == GreedyPlan(16, (2,), 0)
    assert greedy_plan(config, {"max_new_tokens": 3, "num_beams": 1, "use_cache": True, "eos_token_id": [2, 7]}) == GreedyPlan(3, (2, 7), 0)
    assert greedy_plan(config, {"max_new_tokens": 16, "min_new_tokens": 16}) == GreedyPlan(16, (2,), 0, min_new_tokens=16)
    no_pad = GenerationConfig(eos_token_id=[5, 6])
    assert greedy_plan(no_pad, {"max_new_tokens": 4}) == GreedyPlan(4, (5, 6), 5)  # transformers fills with the first EOS
    assert greedy_plan(GenerationConfig(repetition_penalty=1.0, max_new_tokens=5), {}) == GreedyPlan(5, (), None)


@pytest.mark.parametrize(
    "config_keys, options",
    [
        ({}, {"do_sample": True, "max_new_tokens": 4}),
        ({"do_sample": True}, {"max_new_tokens": 4}),
        ({}, {"num_beams": 2, "max_new_tokens": 4}),
        ({}, {"num_beams": True, "max_new_tokens": 4}),
        ({"repetition_penalty": 1.2}, {"max_new_tokens": 4}),
        ({"no_repeat_ngram_size": 3}, {"max_new_tokens": 4}),
        ({}, {"min_length": 2, "max_new_tokens": 4}),
        ({}, {"min_new_tokens": -1, "max_new_tokens": 4}),
        ({}, {"stop_strings": ["."], "max_new_tokens": 4}),
        ({}, {"output_scores": True, "return_dict_in_generate": True, "max_new_tokens": 4}),
        ({"cache_implementation": "static"}, {"max_new_tokens": 4}),
        ({}, {"streamer": object(), "max_new_tokens": 4}),
        ({}, {"stopping_criteria": StoppingCriteriaList(), "max_new_tokens": 4}),
        ({}, {"logits_processor": LogitsProcessorList(), "max_new_tokens": 4}),
        ({}, {"max_length": 20}),
        ({}, {"max_new_tokens": 0}),
        ({}, {"max_new_tokens": 4, "eos_token_id": torch.tensor([2])}),
    ],
    ids=[
        "sample", "sample-config", "beams", "beams-bool", "repetition-penalty", "ngram", "min-length",
        "negative-min-new-tokens", "stop-strings", "scores", "static-cache", "streamer", "stopping-criteria",
        "logits-processor", "max-length-only", "zero-budget", "tensor-eos",
    ],
)
def test_plan_refuses_everything_else(config_keys, options) -> None:
    config = GenerationConfig(eos_token_id=2, pad_token_id=0, **config_keys)
    assert greedy_plan(config, options) is None


def test_loop_feeds_each_token_with_its_position_and_mask() -> None:
    """A scripted LM (logits chosen per call) records what the loop passes: every new token goes in at its row's
    last position + 1 with one more mask column of ones, the cache is handed back, an all-ones mask is dropped."""
    vocab, script = 10, [[3, 4], [5, 9], [9, 6], [7, 7]]  # token per call and row; 9 is EOS
    calls: list[dict] = []

    def step(input_ids=None, inputs_embeds=None, attention_mask=None, position_ids=None, past_key_values=None):
        calls.append({"ids": input_ids, "mask": attention_mask, "positions": position_ids, "cache": past_key_values})
        logits = torch.zeros(2, vocab)
        logits[torch.arange(2), torch.tensor(script[len(calls) - 1])] = 1.0
        return logits, f"cache-{len(calls)}"

    embeds = torch.zeros(2, 3, 4)
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    positions = torch.tensor([[0, 0, 1], [0, 1, 2]])
    out = greedy_decode(step, embeds, mask, positions, GreedyPlan(max_new_tokens=6, eos_token_ids=(9,), pad_token_id=0))

    assert out.tolist() == [[3, 5, 9], [4, 9, 0]]  # row 1 stops at its EOS and is padded; row 0 stops at call 3
    assert len(calls) == 3
    assert calls[0]["ids"] is None and calls[0]["cache"] is None and torch.equal(calls[0]["mask"], mask)
    for index, call in enumerate(calls[1:], start=1):
        assert torch.equal(call["ids"], out[:, index - 1 : index])
        assert torch.equal(call["positions"], positions[:, -1:] + index)
        assert torch.equal(call["mask"], torch.cat([mask, torch.ones(2, index, dtype=mask.dtype)], dim=1))
        assert call["cache"] == f"cache-{index}"

    calls.clear()
    greedy_decode(step, embeds, torch.ones(2, 3, dtype=torch.long), None, GreedyPlan(2, (), None))
    assert [call["mask"] for call in calls] == [None, None] and [call["positions"] for call in calls] == [None, None]


@pytest.mark.parametrize("reference", [True, False], ids=["transformers", "loop"])
@pytest.mark.parametrize("llm", list(TEMPLATES))
def test_generation_passes_the_cache_under_the_installed_name(family, llm, reference) -> None:
    # transformers 5.24 renamed past_key_values to cache (the old name goes in 5.40); a model that still passes
    # the old name warns on every step, and breaks once it is gone.
    tokenizer, model, image_processor, _ = family(llm)
    _, ids, mask, images = _batch(llm, tokenizer, image_processor, model, with_images=True)
    with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
        warnings.simplefilter("always")
        _generate(model, ids, attention_mask=mask, images=images, reference=reference, max_new_tokens=3,
                  do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert not [str(w.message) for w in caught if "past_key_values" in str(w.message)]


def test_forward_takes_the_cache_under_either_name(family) -> None:
    tokenizer, model, _, _ = family("llama")
    ids = torch.tensor([[1, 5, 6, 7]])
    with torch.inference_mode():
        first = model(input_ids=ids[:, :3], use_cache=True)
        cache = getattr(first, cache_argument(type(model.get_model()).forward))
        whole = model(input_ids=ids).logits[:, -1]
        by_new_name = model(input_ids=ids[:, 3:], cache=copy.deepcopy(cache)).logits[:, -1]
        by_upstream_name = model(input_ids=ids[:, 3:], past_key_values=copy.deepcopy(cache)).logits[:, -1]
        with pytest.raises(ValueError, match="not both"):
            model(input_ids=ids[:, 3:], cache=cache, past_key_values=cache)
    torch.testing.assert_close(by_new_name, whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(by_upstream_name, whole, rtol=1e-5, atol=1e-5)


def test_cache_argument_reads_the_signature() -> None:
    def new(self, input_ids=None, cache=None): ...
    def old(self, input_ids=None, past_key_values=None): ...

    assert (cache_argument(new), cache_argument(old)) == ("cache", "past_key_values")
    assert take_cache(None, {"cache": 1}) == 1
    assert take_cache(2, {}) == 2
