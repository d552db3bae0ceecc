"""Braco's demo panel, through the generic compressor view (:mod:`llava.serve.panels`): the heat maps are the
coder's own residual weights for the image, and the low-pass view matches an independent float64 computation
(the DCT written out as explicit sums)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from braco_patch.basis import dct_rows
from braco_patch.coder import BracoCoder
from braco_patch.view import find_coder, lowpass_view
from llava.mm_utils import process_images
from llava.serve.panels import compute_view, render_png, view_for, view_payload

from .conftest import png_bytes


def _image(path: Path) -> Image.Image:
    return Image.open(path).convert("RGB")


def test_heat_maps_are_the_coders_residual_weights(braco_engine, tiny_image_file: Path) -> None:
    model, processor = braco_engine.model, braco_engine.image_processor
    coder = model.get_model().mm_projector[0]
    assert isinstance(coder, BracoCoder) and find_coder(model.get_model().mm_projector) is coder
    image = _image(tiny_image_file)
    view = compute_view(model, processor, image)
    weights = view.arrays["weights"]

    assert weights.shape == (coder.residual_tokens, 6, 6) == (5, 6, 6)
    pixels = process_images([image], processor, model.config)
    with torch.no_grad():
        features = model.get_vision_tower()(pixels)
        expected = coder.residual_weights(features, (6, 6))[0].reshape(5, 6, 6).numpy()
        sent = model.encode_images(pixels).shape[1]
    np.testing.assert_allclose(weights, expected, rtol=0, atol=1e-7)
    rows = weights.reshape(5, -1)
    assert (rows >= 0).all()
    np.testing.assert_allclose(rows.sum(axis=1), np.ones(5), atol=1e-5)
    details = view.details
    assert (details["tokens_sent"], details["tokens_uncompressed"], details["cutoff"]) == (sent, 36, 2) == (9, 36, 2)
    assert "9 visual tokens sent to the LLM" in view.summary and "36 uncompressed" in view.summary
    assert "2×2 = 4 DCT backbone + 5 residual" in view.summary

    other = compute_view(model, processor, Image.new("RGB", (30, 40), (10, 200, 90)))
    assert not np.allclose(other.arrays["weights"], weights), "the maps must depend on the image"


def test_heat_maps_equal_the_weights_used_while_answering(braco_engine, tiny_image_file: Path, monkeypatch) -> None:
    coder = braco_engine.model.get_model().mm_projector[0]
    seen: list[torch.Tensor] = []
    original = coder.residual_weights

    def recording(tokens, grid):
        weights = original(tokens, grid)
        seen.append(weights.detach().clone())
        return weights

    monkeypatch.setattr(coder, "residual_weights", recording)
    body = {
        "prompt": "USER: <image>\nWhat is it? ASSISTANT:",
        "images": [base64.b64encode(tiny_image_file.read_bytes()).decode()],
        "temperature": 0,
        "max_new_tokens": 2,
    }
    chunks = list(braco_engine.generate_stream(body))
    assert chunks and all(chunk.ok for chunk in chunks)
    monkeypatch.undo()
    assert len(seen) == 1
    view = compute_view(braco_engine.model, braco_engine.image_processor, _image(tiny_image_file))
    np.testing.assert_allclose(view.arrays["weights"], seen[0][0].reshape(5, 6, 6).numpy(), atol=1e-7)


def _basis(u: int, x: float, n: int) -> float:
    """Orthonormal DCT-II basis function ``u`` of length ``n`` at position ``x``."""
    return np.sqrt((1 if u == 0 else 2) / n) * np.cos(np.pi * (x + 0.5) * u / n)


def _dct2(grid: np.ndarray) -> np.ndarray:
    """Orthonormal 2-D DCT-II of ``[H, W, channels]`` by its definition."""
    rows, cols = grid.shape[:2]
    out = np.zeros_like(grid, dtype=np.float64)
    for u in range(rows):
        for v in range(cols):
            for h in range(rows):
                for w in range(cols):
                    out[u, v] += _basis(u, h, rows) * _basis(v, w, cols) * grid[h, w]
    return out


def _idct2(block: np.ndarray) -> np.ndarray:
    rows, cols = block.shape[:2]
    out = np.zeros_like(block, dtype=np.float64)
    for h in range(rows):
        for w in range(cols):
            for u in range(rows):
                for v in range(cols):
                    out[h, w] += _basis(u, h, rows) * _basis(v, w, cols) * block[u, v]
    return out


def _reference_lowpass(image: np.ndarray, grid: tuple[int, int], cutoff: int) -> np.ndarray:
    """Patch means -> 2-D DCT-II -> C x C block -> cosine sum at every pixel, all float64 and written out."""
    rows, cols = grid
    ph, pw = image.shape[0] // rows, image.shape[1] // cols
    means = image[: rows * ph, : cols * pw].astype(np.float64).reshape(rows, ph, cols, pw, 3).mean(axis=(1, 3))
    block = _dct2(means)[:cutoff, :cutoff]
    out = np.zeros((rows * ph, cols * pw, 3))
    for i in range(rows * ph):
        for j in range(cols * pw):
            s, t = (i + 0.5) / ph - 0.5, (j + 0.5) / pw - 0.5
            for u in range(cutoff):
                for v in range(cutoff):
                    out[i, j] += block[u, v] * _basis(u, s, rows) * _basis(v, t, cols)
    return np.clip(out, 0.0, 1.0)


@pytest.mark.parametrize(("grid", "patch", "cutoff"), [((6, 6), 8, 2), ((4, 5), 3, 3), ((3, 3), 2, 1)])
def test_lowpass_view_matches_an_independent_float64_computation(grid, patch, cutoff) -> None:
    rng = np.random.default_rng(0)
    image = rng.uniform(0.0, 1.0, size=(grid[0] * patch + 1, grid[1] * patch, 3))  # one extra row, cropped
    view = lowpass_view(image, grid, cutoff)
    assert view.shape == (grid[0] * patch, grid[1] * patch, 3) and view.dtype == np.float64
    np.testing.assert_allclose(view, _reference_lowpass(image, grid, cutoff), rtol=0, atol=1e-12)


def test_lowpass_view_at_patch_centres_is_the_inverse_dct_of_the_kept_block() -> None:
    rng = np.random.default_rng(1)
    grid, patch = (5, 4), 3  # odd patch: every patch has a centre pixel
    image = rng.uniform(0.2, 0.8, size=(grid[0] * patch, grid[1] * patch, 3))
    means = image.reshape(grid[0], patch, grid[1], patch, 3).mean(axis=(1, 3))
    centres = (slice(patch // 2, None, patch), slice(patch // 2, None, patch))
    for cutoff in (1, 2, 4):
        block = _dct2(means)
        block[cutoff:], block[:, cutoff:] = 0, 0
        expected = np.clip(_idct2(block), 0, 1)
        np.testing.assert_allclose(lowpass_view(image, grid, cutoff)[centres], expected, atol=1e-12)
    # keeping every frequency of a square grid gives back the patch means exactly
    square = rng.uniform(0.1, 0.9, size=(12, 12, 3))
    square_means = square.reshape(4, 3, 4, 3, 3).mean(axis=(1, 3))
    np.testing.assert_allclose(lowpass_view(square, (4, 4), 4)[centres], square_means, atol=1e-12)


def test_dct_rows_at_fractional_positions_follow_the_definition() -> None:
    positions = np.array([-0.5, 0.0, 0.25, 2.75])
    expected = np.array([[_basis(u, x, 5) for x in positions] for u in range(3)])
    np.testing.assert_allclose(dct_rows(5, 3, torch.tensor(positions)).numpy(), expected, atol=1e-14)


def test_lowpass_view_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="smaller than the 6x6 patch grid"):
        lowpass_view(np.zeros((5, 5, 3)), (6, 6), 2)
    with pytest.raises(ValueError, match="cutoff C=7 must be between 1 and the grid side 6"):
        lowpass_view(np.zeros((12, 12, 3)), (6, 6), 7)


def test_panel_png_and_payload(braco_engine, tiny_image_file: Path) -> None:
    view = compute_view(braco_engine.model, braco_engine.image_processor, _image(tiny_image_file))
    png = render_png(view)
    drawn = Image.open(io.BytesIO(png))
    assert drawn.format == "PNG" and drawn.width > drawn.height > 100
    payload = view_payload(view)
    assert payload["available"] and base64.b64decode(payload["png"]) == png
    assert (payload["cutoff"], payload["residual_tokens"], payload["grid"]) == (2, 5, [6, 6])
    assert payload["summary"] == view.summary and "sparsemax" in payload["help"]
    assert view_payload(None) == {"available": False}


def test_no_panel_for_other_projectors(mlp_engine) -> None:
    assert view_for(mlp_engine.model) is None and not mlp_engine.has_compressor_view
    image = Image.open(io.BytesIO(png_bytes((40, 30))))
    assert compute_view(mlp_engine.model, mlp_engine.image_processor, image) is None
    assert mlp_engine.compressor_view({"images": [base64.b64encode(png_bytes((40, 30))).decode()]}) == {"available": False}


def test_the_panel_is_named_by_the_method(braco_engine, tiny_image_file: Path) -> None:
    """The panel names the checkpoint's type and its method's one name, as the cost tables and compare do."""
    model = braco_engine.model
    view = compute_view(model, braco_engine.image_processor, _image(tiny_image_file))
    projector_type = model.config.mm_projector_type
    assert view.summary.startswith(f"`{projector_type}` (braco): ")
    assert (view.details["method"], view.details["projector_type"]) == ("braco", projector_type)
    payload = view_payload(view)
    assert (payload["method"], payload["projector_type"]) == ("braco", projector_type)
