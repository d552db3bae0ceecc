"""The shared generation core in-process: request checks, stop strings, stream interval, token budget,
errors that leave the engine working, and a reader that stops early stopping the generation."""

from __future__ import annotations

import base64
import io
import math
import threading

import pytest

from llava.serve.engine import GenerateRequest, ModelEngine
from llava.serve.generation import _held_back

from .conftest import png_bytes

IMAGE = base64.b64encode(png_bytes((40, 30))).decode()
PROMPT = "USER: <image>\nWhat is shown in the image? ASSISTANT:"


def body(**changes) -> dict:
    return {"prompt": PROMPT, "images": [IMAGE], "temperature": 0.0, "max_new_tokens": 12, **changes}


def answer(engine: ModelEngine, **changes) -> str:
    chunks = list(engine.generate_stream(body(**changes)))
    assert chunks and all(chunk.ok for chunk in chunks), chunks
    return chunks[-1].text[len(PROMPT):]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ([1, 2], "the request body must be a JSON object, got list"),
        ({"prompt": ""}, "the prompt is empty"),
        ({"prompt": "hi", "images": "abc"}, "images must be a list of base64-encoded image files"),
        ({"prompt": "hi", "temperature": -1}, "temperature must be a number between 0 and 100, got -1"),
        ({"prompt": "hi", "top_p": 1.5}, "top_p must be a number between 0 and 1, got 1.5"),
        ({"prompt": "hi", "max_new_tokens": 0}, "max_new_tokens must be a number between 1 and 1e"),
        ({"prompt": "hi", "max_new_tokens": 2.5}, "max_new_tokens must be a whole number, got 2.5"),
        ({"prompt": "hi", "stop": 5}, "stop must be a string, got 5"),
    ],
)
def test_bad_requests_are_named(params, expected) -> None:
    with pytest.raises(ValueError, match=expected):
        GenerateRequest.from_params(params)


def test_request_defaults_and_cap() -> None:
    request = GenerateRequest.from_params({"prompt": "hi", "max_new_tokens": 5000})
    assert (request.temperature, request.top_p, request.max_new_tokens) == (1.0, 1.0, 1024)
    assert request.stop is None and request.images == ()


def test_stop_string_cuts_the_answer(braco_engine) -> None:
    full = answer(braco_engine, max_new_tokens=16)
    assert len(full) >= 6, full
    stop = full[3:5]
    cut = answer(braco_engine, max_new_tokens=16, stop=stop)
    assert cut == full[: full.index(stop)]


def test_held_back_suffix() -> None:
    assert _held_back("abc#", "###") == 1 and _held_back("ab##", "###") == 2 and _held_back("abc", "###") == 0
    assert _held_back("anything", None) == 0


def test_stream_interval_sends_fewer_chunks(braco_engine) -> None:
    every = list(braco_engine.generate_stream(body(max_new_tokens=32)))
    coarse = ModelEngine(
        braco_engine.tokenizer, braco_engine.model, braco_engine.image_processor, braco_engine.context_len,
        braco_engine.model_name, stream_interval=4,
    )
    sparse = list(coarse.generate_stream(body(max_new_tokens=32)))
    assert sparse[-1].text == every[-1].text
    assert len(every) >= 5, "the answer should stream in several chunks"
    assert len(sparse) == math.ceil(len(every) / 4)


def test_text_only_prompt(braco_engine) -> None:
    prompt = "USER: Hello there ASSISTANT:"
    chunks = list(braco_engine.generate_stream(body(prompt=prompt, images=[])))
    assert chunks and all(chunk.ok and chunk.text.startswith(prompt) for chunk in chunks)


def test_too_long_a_conversation_gets_a_clear_message(braco_engine) -> None:
    chunks = list(braco_engine.generate_stream(body(prompt=PROMPT + " The quick brown fox" * 400)))
    assert len(chunks) == 1 and chunks[0].error_code == 1
    assert "too long for the model's context of 1024 tokens" in chunks[0].text


def test_a_failing_generation_becomes_an_error_chunk(braco_engine, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(braco_engine.model, "generate", broken)
    chunks = list(braco_engine.generate_stream(body()))
    assert len(chunks) == 1 and chunks[0].error_code == 1
    assert chunks[0].text == "The worker failed to answer (RuntimeError: boom); see the worker log."
    monkeypatch.undo()
    assert answer(braco_engine)  # the engine still works


def test_closing_the_stream_stops_generation(braco_engine, monkeypatch) -> None:
    steps = []
    forward = braco_engine.model.forward

    def counting(*args, **kwargs):
        steps.append(1)
        return forward(*args, **kwargs)

    monkeypatch.setattr(braco_engine.model, "forward", counting)
    stream = braco_engine.generate_stream(body(max_new_tokens=900))  # greedy: runs to the limit unless stopped
    next(stream)
    stream.close()  # returns once the generation thread has ended
    taken = len(steps)
    assert taken < 100, f"the generation went on for {taken} steps after the reader left"
    assert not any(thread.name == "llava-generate" for thread in threading.enumerate())


def test_streamed_answer_equals_plain_generate_and_only_grows(braco_engine) -> None:
    from PIL import Image

    from llava.mm_utils import tokenizer_image_token
    from llava.serve.generation import prepare_pixels

    chunks = list(braco_engine.generate_stream(body(max_new_tokens=32)))
    answers = [chunk.text[len(PROMPT):] for chunk in chunks]
    tokenizer, model = braco_engine.tokenizer, braco_engine.model
    input_ids = tokenizer_image_token(PROMPT, tokenizer, return_tensors="pt").unsqueeze(0)
    image = Image.open(io.BytesIO(png_bytes((40, 30)))).convert("RGB")
    pixels, sizes = prepare_pixels([image], braco_engine.image_processor, model)
    output = model.generate(
        input_ids, images=pixels, image_sizes=sizes, do_sample=False, max_new_tokens=32, pad_token_id=0
    )
    assert answers[-1] == tokenizer.decode(output[0], skip_special_tokens=True)
    # byte-fallback pieces ("\ufffd") are held until the next token settles them, so the text only grows
    assert all(later.startswith(earlier) for earlier, later in zip(answers, answers[1:]))
