"""Asking a loaded LLaVA for its hidden states leaves its image features alone (a report under issue 32: on a tiny
checkpoint the first forward with ``output_hidden_states=True`` after loading gave other image features than later
identical calls).

The cause was transformers' output-capturing hooks: the LLM's first capturing call installed a second set on the
vision tower, which had its own from its first image, so from then on ``hidden_states[-2]`` of the tower was its last
layer (llava/model/output_hooks.py). The reference for the features is a separately loaded transformers
``CLIPVisionModel`` of the same tower directory: its own ``hidden_states[-2]`` without the CLS token.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import CLIPVisionModel

from llava.model.reducers import resolve_reducer
from llava.testing.tiny import build_tiny_llava_checkpoint

from ._support import QUESTIONS, load, make_images, pixels, prompt_ids

LAYERS = 4


def _installed(name: str) -> bool:
    try:
        resolve_reducer(name)
    except ValueError:
        return False
    return True


REDUCERS = [None, pytest.param("fastv_k2_r50", marks=pytest.mark.skipif(not _installed("fastv_k2_r50"), reason="fastv not installed"))]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny_tower_dir, tiny_tokenizer_dir) -> Path:
    root = Path(tmp_path_factory.mktemp("capture"))
    return build_tiny_llava_checkpoint(root / "llava-capture", tiny_tower_dir, tiny_tokenizer_dir, layers=LAYERS)


def _reference_features(tower_dir: Path, images: torch.Tensor) -> torch.Tensor:
    """``hidden_states[-2]`` (CLS dropped) of the tower directory's model, loaded on its own."""
    with torch.inference_mode():
        return CLIPVisionModel.from_pretrained(tower_dir)(images, output_hidden_states=True).hidden_states[-2][:, 1:]


def _forward(model, ids, images, **kwargs):
    """The forward's output and the visual tokens the projector sent (its output, recorded)."""
    sent = []
    handle = model.get_model().mm_projector.register_forward_hook(lambda module, args, out: sent.append(out))
    try:
        with torch.inference_mode():
            out = model(input_ids=ids, images=images, **kwargs)
    finally:
        handle.remove()
    return out, sent[0]


@pytest.mark.parametrize("reducer", REDUCERS)
@pytest.mark.parametrize("switch", ["output_hidden_states", "output_attentions"])
def test_asking_for_captured_outputs_leaves_the_image_features_alone(checkpoint, tiny_tower_dir, reducer, switch):
    tokenizer, model, image_processor, _ = load(checkpoint, reducer=reducer)  # fresh: the fault came on the first call
    ids = prompt_ids(tokenizer, QUESTIONS[0])[None]
    images = pixels(make_images(1), image_processor, model)
    tower = model.get_model().get_vision_tower()
    reference = _reference_features(tiny_tower_dir, images)

    with torch.inference_mode():
        before = tower(images)
    first, first_tokens = _forward(model, ids, images, **{switch: True})
    second, second_tokens = _forward(model, ids, images, **{switch: True})
    plain, plain_tokens = _forward(model, ids, images)
    with torch.inference_mode():
        after = tower(images)

    assert torch.equal(before, reference) and torch.equal(after, reference)
    assert torch.equal(first_tokens, second_tokens) and torch.equal(first_tokens, plain_tokens)
    assert torch.equal(first.logits, second.logits) and torch.equal(first.logits, plain.logits)
    if switch == "output_hidden_states":  # the LLM's own: the embeddings and each layer's output, once each
        assert len(first.hidden_states) == LAYERS + 1 and all(map(torch.equal, first.hidden_states, second.hidden_states))
