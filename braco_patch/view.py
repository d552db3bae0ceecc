"""Braco's picture for the demo panel: where the K compressed visual tokens look (paper §3.4, Fig. 2).

Part of the LLaVA seam (it draws with :mod:`llava.serve.panels`); loaded only when the demo asks for a view.
For one image it shows:

* the model's input image;
* the **low-pass view**: what a C x C DCT backbone keeps of the image's coarse layout. The input image is
  averaged over each ``p x p`` patch, giving one RGB value per point of the ``H x W`` grid. Per colour channel,
  the orthonormal 2-D DCT-II over the grid is taken (:func:`braco_patch.basis.dct_rows`) and only the
  frequencies ``u, v < C`` are kept. The view draws the smooth surface those C x C cosines define, evaluated at
  every pixel (pixel row ``i`` sits at grid position ``(i + 0.5) / p - 0.5``, so at patch centres it equals
  the inverse DCT of the kept block), clipped to [0, 1]. The real tokens come from a non-linear tower, so the
  view illustrates, rather than reproduces, what the backbone tokens carry;
* the S residual tokens' sparsemax weight maps ``[S, H, W]``, exactly what the coder computes for that image
  (each map sums to 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn as nn

from llava.serve.panels import CompressorView, Picture, ViewInputs, heat_picture, token_details, tokens_summary

from .basis import dct_rows
from .coder import BracoCoder

__all__ = ["PANEL_HELP", "braco_view", "find_coder", "lowpass_view"]

PANEL_HELP = """*Left to right:* the image as the model receives it (padded and resized); its low-pass view (the
image averaged per patch, keeping only the C×C lowest 2-D DCT frequencies over the patch grid, drawn smoothly),
which is the coarse layout the DCT backbone tokens summarise; then one heat map per residual token: its sparsemax
weights over the patch grid (each map sums to 1), drawn over the image."""


def find_coder(projector: nn.Module) -> BracoCoder | None:
    """The projector's Braco coder (its first module), or ``None``."""
    first = projector[0] if isinstance(projector, nn.Sequential) and len(projector) > 0 else projector
    return first if isinstance(first, BracoCoder) else None


def lowpass_view(image: np.ndarray, grid: tuple[int, int], cutoff: int) -> np.ndarray:
    """What a ``cutoff x cutoff`` DCT block over the patch grid keeps of ``image`` (see the module docstring).

    Args:
        image: ``[h, w, 3]`` in [0, 1]; cropped to a whole number of patches.
        grid: ``(H, W)`` patches.
        cutoff: C.

    Returns:
        ``[H·p_h, W·p_w, 3]`` float64 in [0, 1].
    """
    rows, cols = grid
    ph, pw = image.shape[0] // rows, image.shape[1] // cols
    if ph < 1 or pw < 1:
        raise ValueError(f"an image of {image.shape[0]}x{image.shape[1]} pixels is smaller than the {rows}x{cols} patch grid")
    if not 1 <= cutoff <= min(rows, cols):
        raise ValueError(f"cutoff C={cutoff} must be between 1 and the grid side {min(rows, cols)}")
    pixels = np.asarray(image[: rows * ph, : cols * pw], dtype=np.float64)
    means = pixels.reshape(rows, ph, cols, pw, 3).mean(axis=(1, 3))
    on_rows, on_cols = dct_rows(rows, cutoff).numpy(), dct_rows(cols, cutoff).numpy()
    coefficients = np.einsum("uh,vw,hwc->uvc", on_rows, on_cols, means)
    at_rows = dct_rows(rows, cutoff, torch.arange(rows * ph, dtype=torch.float64).add(0.5).div(ph).sub(0.5)).numpy()
    at_cols = dct_rows(cols, cutoff, torch.arange(cols * pw, dtype=torch.float64).add(0.5).div(pw).sub(0.5)).numpy()
    return np.clip(np.einsum("ui,vj,uvc->ijc", at_rows, at_cols, coefficients), 0.0, 1.0)


def braco_view(projector: nn.Module, inputs: ViewInputs) -> CompressorView | None:
    """The panel of a Braco projector for one image (``None`` when the projector has no coder).

    ``arrays["weights"]`` holds the ``[S, H, W]`` residual maps; ``details`` the token counts, C and S.
    """
    coder = find_coder(projector)
    if coder is None:
        return None
    tokens, grid = coder.split_tokens(inputs.features)
    grid = (int(grid[0]), int(grid[1]))
    cutoff, residual = int(coder.cutoff), int(coder.residual_tokens)
    if residual > 0:
        weights = coder.residual_weights(tokens, grid)[0].float().reshape(-1, *grid).cpu().numpy()
    else:
        weights = np.zeros((0, *grid), dtype=np.float32)
    pictures: list[Picture] = [Picture("model input", inputs.image)]
    if cutoff > 0:
        pictures.append(Picture(f"{cutoff}×{cutoff} DCT low-pass", lowpass_view(inputs.image, grid, cutoff)))
    for index, heat in enumerate(weights, start=1):
        pictures.append(heat_picture(f"residual {index} (max {heat.max():.2f})", inputs.image, heat))
    split = cutoff * cutoff + residual == inputs.tokens_sent
    breakdown = f"{cutoff}×{cutoff} = {cutoff * cutoff} DCT backbone + {residual} residual" if split else ""
    details: dict[str, Any] = {**token_details(inputs), "cutoff": cutoff, "residual_tokens": residual}
    summary = tokens_summary(inputs.tokens_sent, grid, breakdown)
    return CompressorView(summary, tuple(pictures), PANEL_HELP, details, {"weights": weights})
