"""The generic panel helpers a compressor's view draws with: kept positions, regions, heat maps, summary."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from llava.serve.panels import (
    CompressorView,
    Picture,
    heat_picture,
    kept_positions_picture,
    regions_picture,
    render_png,
    tokens_summary,
    view_payload,
)


def _image(rows: int = 12, cols: int = 9) -> np.ndarray:
    return np.random.default_rng(0).uniform(0.0, 1.0, size=(rows, cols, 3))


def test_kept_positions_keep_exactly_those_patches_bright():
    image = _image()  # a 4x3 grid of 3x3 patches
    picture = kept_positions_picture("kept", image, (4, 3), [0, 5, 11])
    for index in range(12):
        r, c = divmod(index, 3)
        block = (slice(3 * r, 3 * r + 3), slice(3 * c, 3 * c + 3))
        factor = 1.0 if index in (0, 5, 11) else 0.25
        np.testing.assert_allclose(picture.image[block], image[block] * factor, atol=0)
    with pytest.raises(ValueError, match=r"kept positions must be in \[0, 12\) for a 4x3 grid"):
        kept_positions_picture("kept", image, (4, 3), [12])


def test_regions_tint_every_patch_of_a_region_alike():
    image = np.full((8, 8, 3), 0.5)
    labels = np.array([[0, 0, 1, 1]] * 2 + [[2, 2, 3, 3]] * 2)  # four 2x2-patch regions on a 4x4 grid
    picture = regions_picture("regions", image, labels)
    tints = {tuple(np.round(picture.image[2 * r, 2 * c], 6)) for r in range(4) for c in range(4)}
    assert len(tints) == 4
    np.testing.assert_allclose(picture.image[0, 0], picture.image[3, 3])  # same region (0), other patch
    with pytest.raises(ValueError, match="integer map"):
        regions_picture("regions", image, labels.astype(float))


def test_summary_counts_and_render():
    assert tokens_summary(16, (24, 24), "3×3 = 9 DCT backbone + 7 residual") == (
        "**16 visual tokens sent to the LLM** (3×3 = 9 DCT backbone + 7 residual) vs **576 uncompressed** "
        "(24×24 patch grid): 36.0× fewer."
    )
    image = _image()
    view = CompressorView("summary", (Picture("input", image), heat_picture("heat", image, np.ones((4, 3)) / 12)))
    drawn = Image.open(io.BytesIO(render_png(view)))
    assert drawn.format == "PNG" and drawn.width > drawn.height
    payload = view_payload(view)
    assert payload["available"] and payload["summary"] == "summary" and payload["help"] == ""
    with pytest.raises(ValueError, match="at least one picture"):
        render_png(CompressorView("empty", ()))
