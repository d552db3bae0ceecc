"""Image preprocessing, prompt tokenisation with image markers, model names and stopping criteria.

Tokenizers are built here: a word-level tokenizer whose ids can be written down by hand, and a
sentencepiece BPE model loaded as a Llama tokenizer, which behaves like the real Vicuna tokenizer
(BOS added, "▁" word prefixes, byte fallback).
"""

from __future__ import annotations

import base64
import random
import time
from io import BytesIO
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import CLIPImageProcessor, LlamaTokenizer, PreTrainedTokenizerFast, StoppingCriteriaList

from llava import mm_utils
from llava.mm_utils import (
    ImageUnreadable,
    KeywordsStoppingCriteria,
    expand2square,
    get_anyres_image_grid_shape,
    get_model_name_from_path,
    load_image,
    load_image_from_base64,
    process_images,
    select_best_resolution,
    tokenizer_image_token,
)

from .http_server import Handled, scripted_server

IMAGE = -200  # upstream IMAGE_TOKEN_INDEX

WORDS = ["<unk>", "<s>", "</s>", "USER:", "ASSISTANT:", "What", "is", "this?", "###", "a", "cat", "hi", "dog"]
VOCAB = {word: index for index, word in enumerate(WORDS)}
BOS, EOS = VOCAB["<s>"], VOCAB["</s>"]

# CLIP normalisation (reference section 5).
CLIP_MEAN = np.array([0.48145466, 0.4578275, 0.40821073])
CLIP_STD = np.array([0.26862954, 0.26130258, 0.27577711])


def _word_level(add_bos: bool) -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.WordLevel(vocab=VOCAB, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece()
    if add_bos:
        backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", BOS)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.fixture(scope="module")
def word_tok() -> PreTrainedTokenizerFast:
    return _word_level(add_bos=True)


@pytest.fixture(scope="module")
def word_tok_no_bos() -> PreTrainedTokenizerFast:
    return _word_level(add_bos=False)


@pytest.fixture(scope="module")
def llama_tok(tmp_path_factory: pytest.TempPathFactory) -> LlamaTokenizer:
    import sentencepiece

    rng = random.Random(0)
    words = (
        "the a cat dog sat on mat what is this image show red blue green car tree house sky "
        "USER ASSISTANT What Describe chat between curious human assistant"
    ).split()
    sentences = [
        " ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + rng.choice([".", "?", "!", ":"])
        for _ in range(300)
    ]
    directory = tmp_path_factory.mktemp("llama_tok")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_prefix=str(directory / "tokenizer"),
        vocab_size=300,
        model_type="bpe",
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        byte_fallback=True,
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    # Vicuna's tokenizer_config.json sets add_bos_token; pass it the same way.
    return LlamaTokenizer.from_pretrained(str(directory), add_bos_token=True)


def _split_at_images(ids: list[int]) -> list[list[int]]:
    segments: list[list[int]] = [[]]
    for token in ids:
        if token == IMAGE:
            segments.append([])
        else:
            segments[-1].append(token)
    return segments


def _same_words(a: str, b: str) -> bool:
    return a.split() == b.split()


# ---------------------------------------------------------------------- tokenizer_image_token


def test_word_level_ids_with_bos(word_tok) -> None:
    ids = tokenizer_image_token("USER: <image>\nWhat is this? ASSISTANT:", word_tok)
    v = VOCAB
    assert ids == [BOS, v["USER:"], IMAGE, v["What"], v["is"], v["this?"], v["ASSISTANT:"]]


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("<image>\nhi", [BOS, IMAGE, VOCAB["hi"]]),
        ("hi <image>", [BOS, VOCAB["hi"], IMAGE]),
        ("<image><image> cat", [BOS, IMAGE, IMAGE, VOCAB["cat"]]),
        ("a <image> cat <image> dog", [BOS, VOCAB["a"], IMAGE, VOCAB["cat"], IMAGE, VOCAB["dog"]]),
        ("a cat", [BOS, VOCAB["a"], VOCAB["cat"]]),
    ],
)
def test_word_level_marker_positions(word_tok, prompt: str, expected: list[int]) -> None:
    assert tokenizer_image_token(prompt, word_tok) == expected


