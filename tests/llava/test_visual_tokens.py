"""The visual-token rule (llava.visual_tokens) against LLaVA-NeXT's published counts and the paper's budgets."""

from __future__ import annotations

import pytest

from llava.mm_utils import parse_grid_pinpoints
from llava.visual_tokens import visual_token_count

CLIP = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
SIGLIP = [[w * 384 // 336, h * 384 // 336] for w, h in CLIP]

# reference llava-next-interface §1 counts table: size → (CLIP flat, SigLIP flat, CLIP unpad, SigLIP unpad)
TABLE = {
    (1024, 1024): (2880, 3645, 2928, 3699),
    (800, 600): (2880, 3645, 2340, 2929),
    (1920, 1080): (2880, 3645, 1948, 2379),
    (500, 1500): (2304, 2916, 2376, 2997),
    (300, 200): (1728, 2187, 976, 1233),
}


@pytest.mark.parametrize("size", list(TABLE))
def test_grid_keeping_counts_match_the_next_table(size) -> None:
    clip_flat, siglip_flat, clip_unpad, siglip_unpad = TABLE[size]
    for merge in ("flat", "spatial"):
        assert visual_token_count(size, CLIP, 336, 24, None, merge) == clip_flat
        assert visual_token_count(size, SIGLIP, 384, 27, None, merge) == siglip_flat
        assert visual_token_count(size, CLIP, 336, 24, 576, merge) == clip_flat  # K = N² keeps the grid
    assert visual_token_count(size, CLIP, 336, 24, None, "spatial_unpad") == clip_unpad
    assert visual_token_count(size, SIGLIP, 384, 27, None, "spatial_unpad") == siglip_unpad


def test_anyres_max_matches_next_examples() -> None:
    shorthand = "(1x1),...,(6x6)"
    for size, tokens in (((800, 600), 4725), ((1920, 1080), 7269)):
        assert visual_token_count(size, shorthand, 384, 27, None, "spatial_unpad", image_aspect_ratio="anyres_max_9") == tokens
    # anyres_max acts only with spatial_unpad: 1920x1080 takes the 5x3 canvas, 16 views
    assert visual_token_count((1920, 1080), shorthand, 384, 27, None, "spatial", image_aspect_ratio="anyres_max_9") == 16 * 729


def test_paper_budgets_are_per_view() -> None:
    assert visual_token_count((1024, 1024), CLIP, 336, 24, 16) == 80  # Vicuna-7B AnyRes: 2880 → 80
    assert visual_token_count((1024, 1024), SIGLIP, 384, 27, 4) == 20  # Qwen2.5-3B AnyRes: 3645 → 20
    assert visual_token_count((1024, 1024), CLIP, 336, 24, 16, "spatial") == 80
    assert visual_token_count((1024, 1024), CLIP, 336, 24, 16, "spatial_unpad") == 85  # one newline per view
    assert visual_token_count((300, 200), CLIP, 336, 24, 16, "spatial_unpad") == 3 * 17


def test_single_view_counts() -> None:
    for aspect in ("pad", "square", None):
        assert visual_token_count((640, 480), None, 384, 27, None, "flat", image_aspect_ratio=aspect) == 729
        assert visual_token_count((640, 480), None, 512, 32, None, "flat", image_aspect_ratio=aspect) == 1024
        assert visual_token_count((640, 480), None, 384, 27, 16, "flat", image_aspect_ratio=aspect) == 16
        assert visual_token_count((640, 480), None, 336, 24, None, "spatial_unpad", image_aspect_ratio=aspect) == 577
        assert visual_token_count((640, 480), None, 336, 24, 16, "spatial_unpad", image_aspect_ratio=aspect) == 17


def test_pinpoint_range_shorthand() -> None:
    canvases = parse_grid_pinpoints("(1x1),...,(6x6)", 384)
    assert len(canvases) == 36 and canvases[0] == (384, 384) and canvases[1] == (384, 768) and canvases[-1] == (2304, 2304)
    assert parse_grid_pinpoints("(1x1),...,(2x3)", 10) == [(10, 10), (10, 20), (10, 30), (20, 10), (20, 20), (20, 30)]
    with pytest.raises(ValueError, match="needs the tower's input side"):
        parse_grid_pinpoints("(1x1),...,(2x2)")
    with pytest.raises(ValueError, match="from a smaller grid to a larger one"):
        parse_grid_pinpoints("(3x3),...,(1x1)", 384)


@pytest.mark.parametrize("kwargs, match", [
    ({"merge_type": "spatial_unpad_maxpool2x2"}, "unknown mm_patch_merge_type"),
    ({"tokens_per_view": 0}, "tokens per view must be at least 1"),
    ({"grid": 0}, "patch grid must be at least 1x1"),
])
def test_bad_input(kwargs, match) -> None:
    args = {"image_size": (100, 100), "grid_pinpoints": CLIP, "tower_side": 336, "grid": 24, **kwargs}
    with pytest.raises(ValueError, match=match):
        visual_token_count(**args)
