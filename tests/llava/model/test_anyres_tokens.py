"""AnyRes visual-token counts of real (tiny, full-resolution) models against LLaVA-NeXT's published counts.

The towers are CLIP-336/14 (24x24 per view) and SigLIP-384/14 (27x27, no CLS) at their real input sides with one
tiny layer, so every image goes through the real anyres preprocessing and merge; the expected numbers are the counts
table of the LLaVA-1.6 five-canvas scheme (reference llava-next-interface §1) and NeXT's anyres_max_9 examples (§2),
not values computed by the code under test. Compressed views: the budget is per view (80 = 5 x 16, 20 = 5 x 4).
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from llava.mm_utils import parse_grid_pinpoints, process_images
from llava.visual_tokens import visual_token_count

from ._support import BRACO, load

CLIP_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
SIGLIP_PINPOINTS = [[w * 384 // 336, h * 384 // 336] for w, h in CLIP_PINPOINTS]

#: image size → (views, CLIP flat/spatial, SigLIP flat/spatial, CLIP spatial_unpad, SigLIP spatial_unpad).
COUNTS = {
    (1024, 1024): (5, 2880, 3645, 2928, 3699),
    (800, 600): (5, 2880, 3645, 2340, 2929),
    (1920, 1080): (5, 2880, 3645, 1948, 2379),
    (500, 1500): (4, 2304, 2916, 2376, 2997),
    (300, 200): (3, 1728, 2187, 976, 1233),
}
TOWERS = {"clip": (336, 24, CLIP_PINPOINTS), "siglip": (384, 27, SIGLIP_PINPOINTS)}


def _image(size: tuple[int, int]) -> Image.Image:
    image = Image.new("RGB", size, (90, 140, 200))
    image.paste((250, 250, 250), (size[0] // 4, size[1] // 4, size[0] // 2, size[1] // 2))
    return image


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_tokenizer_dir):
    """``get(tower, projector)`` → a loaded tiny LLaVA on a one-layer full-resolution tower, built with spatial_unpad
    (so it has image_newline); tests switch ``mm_patch_merge_type`` and the aspect settings on its config."""
    from llava.testing.tiny import build_tiny_clip_tower, build_tiny_llava_checkpoint, build_tiny_siglip_tower

    root = tmp_path_factory.mktemp("anyres_tokens")
    towers = {
        "clip": build_tiny_clip_tower(root / "clip336", image_size=336, patch_size=14, hidden=16, layers=1),
        "siglip": build_tiny_siglip_tower(root / "siglip384", image_size=384, patch_size=14, hidden=16, layers=1),
    }
    cache = {}

    def get(tower: str, projector: str):
        if (tower, projector) not in cache:
            side, _, pinpoints = TOWERS[tower]
            extra = {"mm_patch_merge_type": "spatial_unpad", "image_aspect_ratio": "anyres", "image_grid_pinpoints": pinpoints}
            path = build_tiny_llava_checkpoint(
                root / f"llava-{tower}-{projector}", towers[tower], tiny_tokenizer_dir, projector_type=projector,
                extra_config=extra, hidden=32, layers=1, heads=2,
            )
            cache[tower, projector] = load(path)
        return cache[tower, projector]

    return get


def _tokens(model, processor, sizes, merge: str) -> list[int]:
    model.config.mm_patch_merge_type = merge
    images = [_image(size) for size in sizes]
    pixels = [process_images([image], processor, model.config)[0] for image in images]
    with torch.no_grad():
        features = model.image_features(pixels, [image.size for image in images])
    return [feature.shape[0] for feature in features]


@pytest.mark.parametrize("tower", ["clip", "siglip"])
def test_grid_keeping_projector_gives_next_counts(models, tower) -> None:
    _, model, processor, _ = models(tower, "mlp2x_gelu")
    model.config.image_aspect_ratio = "anyres"
    column = {"clip": (1, 3), "siglip": (2, 4)}[tower]
    sizes = list(COUNTS)
    side, grid, pinpoints = TOWERS[tower]
    for merge, index in (("flat", column[0]), ("spatial", column[0]), ("spatial_unpad", column[1])):
        got = _tokens(model, processor, sizes, merge)
        assert got == [COUNTS[size][index] for size in sizes], merge
        assert got == [visual_token_count(size, pinpoints, side, grid, None, merge) for size in sizes], merge


@BRACO
@pytest.mark.parametrize("tower, projector, budget", [("clip", "braco_k16", 16), ("siglip", "braco_k4", 4)])
def test_compressed_views_get_the_budget_per_view(models, tower, projector, budget) -> None:
    _, model, processor, _ = models(tower, projector)
    model.config.image_aspect_ratio = "anyres"
    sizes = list(COUNTS)
    side, grid, pinpoints = TOWERS[tower]
    for merge, extra in (("flat", 0), ("spatial", 0), ("spatial_unpad", 1)):
        got = _tokens(model, processor, sizes, merge)
        assert got == [COUNTS[size][0] * (budget + extra) for size in sizes], merge
        assert got == [visual_token_count(size, pinpoints, side, grid, budget, merge) for size in sizes], merge
    assert _tokens(model, processor, [(1024, 1024)], "flat") == [{16: 80, 4: 20}[budget]]  # the paper's 80 and 20


def test_anyres_max_9_shrinks_the_unpadded_map(models) -> None:
    """NeXT's anyres_max_9 on the 36 canvases (1x1)..(6x6) at 384: 800x600 → 4725 tokens, 1920x1080 → 7269."""
    _, model, processor, _ = models("siglip", "mlp2x_gelu")
    model.config.image_aspect_ratio = "anyres_max_9"
    model.config.image_grid_pinpoints = [list(pair) for pair in parse_grid_pinpoints("(1x1),...,(6x6)", 384)]
    try:
        assert _tokens(model, processor, [(800, 600), (1920, 1080)], "spatial_unpad") == [4725, 7269]
    finally:
        model.config.image_aspect_ratio = "anyres"
        model.config.image_grid_pinpoints = SIGLIP_PINPOINTS


def test_views_that_do_not_fit_the_image_are_refused(models) -> None:
    _, model, processor, _ = models("clip", "mlp2x_gelu")
    model.config.image_aspect_ratio, model.config.mm_patch_merge_type = "anyres", "spatial"
    pixels = process_images([_image((1024, 1024))], processor, model.config)[0]  # 5 views
    with pytest.raises(ValueError, match=r"^an image of size \(300, 200\) gives 3 anyres views .* but 5 were given$"):
        model.image_features([pixels], [(300, 200)])
    model.config.image_aspect_ratio = "pad"
    try:
        with pytest.raises(ValueError, match=r"several views per image needs image_aspect_ratio 'anyres' .* got 'pad'$"):
            model.image_features([pixels], [(1024, 1024)])
    finally:
        model.config.image_aspect_ratio = "anyres"
    model.config.mm_patch_merge_type = "spatial_maxpool"
    with pytest.raises(ValueError, match=r"^unknown mm_patch_merge_type 'spatial_maxpool'; expected one of flat, spatial"):
        model.image_features([pixels], [(1024, 1024)])