def test_word_level_without_bos(word_tok_no_bos) -> None:
    ids = tokenizer_image_token("<image>\nWhat is this?", word_tok_no_bos)
    assert ids == [IMAGE, VOCAB["What"], VOCAB["is"], VOCAB["this?"]]
    ids = tokenizer_image_token("a <image> cat", word_tok_no_bos)
    assert ids == [VOCAB["a"], IMAGE, VOCAB["cat"]]


def test_custom_image_index_and_tensor_output(word_tok) -> None:
    ids = tokenizer_image_token("a <image> cat", word_tok, image_token_index=-7, return_tensors="pt")
    assert isinstance(ids, torch.Tensor)
    assert ids.dtype == torch.long
    assert ids.tolist() == [BOS, VOCAB["a"], -7, VOCAB["cat"]]


def test_unknown_return_tensors_is_rejected(word_tok) -> None:
    with pytest.raises(ValueError, match="'np'"):
        tokenizer_image_token("a <image>", word_tok, return_tensors="np")


VICUNA_PROMPT = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives "
    "helpful, detailed, and polite answers to the user's questions. USER: <image>\nWhat is this? ASSISTANT:"
)


@pytest.mark.parametrize(
    "prompt",
    [
        VICUNA_PROMPT,
        "<image>\nDescribe the image.",
        "the cat <image> and the dog <image> sat on a mat.",
        "What is this?",
    ],
)
def test_llama_one_bos_and_markers(llama_tok, prompt: str) -> None:
    ids = tokenizer_image_token(prompt, llama_tok)
    assert ids[0] == llama_tok.bos_token_id == 1
    assert ids.count(1) == 1
    assert ids.count(IMAGE) == prompt.count("<image>")
    chunks = prompt.split("<image>")
    segments = _split_at_images(ids[1:])
    assert len(segments) == len(chunks)
    for segment, chunk in zip(segments, chunks):
        # Each chunk is tokenised on its own (the ids a joint tokenisation gives can differ).
        assert segment == llama_tok(chunk, add_special_tokens=False).input_ids
        assert _same_words(llama_tok.decode(segment, skip_special_tokens=True), chunk)


def test_llama_without_bos(tmp_path, llama_tok) -> None:
    llama_tok.save_pretrained(tmp_path)
    no_bos = LlamaTokenizer.from_pretrained(str(tmp_path), add_bos_token=False)
    ids = tokenizer_image_token(VICUNA_PROMPT, no_bos)
    assert 1 not in ids
    assert ids.count(IMAGE) == 1
    before, after = VICUNA_PROMPT.split("<image>")
    first, second = _split_at_images(ids)
    assert _same_words(no_bos.decode(first), before)
    assert _same_words(no_bos.decode(second), after)


def test_word_level_round_trip(word_tok) -> None:
    prompt = "USER: <image>\nWhat is this? ASSISTANT: a cat"
    ids = tokenizer_image_token(prompt, word_tok)
    segments = _split_at_images(ids)
    decoded = [word_tok.decode(segment, skip_special_tokens=True) for segment in segments]
    assert [d.split() for d in decoded] == [c.split() for c in prompt.split("<image>")]


# ---------------------------------------------------------------------- images


def test_expand2square_wide_and_tall() -> None:
    red = (255, 0, 0)
    fill = (1, 2, 3)
    wide = expand2square(Image.new("RGB", (40, 20), red), fill)
    assert wide.size == (40, 40)
    # A 20-pixel-high image centred in 40 rows occupies rows 10..29.
    assert wide.getpixel((0, 9)) == fill
    assert wide.getpixel((0, 10)) == red
    assert wide.getpixel((39, 29)) == red
    assert wide.getpixel((39, 30)) == fill

    tall = expand2square(Image.new("RGB", (20, 40), red), fill)
    assert tall.size == (40, 40)
    assert tall.getpixel((9, 0)) == fill
    assert tall.getpixel((10, 0)) == red
    assert tall.getpixel((29, 39)) == red
    assert tall.getpixel((30, 39)) == fill

    square = Image.new("RGB", (8, 8), red)
    assert expand2square(square, fill) is square


