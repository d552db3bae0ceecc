"""The splice of visual tokens into the text, checked on the real ``inputs_embeds`` the LLM receives."""

from __future__ import annotations

import argparse

import pytest
import torch

from llava.constants import IGNORE_INDEX, IMAGE_TOKEN_INDEX
from llava.mm_utils import get_anyres_image_grid_shape
from llava.model.context_length import PromptTooLong
from llava.model.language_model.llava_llama import LlavaLlamaForCausalLM

from ...conftest import OFFICIAL_FOURIER_C3S7
from ._support import BRACO, GRID, PROJECTORS, QUESTIONS, left_pad, load, make_images, pixels, prompt_ids

BATCH_PROJECTORS = [
    pytest.param("mlp2x_gelu", id="mlp2x_gelu"),
    pytest.param("braco_c2s5", id="braco_c2s5", marks=BRACO),
]


@pytest.fixture(scope="module")
def loaded(tiny_llava_checkpoint):
    cache = {}

    def get(projector_type: str = "mlp2x_gelu", extra_config=None):
        key = (projector_type, repr(extra_config))
        if key not in cache:
            cache[key] = load(tiny_llava_checkpoint(projector_type, extra_config=extra_config))
        return cache[key]

    return get


def _embed(model: LlavaLlamaForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    return model.get_model().embed_tokens(ids)


@pytest.mark.parametrize("projector_type, extra_config, tokens", PROJECTORS)
def test_spliced_embeds_hold_k_visual_tokens_per_image(loaded, projector_type, extra_config, tokens) -> None:
    tokenizer, model, image_processor, _ = loaded(projector_type, extra_config)
    images = pixels(make_images(2), image_processor, model)
    ids = prompt_ids(tokenizer, "Compare the two images.", num_images=2)
    first, second = (ids == IMAGE_TOKEN_INDEX).nonzero().flatten().tolist()
    labels = ids.clone()
    labels[ids == IMAGE_TOKEN_INDEX] = IGNORE_INDEX

    with torch.no_grad():
        features = model.encode_images(images)
        _, positions, mask, _, embeds, new_labels = model.prepare_inputs_labels_for_multimodal(
            ids[None], None, torch.ones_like(ids)[None], None, labels[None], images
        )
    assert features.shape == (2, tokens, model.config.hidden_size)
    assert embeds.shape == (1, len(ids) - 2 + 2 * tokens, model.config.hidden_size)
    text = _embed(model, ids[ids != IMAGE_TOKEN_INDEX])
    # text before image 1, image 1, text between, image 2, text after
    gap = second - first - 1
    torch.testing.assert_close(embeds[0, :first], text[:first], rtol=0, atol=0)
    torch.testing.assert_close(embeds[0, first : first + tokens], features[0], rtol=0, atol=0)
    torch.testing.assert_close(embeds[0, first + tokens : first + tokens + gap], text[first : first + gap], rtol=0, atol=0)
    start = first + tokens + gap
    torch.testing.assert_close(embeds[0, start : start + tokens], features[1], rtol=0, atol=0)
    torch.testing.assert_close(embeds[0, start + tokens :], text[first + gap :], rtol=0, atol=0)

    visual = torch.zeros(embeds.shape[1], dtype=torch.bool)
    visual[first : first + tokens] = True
    visual[start : start + tokens] = True
    assert (new_labels[0, visual] == IGNORE_INDEX).all()
    assert torch.equal(new_labels[0, ~visual], labels[ids != IMAGE_TOKEN_INDEX])
    assert mask.all() and positions is None


@pytest.mark.parametrize("projector_type", BATCH_PROJECTORS)
@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_batched_logits_equal_per_sample(loaded, monkeypatch, projector_type, padding_side) -> None:
    tokenizer, model, image_processor, _ = loaded(projector_type)
    monkeypatch.setattr(model.config, "tokenizer_padding_side", padding_side, raising=False)
    images = pixels(make_images(3), image_processor, model)
    sequences = [prompt_ids(tokenizer, question) for question in QUESTIONS]
    assert len({len(seq) for seq in sequences}) == 3

    with torch.no_grad():
        singles = [model(seq[None], images=images[i : i + 1]).logits[0] for i, seq in enumerate(sequences)]
        ids, mask = left_pad(sequences, tokenizer.pad_token_id)
        batched = model(ids, attention_mask=mask, images=images).logits
    assert batched.shape[1] == max(single.shape[0] for single in singles)
    for row, single in zip(batched, singles):
        valid = row[-single.shape[0] :] if padding_side == "left" else row[: single.shape[0]]
        torch.testing.assert_close(valid, single, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("projector_type", BATCH_PROJECTORS)
def test_batched_greedy_generate_equals_per_sample(loaded, projector_type) -> None:
    tokenizer, model, image_processor, _ = loaded(projector_type)
    images = pixels(make_images(3), image_processor, model)
    sequences = [prompt_ids(tokenizer, question) for question in QUESTIONS]
    options = {"do_sample": False, "max_new_tokens": 6, "pad_token_id": tokenizer.pad_token_id}

    singles = [model.generate(seq[None], images=images[i : i + 1], **options)[0] for i, seq in enumerate(sequences)]
    ids, mask = left_pad(sequences, tokenizer.pad_token_id)
    batched = model.generate(ids, attention_mask=mask, images=images, **options)
    for row, single in zip(batched, singles):
        assert torch.equal(row[: len(single)], single)
        assert (row[len(single) :] == tokenizer.pad_token_id).all()  # a row that stopped early is padded


def test_positions_mask_labels_and_truncation(loaded, monkeypatch) -> None:
    tokenizer, model, image_processor, _ = loaded()
    images = pixels(make_images(2), image_processor, model)
    sequences = [prompt_ids(tokenizer, QUESTIONS[0]), prompt_ids(tokenizer, QUESTIONS[2])]
    ids, mask = left_pad(sequences, tokenizer.pad_token_id)
    labels = torch.where(mask.bool(), ids, torch.full_like(ids, IGNORE_INDEX))
    lengths = [len(seq) - 1 + GRID * GRID for seq in sequences]

    with torch.no_grad():
        _, positions, new_mask, _, embeds, new_labels = model.prepare_inputs_labels_for_multimodal(
            ids, None, mask, None, labels, images, padding_side="left"
        )
    assert embeds.shape[:2] == (2, max(lengths))
    for row, length in enumerate(lengths):
        assert new_mask[row].sum() == length and new_mask[row, -length:].all()
        assert torch.equal(positions[row, -length:], torch.arange(length))
        assert (new_labels[row, : embeds.shape[1] - length] == IGNORE_INDEX).all()
        assert (embeds[row, : embeds.shape[1] - length] == 0).all()

    # Training (labels given) cuts each sample to tokenizer_model_max_length, as upstream does ...
    monkeypatch.setattr(model.config, "tokenizer_model_max_length", 20, raising=False)
    with torch.no_grad():
        _, positions, new_mask, _, embeds, cut_labels = model.prepare_inputs_labels_for_multimodal(
            ids, None, mask, None, labels, images
        )
    assert embeds.shape[1] == 20 and new_mask.all() and positions is None and cut_labels.shape == (2, 20)
    # ... but an inference input is never cut: the question after the image would be lost (issue 31, V01/V03).
    with torch.no_grad(), pytest.raises(PromptTooLong, match=rf"^the prompt is {max(lengths)} tokens with its visual "
                                                           r"tokens, more than the 20 this model takes \(tokenizer_model_max_length\)"):
        model.prepare_inputs_labels_for_multimodal(ids, None, mask, None, None, images)
    with torch.no_grad(), pytest.raises(PromptTooLong):
        model.generate(ids, attention_mask=mask, images=images, max_new_tokens=2, do_sample=False)


def test_text_only_sample_in_a_mixed_batch(loaded) -> None:
    tokenizer, model, image_processor, _ = loaded()
    images = pixels(make_images(2), image_processor, model)
    with_image = prompt_ids(tokenizer, QUESTIONS[0])
    text_only = tokenizer("USER: Hello there. ASSISTANT:", return_tensors="pt").input_ids[0]
    ids, mask = left_pad([with_image, text_only], tokenizer.pad_token_id)

    with torch.no_grad():
        single_text = model(text_only[None]).logits[0]
        single_image = model(with_image[None], images=images[:1]).logits[0]
        for batch_images in (images[:1], images):  # one image per marker, or upstream's dummy image per text-only row
            batched = model(ids, attention_mask=mask, images=batch_images).logits
            torch.testing.assert_close(batched[0, : single_image.shape[0]], single_image, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(batched[1, : single_text.shape[0]], single_text, rtol=1e-4, atol=1e-5)


def test_list_and_five_dim_images_match_a_batch_tensor(loaded) -> None:
    tokenizer, model, image_processor, _ = loaded()
    images = pixels(make_images(2), image_processor, model)
    ids = prompt_ids(tokenizer, "Compare them.", num_images=2)[None]
    with torch.no_grad():
        expected = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, images)[4]
        as_list = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, list(images))[4]
        as_views = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, images[:, None])[4]
    torch.testing.assert_close(as_list, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(as_views, expected, rtol=1e-5, atol=1e-6)


def test_anyres_spatial_unpad_merge(loaded) -> None:
    pinpoints = [[48, 96], [96, 48], [96, 96]]
    extra = {"mm_patch_merge_type": "spatial_unpad", "image_aspect_ratio": "anyres", "image_grid_pinpoints": pinpoints}
    tokenizer, model, image_processor, _ = loaded("mlp2x_gelu", extra)
    assert model.get_model().image_newline.shape == (model.config.hidden_size,)
    image = make_images(3)[2]  # 24x48: a tall image → a 1x2 grid of 48 px tiles, padded left and right
    processed = pixels([image], image_processor, model)
    cols, rows = get_anyres_image_grid_shape(image.size, pinpoints, 48)
    assert processed.shape == (1, 1 + rows * cols, 3, 48, 48)

    ids = prompt_ids(tokenizer, "What is it?")[None]
    with torch.no_grad():
        embeds = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, processed, [image.size])[4]
        views = model.encode_images(processed[0])
    # base view, then the unpadded grid: rows*GRID feature rows, each with the kept columns plus one newline
    height, width = rows * GRID, cols * GRID
    kept_width = width - 2 * ((width - int(image.size[0] * (height / image.size[1]))) // 2)
    image_tokens = GRID * GRID + height * (kept_width + 1)
    assert embeds.shape[1] == ids.shape[1] - 1 + image_tokens
    start = int((ids[0] == IMAGE_TOKEN_INDEX).nonzero())
    torch.testing.assert_close(embeds[0, start : start + GRID * GRID], views[0], rtol=0, atol=0)
    newline = model.get_model().image_newline
    row_end = start + GRID * GRID + kept_width
    torch.testing.assert_close(embeds[0, row_end], newline, rtol=0, atol=0)


@BRACO
@pytest.mark.parametrize("merge", ["spatial", "spatial_unpad"])
def test_spatial_merges_keep_compressed_views_whole(loaded, merge) -> None:
    """A compressor's views are not a grid: base view's K, then each crop's K in row-major order (+ a newline each)."""
    pinpoints = [[48, 96], [96, 48], [96, 96]]
    extra = {"mm_patch_merge_type": merge, "image_aspect_ratio": "anyres", "image_grid_pinpoints": pinpoints}
    tokenizer, model, image_processor, _ = loaded("braco_c2s5", extra)
    image = make_images(3)[2]  # 24x48 → 1 column x 2 rows, so 3 views
    processed = pixels([image], image_processor, model)
    ids = prompt_ids(tokenizer, "Hi")[None]
    with torch.no_grad():
        embeds = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, processed, [image.size])[4]
        views = model.encode_images(processed[0])  # [3, 9, D]
    if merge == "spatial_unpad":
        newline = model.get_model().image_newline
        views = torch.cat([views, newline.expand(views.shape[0], 1, -1)], dim=1)
    start = int((ids[0] == IMAGE_TOKEN_INDEX).nonzero())
    assert embeds.shape[1] == ids.shape[1] - 1 + views.shape[0] * views.shape[1]
    torch.testing.assert_close(embeds[0, start : start + views.shape[0] * views.shape[1]], views.flatten(0, 1), rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------ bad input


def test_image_without_marker(loaded) -> None:
    tokenizer, model, image_processor, _ = loaded()
    images = pixels(make_images(1), image_processor, model)
    ids = tokenizer("USER: What is this? ASSISTANT:", return_tensors="pt").input_ids
    with pytest.raises(ValueError, match=r"1 image\(s\) were given but no prompt contains an <image> marker"):
        model.generate(ids, images=images, max_new_tokens=2)


def test_more_markers_than_images(loaded) -> None:
    tokenizer, model, image_processor, _ = loaded()
    images = pixels(make_images(1), image_processor, model)
    ids = prompt_ids(tokenizer, "Compare them.", num_images=2)[None]
    with pytest.raises(ValueError, match=r"the prompts hold 2 <image> markers but only 1 image\(s\) were given"):
        model.generate(ids, images=images, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"the prompts hold 2 <image> markers but no images were given"):
        model.generate(ids, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"3 images were given for 2 <image> markers"):
        model(ids, images=pixels(make_images(3), image_processor, model))


def test_initialize_vision_modules_writes_config_keys(tiny_base_llm, tiny_tower_dir, tiny_projector_checkpoint) -> None:
    model = LlavaLlamaForCausalLM.from_pretrained(tiny_base_llm)
    assert model.get_vision_tower() is None
    args = argparse.Namespace(
        vision_tower=str(tiny_tower_dir), mm_vision_select_layer=-2, mm_vision_select_feature="patch",
        mm_patch_merge_type="flat", mm_projector_type="mlp2x_gelu", mm_braco_unused=None,
        pretrain_mm_mlp_adapter=str(tiny_projector_checkpoint("mlp2x_gelu") / "mm_projector.bin"),
    )
    model.get_model().initialize_vision_modules(args)
    config = model.config
    assert (config.mm_vision_tower, config.use_mm_proj, config.mm_projector_type) == (str(tiny_tower_dir), True, "mlp2x_gelu")
    assert (config.mm_hidden_size, config.mm_vision_select_layer, config.mm_vision_select_feature) == (32, -2, "patch")
    assert config.mm_patch_merge_type == "flat" and not hasattr(config, "mm_braco_unused")
    stored = torch.load(args.pretrain_mm_mlp_adapter, weights_only=True)
    torch.testing.assert_close(model.get_model().mm_projector[0].weight, stored["model.mm_projector.0.weight"])

    broken = argparse.Namespace(**{**vars(args), "mm_projector_type": "mlp3x_gelu"})
    fresh = LlavaLlamaForCausalLM.from_pretrained(tiny_base_llm)
    with pytest.raises(ValueError, match=r"missing keys: \['4\.bias', '4\.weight'\]; unexpected keys: none"):
        fresh.get_model().initialize_vision_modules(broken)


@BRACO
def test_initialize_vision_modules_copies_official_fourier_keys(tiny_base_llm, tiny_tower_dir) -> None:
    model = LlavaLlamaForCausalLM.from_pretrained(tiny_base_llm)
    args = argparse.Namespace(
        vision_tower=str(tiny_tower_dir), mm_vision_select_layer=-2, mm_vision_select_feature="patch",
        mm_patch_merge_type="flat", mm_projector_type="fourier_mlp2x_gelu", pretrain_mm_mlp_adapter=None,
        **{**OFFICIAL_FOURIER_C3S7, "mm_fourier_C": 2, "mm_fourier_spatial_keep": 3},
    )
    model.get_model().initialize_vision_modules(args)
    assert model.config.mm_fourier_C == 2 and model.config.mm_fourier_spatial_keep == 3
    assert model.config.mm_fourier_temp_steps == 4677
    images = torch.zeros(1, 3, 48, 48)
    assert model.encode_images(images).shape == (1, 4 + 3, model.config.hidden_size)


def test_training_loss_reaches_the_projector(tiny_llava_checkpoint) -> None:
    tokenizer, model, image_processor, _ = load(tiny_llava_checkpoint("mlp2x_gelu"))
    model.train()
    images = pixels(make_images(2), image_processor, model)
    sequences = [prompt_ids(tokenizer, question) for question in QUESTIONS[:2]]
    ids, mask = left_pad(sequences, tokenizer.pad_token_id)
    labels = torch.where(mask.bool() & (ids != IMAGE_TOKEN_INDEX), ids, torch.full_like(ids, IGNORE_INDEX))
    loss = model(ids, attention_mask=mask, labels=labels, images=images).loss
    assert torch.isfinite(loss)
    loss.backward()
    assert model.get_model().mm_projector[0].weight.grad.abs().sum() > 0
    assert all(param.grad is None for param in model.get_vision_tower().parameters())


def test_image_newline_is_initialised(tiny_tower_dir) -> None:
    from llava.model.language_model.llava_llama import LlavaConfig, LlavaLlamaForCausalLM

    hidden = 256
    config = LlavaConfig(
        vocab_size=64, hidden_size=hidden, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        mm_vision_tower=str(tiny_tower_dir), mm_hidden_size=32, mm_projector_type="mlp2x_gelu",
        mm_patch_merge_type="spatial_unpad",
    )
    for seed in range(3):
        torch.manual_seed(seed)
        newline = LlavaLlamaForCausalLM(config).get_model().image_newline.detach()
        assert torch.isfinite(newline).all()
        # N(0, 1/hidden): the sample std of 256 draws lies well within [0.5, 1.5] / sqrt(hidden)
        assert 0.5 < float(newline.std()) * hidden**0.5 < 1.5
