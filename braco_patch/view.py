"""The pictures behind Braco's demo panel (paper §3.4, Fig. 2), with no ``llava`` in them: the panel itself is
:func:`braco_patch.llava_plugin.braco_view`, which draws these with llava's panel helpers.

* :func:`find_coder`: the Braco coder of a built projector;
* :func:`lowpass_view`, the **low-pass view**: what a C x C DCT backbone keeps of the image's coarse layout. The input image is
  averaged over each ``p x p`` patch, giving one RGB value per point of the ``H x W`` grid. Per colour channel,
  the orthonormal 2-D DCT-II over the grid is taken (:func:`braco_patch.basis.dct_rows`) and only the
  frequencies ``u, v < C`` are kept. The view draws the smooth surface those C x C cosines define, evaluated at
  every pixel (pixel row ``i`` sits at grid position ``(i + 0.5) / p - 0.5``, so at patch centres it equals
  the inverse DCT of the kept block), clipped to [0, 1]. The real tokens come from a non-linear tower, so the
  view illustrates, rather than reproduces, what the backbone tokens carry. Fourier-VLM's panel draws it too.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from .basis import dct_rows
from .coder import BracoCoder

__all__ = ["find_coder", "lowpass_view"]


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