@pytest.fixture(scope="module")
def processor() -> CLIPImageProcessor:
    return CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})


def test_process_images_pad(processor) -> None:
    images = [Image.new("RGB", (64, 16), (0, 0, 0)), Image.new("RGB", (20, 30), (255, 255, 255))]
    out = process_images(images, processor, SimpleNamespace(image_aspect_ratio="pad"))
    assert isinstance(out, torch.Tensor)
    assert out.shape == (2, 3, 32, 32)
    # The top rows of the wide image are padding filled with int(255 * mean) = (122, 116, 104).
    expected = (np.array([122, 116, 104]) / 255 - CLIP_MEAN) / CLIP_STD
    np.testing.assert_allclose(out[0, :, 0, 0].numpy(), expected, atol=1e-2)
    # Its middle rows are the black image.
    np.testing.assert_allclose(out[0, :, 16, 16].numpy(), -CLIP_MEAN / CLIP_STD, atol=1e-2)


def test_process_images_without_aspect_ratio(processor) -> None:
    images = [Image.new("RGB", (64, 16)), Image.new("RGB", (20, 30))]
    for cfg in (SimpleNamespace(), SimpleNamespace(image_aspect_ratio="square"), None):
        assert process_images(images, processor, cfg).shape == (2, 3, 32, 32)


def test_select_best_resolution() -> None:
    candidates = [(32, 64), (64, 32), (64, 64)]
    # 80x40 keeps 64x32 = 2048 pixels in (64, 32) and in (64, 64); (64, 32) wastes less.
    assert select_best_resolution((80, 40), candidates) == (64, 32)
    # 40x40 fits (64, 64) without losing detail (1600 pixels), the others keep 32x32 = 1024.
    assert select_best_resolution((40, 40), candidates) == (64, 64)
    # Equal detail: the candidate with less padding wins whatever the order.
    assert select_best_resolution((80, 40), [(64, 64), (64, 32)]) == (64, 32)
    assert get_anyres_image_grid_shape((80, 40), "[[32, 64], [64, 32], [64, 64]]", 32) == (2, 1)


@pytest.mark.parametrize("mode", ["anyres", "anyres_max_9"])
def test_process_images_anyres(processor, mode: str) -> None:
    cfg = SimpleNamespace(image_aspect_ratio=mode, image_grid_pinpoints="[[32, 64], [64, 32], [64, 64]]")
    same = process_images([Image.new("RGB", (80, 40)), Image.new("RGB", (90, 44))], processor, cfg)
    assert isinstance(same, torch.Tensor)
    assert same.shape == (2, 3, 3, 32, 32)  # base view + 2x1 grid
    cfg.image_grid_pinpoints = [[32, 64], [64, 32], [64, 64]]
    mixed = process_images([Image.new("RGB", (80, 40)), Image.new("RGB", (40, 40))], processor, cfg)
    assert isinstance(mixed, list)
    assert [tuple(t.shape) for t in mixed] == [(3, 3, 32, 32), (5, 3, 32, 32)]


def test_process_images_rejects_bad_pinpoints(processor) -> None:
    cfg = SimpleNamespace(image_aspect_ratio="anyres", image_grid_pinpoints="(1x1),(2x2)")
    with pytest.raises(ValueError, match="image_grid_pinpoints"):
        process_images([Image.new("RGB", (8, 8))], processor, cfg)


def test_load_image_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jpg"
    with pytest.raises(ValueError, match="missing.jpg"):
        load_image(missing)
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"this is not an image")
    with pytest.raises(ValueError, match="corrupt.png"):
        load_image(str(corrupt))


