"""The static-cache decoder (``llava.model.fast_decode``) and its parts, against eager decoding and direct formulas.

The machinery (buckets, the static cache, the 4-D masks, choosing tokens inside the step, reading the state every
few steps and trimming) runs here with eager kernels (``plain_call`` as the capture), so every LLM family, batch
shape and stopping rule is cheap to check; the compiled and captured paths are checked through the commands
(tests/llava/eval/test_fast_path.py) and on a GPU (tests/gpu/test_fast_generation.py).
"""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import GenerationConfig, LogitsProcessorList, TopKLogitsWarper, TopPLogitsWarper

from llava.model.decode_plan import DecodePlan, decode_plan
from llava.model.fast_decode import bucket, cache_length
from llava.model.fast_generation import COMPILE_BACKEND_VARIABLE, enable_fast_path
from llava.model.static_cache import StaticKV, slot_mask
from llava.testing.fast_paths import QUESTIONS, eager_and_fast, plain_call, prompt_batch, sampled_twice

TEMPLATES = {"llama": "vicuna_v1", "qwen2": "qwen_1_5", "mistral": "mistral_instruct"}


# ------------------------------------------------------------------------------------------ equal to eager


@pytest.mark.parametrize("with_images", [True, False], ids=["images", "text"])
@pytest.mark.parametrize("llm", list(TEMPLATES))
def test_static_decoding_equals_eager_for_every_family(family, llm, with_images) -> None:
    tokenizer, model, image_processor, _ = family(llm)
    options = {"do_sample": False, "max_new_tokens": 10}
    calls = [
        {**prompt_batch(tokenizer, image_processor, model, QUESTIONS[:1], conv_mode=TEMPLATES[llm], with_images=with_images), **options},
        {**prompt_batch(tokenizer, image_processor, model, QUESTIONS, conv_mode=TEMPLATES[llm], with_images=with_images), **options},
    ]
    for eager, fast in eager_and_fast(model, "compile", calls, capture=plain_call):
        assert fast.shape == eager.shape and torch.equal(fast, eager)


def test_eos_min_new_tokens_and_trimming_equal_eager(family) -> None:
    """EOS ids that finish rows at different steps (row 0 early, the others later or never), ``min_new_tokens``
    holding them back, and a budget that is not a multiple of the host's read interval."""
    tokenizer, model, image_processor, _ = family("llama")
    batch = prompt_batch(tokenizer, image_processor, model, QUESTIONS)
    with torch.inference_mode():
        free = model.generate(**batch, do_sample=False, max_new_tokens=13, eos_token_id=[])
    eos = sorted({int(free[0, 1]), int(free[-1, 6])})
    calls = [
        {**batch, "do_sample": False, "max_new_tokens": 13, "eos_token_id": eos},
        {**batch, "do_sample": False, "max_new_tokens": 13, "eos_token_id": eos, "min_new_tokens": 4},
        {**batch, "do_sample": False, "max_new_tokens": 1},
    ]
    results = eager_and_fast(model, "compile", calls, capture=plain_call)
    for eager, fast in results:
        assert torch.equal(fast, eager)
    stopped, held = results[0][0], results[1][0]
    assert stopped.shape[1] < 13 or (stopped[0, 2:] == tokenizer.pad_token_id).all()  # rows finished and were padded
    assert not torch.isin(held[:, :4], torch.tensor(eos)).any()
    assert results[2][0].shape == (len(QUESTIONS), 1)


