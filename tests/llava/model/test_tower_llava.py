"""A whole tiny LLaVA on a SigLIP / SigLIP2-style tower: build_tiny_llava_checkpoint → load_pretrained_model → generate.

The visual tokens must be the projector applied to the tower model's own ``hidden_states[-2]`` with nothing dropped
(no CLS in SigLIP), computed here independently from the saved tower directory.
"""

from __future__ import annotations

import pytest
import torch
from transformers import SiglipVisionModel

from llava.constants import IMAGE_TOKEN_INDEX
from llava.model.multimodal_encoder import SiglipVisionTower
from llava.testing.tiny import build_tiny_llava_checkpoint, build_tiny_vision_tower

from ._support import BRACO, load, make_images, pixels, prompt_ids

#: id → (tiny tower kind, builder kwargs, grid side)
SIGLIP_TOWERS = {
    "siglip-9x9": ("siglip", {"image_size": 54, "patch_size": 6}, 9),
    "siglip2-8x8": ("siglip2", {}, 8),
}


@pytest.fixture(scope="module")
def siglip_llava(tiny_root, tiny_tokenizer_dir):
    cache: dict = {}

    def get(key: str, projector_type: str = "mlp2x_gelu"):
        if (key, projector_type) not in cache:
            kind, kwargs, _ = SIGLIP_TOWERS[key]
            tower_dir = tiny_root / f"tower-{key}"
            if not tower_dir.exists():
                build_tiny_vision_tower(kind, tower_dir, **kwargs)
            checkpoint = build_tiny_llava_checkpoint(
                tiny_root / f"llava-tiny-{key}-{projector_type}", tower_dir, tiny_tokenizer_dir, projector_type=projector_type
            )
            cache[key, projector_type] = (tower_dir, *load(checkpoint))
        return cache[key, projector_type]

    return get


@pytest.mark.parametrize("key", list(SIGLIP_TOWERS))
def test_siglip_llava_loads_splices_and_generates(siglip_llava, key) -> None:
    side = SIGLIP_TOWERS[key][2]
    tower_dir, tokenizer, model, image_processor, _ = siglip_llava(key)
    tower = model.get_vision_tower()
    assert isinstance(tower, SiglipVisionTower) and tower.is_loaded and model.config.mm_hidden_size == 32
    images = pixels(make_images(1), image_processor, model)
    assert images.shape == (1, 3, tower.image_size, tower.image_size)

    reference = SiglipVisionModel.from_pretrained(tower_dir).eval()
    with torch.no_grad():
        hidden = reference(images.float(), output_hidden_states=True).hidden_states[-2]
        expected = model.get_model().mm_projector(hidden.to(model.dtype))
        features = model.encode_images(images)
    assert features.shape == (1, side * side, model.config.hidden_size)
    torch.testing.assert_close(features, expected)

    ids = prompt_ids(tokenizer, "What is in the image?")
    with torch.no_grad():
        embeds = model.prepare_inputs_labels_for_multimodal(ids[None], None, None, None, None, images)[4]
        out = model.generate(ids[None], images=images, do_sample=False, max_new_tokens=4, min_new_tokens=4)
    assert embeds.shape[1] == len(ids) - 1 + side * side
    marker = int((ids == IMAGE_TOKEN_INDEX).nonzero())
    torch.testing.assert_close(embeds[0, marker : marker + side * side], features[0], rtol=0, atol=0)
    assert out.shape == (1, 4)


@BRACO
def test_siglip_llava_with_a_braco_budget(siglip_llava) -> None:
    _, tokenizer, model, image_processor, _ = siglip_llava("siglip-9x9", "braco_c2s5")
    images = pixels(make_images(3), image_processor, model)
    with torch.no_grad():
        features = model.encode_images(images)
        out = model.generate(prompt_ids(tokenizer, "Describe it.")[None], images=images[:1], do_sample=False, max_new_tokens=3,
                             min_new_tokens=3)
    assert features.shape == (3, 4 + 5, model.config.hidden_size) and out.shape == (1, 3)