def test_load_image_converts_to_rgb(tmp_path: Path) -> None:
    path = tmp_path / "rgba.png"
    Image.new("RGBA", (5, 4), (1, 2, 3, 4)).save(path)
    image = load_image(path)
    assert image.mode == "RGB"
    assert image.size == (5, 4)


def test_load_image_from_base64() -> None:
    buffer = BytesIO()
    Image.new("RGB", (3, 2), (9, 8, 7)).save(buffer, format="PNG")
    image = load_image_from_base64(base64.b64encode(buffer.getvalue()).decode())
    assert image.size == (3, 2)
    assert image.getpixel((0, 0)) == (9, 8, 7)


# ---------------------------------------------------------------------- model names


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("liuhaotian/llava-v1.5-7b", "llava-v1.5-7b"),
        ("liuhaotian/llava-v1.5-7b/", "llava-v1.5-7b"),
        ("./checkpoints/llava-v1.5-13b-lora/checkpoint-500", "llava-v1.5-13b-lora_checkpoint-500"),
        ("/abs/run/checkpoint-12/", "run_checkpoint-12"),
        ("llava-local", "llava-local"),
        ("checkpoint-3", "checkpoint-3"),
    ],
)
def test_get_model_name_from_path(path: str, name: str) -> None:
    assert get_model_name_from_path(path) == name


def test_get_model_name_from_empty_path() -> None:
    with pytest.raises(ValueError):
        get_model_name_from_path("/")


# ---------------------------------------------------------------------- stopping


def _rows(*rows: list[str]) -> torch.Tensor:
    return torch.tensor([[VOCAB[word] for word in row] for row in rows])


def test_keywords_stop_per_row_on_eos(word_tok) -> None:
    prompt = _rows(["<s>", "a", "cat"], ["<s>", "a", "dog"])
    criteria = KeywordsStoppingCriteria(["</s>"], word_tok, prompt)
    step = _rows(["<s>", "a", "cat", "hi"], ["<s>", "a", "dog", "cat"])
    assert criteria(step, None).tolist() == [False, False]
    step = _rows(["<s>", "a", "cat", "hi", "</s>"], ["<s>", "a", "dog", "cat", "dog"])
    done = StoppingCriteriaList([criteria])(step, None)
    assert done.dtype == torch.bool
    assert done.tolist() == [True, False]


def test_keywords_stop_on_hashes_but_not_in_prompt(word_tok) -> None:
    prompt = _rows(["<s>", "hi", "###", "ASSISTANT:"], ["<s>", "hi", "###", "ASSISTANT:"])
    criteria = KeywordsStoppingCriteria(["###"], word_tok, prompt)
    step = _rows(["<s>", "hi", "###", "ASSISTANT:", "a"], ["<s>", "hi", "###", "ASSISTANT:", "cat"])
    assert criteria(step, None).tolist() == [False, False]
    step = _rows(
        ["<s>", "hi", "###", "ASSISTANT:", "a", "cat"],
        ["<s>", "hi", "###", "ASSISTANT:", "cat", "###"],
    )
    assert criteria(step, None).tolist() == [False, True]


def test_keywords_ignore_a_prompt_ending_in_a_keyword(word_tok) -> None:
    # A two-token keyword makes the decoded tail two tokens long; only the new one may be read.
    prompt = _rows(["<s>", "hi", "###"])
    criteria = KeywordsStoppingCriteria(["###", "a cat"], word_tok, prompt)
    assert criteria(_rows(["<s>", "hi", "###", "a"]), None).tolist() == [False]
    assert criteria(_rows(["<s>", "hi", "###", "a", "cat"]), None).tolist() == [True]


def test_keywords_with_new_tokens_only(word_tok) -> None:
    # generate() called with inputs_embeds returns only the new tokens.
    prompt = _rows(["<s>", "hi", "###", "ASSISTANT:"])
    criteria = KeywordsStoppingCriteria(["###", "</s>"], word_tok, prompt)
    assert criteria(_rows(["a"]), None).tolist() == [False]
    assert criteria(_rows(["a", "cat"]), None).tolist() == [False]
    assert criteria(_rows(["a", "cat", "###"]), None).tolist() == [True]