def test_streamer_and_stopping_criteria_see_what_eager_shows(family) -> None:
    """A streamer gets the same tokens one at a time, and a stopping criterion ends the answer at the same token."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    tokenizer, model, image_processor, _ = family("llama")
    call = {**prompt_batch(tokenizer, image_processor, model, QUESTIONS[1:2]), "do_sample": False, "max_new_tokens": 12}
    with torch.inference_mode():
        free = model.generate(**call)

    class Collect:
        def __init__(self) -> None:
            self.puts: list[list[int]] = []
            self.ended = False

        def put(self, value: torch.Tensor) -> None:
            self.puts.append(value.reshape(-1).tolist())

        def end(self) -> None:
            self.ended = True

    class StopAt(StoppingCriteria):  # stops once the 5th token is out, as a stop string would
        def __call__(self, input_ids, scores=None, **kwargs):
            return torch.full((input_ids.shape[0],), input_ids.shape[1] >= 5, dtype=torch.bool)

    seen = {}
    for name in ("eager", "fast"):
        streamer = Collect()
        stop_call = {**call, "streamer": streamer, "stopping_criteria": StoppingCriteriaList([StopAt()])}
        enable_fast_path(model, "compile" if name == "fast" else "none", capture=plain_call)
        with torch.inference_mode():
            seen[name] = (model.generate(**stop_call).tolist(), streamer.puts, streamer.ended)
        enable_fast_path(model, "none")
    assert seen["fast"] == seen["eager"]
    tokens, puts, ended = seen["fast"]
    assert tokens == [free[0, :5].tolist()] and puts == [[]] + [[token] for token in tokens[0]] and ended


def test_calls_the_fast_path_cannot_run_go_eager_said_once(family, caplog) -> None:
    tokenizer, model, image_processor, _ = family("llama")
    call = {**prompt_batch(tokenizer, image_processor, model, QUESTIONS[:1]), "max_new_tokens": 4, "num_beams": 2,
            "do_sample": False}
    with caplog.at_level(logging.INFO, logger="llava.model.fast_generation"):
        (eager, fast), (_, again) = eager_and_fast(model, "compile", [call, call], capture=plain_call)
    assert torch.equal(fast, eager) and torch.equal(again, eager)
    said = [record.getMessage() for record in caplog.records if "beam search" in record.getMessage()]
    assert said == ["--fast compile: beam search (num_beams=2) is not on the fast path; such calls generate eagerly"]


def test_a_capture_that_fails_leaves_the_model_eager_said_once(family, caplog) -> None:
    tokenizer, model, image_processor, _ = family("llama")
    call = {**prompt_batch(tokenizer, image_processor, model, QUESTIONS[:1], with_images=False), "max_new_tokens": 3,
            "do_sample": False}

    def broken(fn, *example):
        raise RuntimeError("no graphs today")

    with caplog.at_level(logging.WARNING, logger="llava.model.fast_generation"):
        (eager, fast), (_, again) = eager_and_fast(model, "cudagraph", [call, call], capture=broken)
    assert torch.equal(fast, eager) and torch.equal(again, eager)
    said = [record.getMessage() for record in caplog.records if "capturing failed" in record.getMessage()]
    assert said == ["--fast cudagraph: capturing failed (RuntimeError: no graphs today); this model generates eagerly from now on"]


def test_sampling_on_the_fast_path_is_seeded_and_in_range(family) -> None:
    tokenizer, model, image_processor, _ = family("llama")
    call = {**prompt_batch(tokenizer, image_processor, model, QUESTIONS[:2]), "do_sample": True, "temperature": 0.7,
            "top_p": 0.9, "max_new_tokens": 6}
    first, second = sampled_twice(model, "compile", call, seed=3, capture=plain_call)
    assert torch.equal(first, second) and first.shape[0] == 2
    assert ((first >= 0) & (first < model.lm_head.out_features)).all()


def test_a_seeded_call_that_captures_samples_as_one_that_replays(family, monkeypatch) -> None:
    # Found on an H200 (2026-11-27): the first seeded call ran each step once eagerly before capturing it, and that
    # run's random draws shifted its tokens by two steps against the same call replaying. The real capture here
    # (torch.compile, dynamo's eager backend for speed) runs the step before compiling it, as the CUDA graph does.
    monkeypatch.setenv(COMPILE_BACKEND_VARIABLE, "eager")
    tokenizer, model, image_processor, _ = family("llama")
    call = {**prompt_batch(tokenizer, image_processor, model, QUESTIONS[:2]), "do_sample": True, "temperature": 0.7,
            "top_p": 0.9, "max_new_tokens": 6}
    first, second = sampled_twice(model, "compile", call, seed=5)
    assert torch.equal(first, second)


# ------------------------------------------------------------------------------------------ the parts


def test_buckets_pad_a_prompt_by_at_most_a_quarter_or_16_tokens() -> None:
    for length in range(1, 5000):
        size = bucket(length)
        assert length <= size <= max(16, length + 16, length * 5 // 4) and bucket(size) == size
    ladder = sorted({bucket(length) for length in range(1, 1100)})
    assert ladder[:12] == [16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256]
    assert ladder[-6:] == [512, 640, 768, 896, 1024, 1280]  # LLaVA-1.5's 626-760-token prompts: 640 or 768
    assert cache_length(600, 4096) == 640 and cache_length(1100, 1024) == 1280 and cache_length(1000, 1024) == 1024


def test_slot_mask_matches_the_rule_written_out() -> None:
    key_ok = torch.tensor([[False, False, True, True, True, True], [True, True, True, False, True, True]])
    query_slots = torch.tensor([0, 2, 3, 5])
    mask = slot_mask(key_ok, query_slots, "bool", torch.float32)
    assert mask.shape == (2, 1, 4, 6)
    for row in range(2):
        for q, slot in enumerate(query_slots.tolist()):
            for key in range(6):
                expected = (key_ok[row, key].item() and key <= slot) or key == slot
                assert bool(mask[row, 0, q, key]) == expected
    additive = slot_mask(key_ok, query_slots, "additive", torch.float16)
    assert additive.dtype == torch.float16
    assert torch.equal(additive == 0, mask) and (additive[~mask] == torch.finfo(torch.float16).min).all()


def test_static_cache_writes_at_its_slots_and_returns_whole_layers() -> None:
    cache = StaticKV(layers=2, batch=1, kv_heads=2, length=5, head_dim=3, dtype=torch.float32, device=torch.device("cpu"))
    keys, values = torch.ones(1, 2, 2, 3), torch.full((1, 2, 2, 3), 2.0)
    cache.slots = torch.tensor([1, 3])
    got_keys, got_values = cache.update(keys, values, 1, {"cache_position": None})
    assert got_keys.shape == (1, 2, 5, 3)
    assert got_keys[0, 0, :, 0].tolist() == [0, 1, 0, 1, 0] and got_values[0, 1, :, 2].tolist() == [0, 2, 0, 2, 0]
    assert cache.keys[0].abs().sum() == 0  # other layers untouched
    assert cache.nbytes() == 2 * 2 * 1 * 2 * 5 * 3 * 4


def test_plan_reads_greedy_and_sampling_calls_with_transformers_defaults() -> None:
    config = GenerationConfig(eos_token_id=2, pad_token_id=0)
    plan, why = decode_plan(config, {"do_sample": False, "max_new_tokens": 8, "temperature": 0.2})
    assert why is None and plan == DecodePlan(max_new_tokens=8, eos_token_ids=(2,), pad_token_id=0)
    plan, why = decode_plan(config, {"do_sample": True, "max_new_tokens": 8})
    assert why is None and (plan.sample, plan.temperature, plan.top_k, plan.top_p) == (True, 1.0, 50, 1.0)
    plan, _ = decode_plan(config, {"do_sample": True, "temperature": 0.2, "top_p": 0.7, "top_k": 0, "max_new_tokens": 8})
    assert (plan.temperature, plan.top_k, plan.top_p) == (0.2, 0, 0.7)
    assert decode_plan(config, {"max_new_tokens": 8, "streamer": object()})[0].watches


@pytest.mark.parametrize("options, why", [
    ({"num_beams": 3}, "beam search (num_beams=3)"),
    ({"repetition_penalty": 1.3}, "a generation setting beyond greedy decoding (repetition_penalty=1.3)"),
    ({"do_sample": True, "min_p": 0.1}, "sampling with min_p=0.1"),
    ({"do_sample": True, "typical_p": 0.5}, "sampling with typical_p=0.5"),
    ({"logits_processor": LogitsProcessorList()}, "generate option 'logits_processor'"),
    ({"max_new_tokens": None}, "no max_new_tokens"),
])
def test_plan_names_why_a_call_is_not_on_the_fast_path(options, why) -> None:
    plan, reason = decode_plan(GenerationConfig(eos_token_id=2), {"max_new_tokens": 4, **options})
    assert plan is None and reason == why


def test_sampling_keeps_what_transformers_warpers_keep_and_draws_by_the_probabilities() -> None:
    from llava.model.fast_decode import _sample

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 40, generator=generator) * 3
    temperature, top_k, top_p = torch.tensor([0.8]), 7, torch.tensor([0.6])
    warped = TopPLogitsWarper(0.6)(None, TopKLogitsWarper(7)(None, logits / 0.8))
    allowed = torch.isfinite(warped)
    torch.manual_seed(1)
    draws = torch.stack([_sample(logits, temperature, top_k, top_p) for _ in range(4000)])  # [draws, rows]
    for row in range(3):
        counts = torch.bincount(draws[:, row], minlength=40).double()
        assert allowed[row, counts > 0].all()  # only tokens transformers keeps are ever drawn
        expected = warped[row].double().softmax(-1)
        frequent = expected > 0.05
        assert torch.allclose(counts[frequent] / 4000, expected[frequent], atol=0.03)


def test_sample_images_serve_any_batch_size_with_no_two_alike() -> None:
    # The GPU benchmark's batch 32 asked for 32: heights went negative from the 13th image on, and PIL refused.
    from llava.testing.fast_paths import sample_images

    images = sample_images(64)
    assert len(images) == 64 and all(image.width > 0 and image.height > 0 for image in images)
    assert len({(image.size, image.tobytes()) for image in images}) == 64
