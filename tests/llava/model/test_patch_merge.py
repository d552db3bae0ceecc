"""``mm_patch_merge_type`` merges (:mod:`llava.model.patch_merge`) on hand-built features, against loops.

Each feature value encodes where it came from (view, patch row, patch column), and the reference places every
patch on the stitched map one by one, so a transposed or shifted stitching shows up as a wrong value.
"""

from __future__ import annotations

import pytest
import torch

from llava.model.patch_merge import MergeLayout, merge_compressed, merge_views, spatial_merge, unpad_image
from llava.visual_tokens import unpadded_shape

PINPOINTS = [[48, 96], [96, 48], [96, 96]]


def _layout(grid: tuple[int, int], newline: torch.Tensor | None = None) -> MergeLayout:
    return MergeLayout(newline=newline, grid=grid, tower_side=48, aspect="anyres", pinpoints=PINPOINTS)


def _views(count: int, grid: tuple[int, int]) -> torch.Tensor:
    """``[V, gh·gw, 3]`` whose entries are ``(view, patch row, patch column)``."""
    gh, gw = grid
    feature = torch.zeros(count, gh * gw, 3)
    for view in range(count):
        for i in range(gh):
            for j in range(gw):
                feature[view, i * gw + j] = torch.tensor([view, i, j], dtype=torch.float32)
    return feature


def _stitched(feature: torch.Tensor, rows: int, cols: int, grid: tuple[int, int]) -> torch.Tensor:
    """The crops (views 1..) as one ``[rows·gh, cols·gw, D]`` map, crop (r, c) being view ``1 + r·cols + c``."""
    gh, gw = grid
    canvas = torch.zeros(rows * gh, cols * gw, feature.shape[-1])
    for r in range(rows):
        for c in range(cols):
            for i in range(gh):
                for j in range(gw):
                    canvas[r * gh + i, c * gw + j] = feature[1 + r * cols + c, i * gw + j]
    return canvas


@pytest.mark.parametrize(
    "size, expected", [((40, 30), (slice(1, 11), slice(0, 12))), ((30, 40), (slice(0, 12), slice(1, 11)))]
)
def test_unpad_image_by_hand(size, expected) -> None:
    # 12x12 map: a 40x30 image fills the width at scale 0.3, 9 rows of 12 → one padding row cut at each side.
    grid = torch.arange(144.0).view(1, 12, 12)
    assert torch.equal(unpad_image(grid, size), grid[:, expected[0], expected[1]])


@pytest.mark.parametrize("size", [(24, 48), (90, 20), (70, 70), (1000, 3), (3, 1000), (37, 91)])
def test_unpad_image_shape_matches_the_token_rule(size) -> None:
    grid = torch.zeros(2, 12, 18)
    assert tuple(unpad_image(grid, size).shape[1:]) == unpadded_shape(12, 18, size)


@pytest.mark.parametrize("grid", [(2, 2), (2, 3)])
@pytest.mark.parametrize("size, rows, cols", [((24, 48), 2, 1), ((90, 20), 1, 2), ((70, 70), 2, 2)])
def test_spatial_merge_stitches_the_crops(grid, size, rows, cols) -> None:
    feature = _views(1 + rows * cols, grid)
    canvas = _stitched(feature, rows, cols, grid)
    merged = spatial_merge(feature, size, "spatial", _layout(grid))
    torch.testing.assert_close(merged, torch.cat([feature[0], canvas.flatten(0, 1)]), rtol=0, atol=0)


@pytest.mark.parametrize("grid", [(2, 2), (2, 3)])
@pytest.mark.parametrize("size, rows, cols", [((24, 48), 2, 1), ((90, 20), 1, 2), ((70, 70), 2, 2)])
def test_spatial_unpad_merge_crops_and_ends_rows(grid, size, rows, cols) -> None:
    feature = _views(1 + rows * cols, grid)
    newline = torch.tensor([-1.0, -2.0, -3.0])
    canvas = _stitched(feature, rows, cols, grid)
    height, width = unpadded_shape(canvas.shape[0], canvas.shape[1], size)
    top, left = (canvas.shape[0] - height) // 2, (canvas.shape[1] - width) // 2
    kept = canvas[top : top + height, left : left + width]
    expected_rows = [torch.cat([kept[row], newline[None]]) for row in range(height)]
    merged = spatial_merge(feature, size, "spatial_unpad", _layout(grid, newline))
    torch.testing.assert_close(merged, torch.cat([feature[0], *expected_rows]), rtol=0, atol=0)


def test_compressed_views_stay_whole() -> None:
    feature = torch.randn(3, 4, 2)  # K = 4 is not the 2x3 grid: a compressor's tokens
    newline = torch.tensor([9.0, 9.0])
    with_newlines = merge_compressed(feature, newline)
    assert torch.equal(merge_compressed(feature, None), torch.cat([feature[0], feature[1], feature[2]]))
    expected = torch.cat([feature[0], newline[None], feature[1], newline[None], feature[2], newline[None]])
    assert torch.equal(with_newlines, expected)
    merged = spatial_merge(feature, (24, 48), "spatial_unpad", _layout((2, 3), newline))
    assert torch.equal(merged, with_newlines)


def test_merge_views_flat_and_errors() -> None:
    stacked, ragged = torch.randn(2, 3, 4), [torch.randn(2, 4), torch.randn(5, 4)]
    flat = merge_views([stacked, ragged], None, "flat", None)
    assert torch.equal(flat[0], torch.cat(list(stacked))) and torch.equal(flat[1], torch.cat(ragged))
    with pytest.raises(ValueError, match="unknown mm_patch_merge_type 'diagonal'"):
        merge_views([stacked], None, "diagonal", None)
    with pytest.raises(ValueError, match="needs the same token count in every view"):
        merge_views([ragged], [(24, 48)], "spatial", _layout((2, 2)))
    with pytest.raises(ValueError, match="needs one \\(width, height\\) in image_sizes per image \\(1\\), got None"):
        merge_views([stacked], None, "spatial", _layout((2, 2)))
    with pytest.raises(RuntimeError, match="needs model.image_newline"):
        merge_views([stacked], [(24, 48)], "spatial_unpad", _layout((2, 2)))