def test_keywords_text_match_with_llama(llama_tok) -> None:
    prompt = torch.tensor([tokenizer_image_token(VICUNA_PROMPT, llama_tok)] * 2)
    criteria = KeywordsStoppingCriteria(["###"], llama_tok, prompt.clamp(min=0))
    answers = ["the cat sat.###", "the dog sat."]
    new = [llama_tok(text, add_special_tokens=False).input_ids for text in answers]
    width = max(len(ids) for ids in new)
    rows = [ids + [llama_tok.convert_tokens_to_ids("▁")] * (width - len(ids)) for ids in new]
    # Feed the answers token by token, as generate() does.
    done = torch.zeros(2, dtype=torch.bool)
    for step in range(1, width + 1):
        current = torch.cat([prompt.clamp(min=0), torch.tensor(rows)[:, :step]], dim=1)
        done |= criteria(current, None)
    assert done.tolist() == [True, False]


def test_keywords_must_be_non_empty(word_tok) -> None:
    with pytest.raises(ValueError):
        KeywordsStoppingCriteria([], word_tok, torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError):
        KeywordsStoppingCriteria([""], word_tok, torch.zeros(1, 2, dtype=torch.long))


# ---------------------------------------------------------------------- images from URLs (through llava.net)


def _png_bytes() -> bytes:
    buffer = BytesIO()
    Image.new("RGB", (6, 3), (10, 20, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_load_image_from_a_url_follows_a_same_origin_redirect() -> None:
    def handle(handled: Handled) -> None:
        if handled.seen.path == "/old.png":
            handled.reply(302, headers={"Location": "/new.png"})
        else:
            handled.reply(200, _png_bytes(), {"Content-Type": "image/png"})

    with scripted_server(handle) as server:
        image = load_image(server.url + "/old.png")
    assert image.mode == "RGB" and image.size == (6, 3) and image.getpixel((0, 0)) == (10, 20, 30)
    assert [seen.path for seen in server.requests] == ["/old.png", "/new.png"]


def test_load_image_from_a_url_refuses_a_cross_origin_redirect_in_one_sentence() -> None:
    with scripted_server(lambda handled: handled.reply(200, _png_bytes())) as elsewhere:
        with scripted_server(lambda handled: handled.reply(302, headers={"Location": elsewhere.url + "/x.png"})) as server:
            with pytest.raises(ImageUnreadable, match=r"^could not load an image from .*/a\.png' \(.*redirected to "
                                                      r"another origin .*the redirect was not followed.*\)$") as caught:
                load_image(server.url + "/a.png")
    assert elsewhere.requests == []  # nothing of the request went to the other origin
    assert "\n" not in str(caught.value)


def test_load_image_from_a_hanging_url_stops_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(handled: Handled) -> None:
        handled.start(200)
        for _ in range(40):  # one byte every 0.25 s: a per-read timeout would never trip
            handled.write(b"x")
            time.sleep(0.25)

    monkeypatch.setattr(mm_utils, "URL_DEADLINE", 1.0)
    with scripted_server(hang) as server:
        start = time.monotonic()
        with pytest.raises(ImageUnreadable, match=r"^could not load an image from .* \(.*did not answer within 1 s\)$"):
            load_image(server.url + "/slow.png")
    assert time.monotonic() - start < 2.5


def test_load_image_from_a_url_names_an_error_status_and_a_non_image() -> None:
    def handle(handled: Handled) -> None:
        if handled.seen.path == "/missing.png":
            handled.reply(404, b"not found")
        else:
            handled.reply(200, b"<html>not an image</html>", {"Content-Type": "text/html"})

    with scripted_server(handle) as server:
        with pytest.raises(ImageUnreadable, match=r"missing\.png' \(HTTP 404\)$"):
            load_image(server.url + "/missing.png")
        with pytest.raises(ImageUnreadable, match=r"the image at .*page\.png' is not a readable image"):
            load_image(server.url + "/page.png")
