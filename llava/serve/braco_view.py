"""The Braco panel of the chat demo: where the K compressed visual tokens look (paper §3.4, Fig. 2).

For a model whose projector starts with a token coder (a module with ``split_tokens`` and
``residual_weights``, as :class:`braco_patch.coder.BracoCoder` has), :func:`compute_view` returns, for one
image:

* the S residual tokens' sparsemax weight maps, ``[S, H, W]`` over the vision tower's ``H x W`` patch grid,
  exactly what the coder computes for that image (each map sums to 1);
* the **low-pass view**: what a C x C DCT backbone keeps of the image's coarse layout. The model's input
  image (after the checkpoint's padding/resizing, de-normalised back to RGB in [0, 1]) is averaged over each
  ``p x p`` patch, giving one RGB value per point of the ``H x W`` grid. Per colour channel, the orthonormal
  2-D DCT-II over the grid is taken and only the frequencies ``u, v < C`` are kept. The view draws the smooth
  surface those C x C cosines define, evaluated at every pixel (pixel row ``i`` sits at grid position
  ``(i + 0.5) / p - 0.5``, so at patch centres it equals the inverse DCT of the kept block), clipped to
  [0, 1]. The real tokens come from a non-linear tower, so the view illustrates, rather than reproduces,
  what the backbone tokens carry;
* K, the number of visual tokens the projector sends to the LLM, and N = H·W, the uncompressed count.

Other projectors have no panel (:func:`compute_view` returns ``None``).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from PIL import Image

from llava.mm_utils import process_images

#: Panels per row of the rendered figure.
_COLUMNS = 4
_PANEL_INCHES = 1.7


def find_token_coder(model: Any) -> nn.Module | None:
    """The projector's token coder (its first module, if it has ``split_tokens`` and ``residual_weights``)."""
    projector = getattr(model.get_model(), "mm_projector", None)
    first = projector[0] if isinstance(projector, nn.Sequential) and len(projector) > 0 else projector
    if first is not None and all(callable(getattr(first, name, None)) for name in ("split_tokens", "residual_weights")):
        return first
    return None


@dataclass(frozen=True)
class BracoView:
    """Everything the panel shows for one image.

    Attributes:
        image: ``[h, w, 3]`` float64 in [0, 1], the model's input image.
        lowpass: ``[h', w', 3]`` float64 low-pass view (``h' = H·p``), or ``None`` when the coder keeps no
            backbone (C = 0).
        weights: ``[S, H, W]`` float32 residual weight maps.
        cutoff: C.
        grid: ``(H, W)`` patch grid.
        tokens_sent: K, visual tokens per image sent to the LLM.
    """

    image: np.ndarray
    lowpass: np.ndarray | None
    weights: np.ndarray
    cutoff: int
    grid: tuple[int, int]
    tokens_sent: int

    @property
    def residual_tokens(self) -> int:
        return int(self.weights.shape[0])

    @property
    def tokens_uncompressed(self) -> int:
        """N = H·W, the tokens an uncompressed projector (e.g. mlp2x_gelu) would send."""
        return self.grid[0] * self.grid[1]

    def summary(self) -> str:
        """One Markdown line: K sent versus N uncompressed."""
        k, n, c, s = self.tokens_sent, self.tokens_uncompressed, self.cutoff, self.residual_tokens
        parts = f" ({c}×{c} = {c * c} DCT backbone + {s} residual)" if c * c + s == k else ""
        return (
            f"**{k} visual tokens sent to the LLM**{parts} vs **{n} uncompressed** "
            f"({self.grid[0]}×{self.grid[1]} patch grid): {n / k:.1f}× fewer."
        )


def cosine_rows(size: int, cutoff: int, positions: np.ndarray) -> np.ndarray:
    """Rows ``u < cutoff`` of the orthonormal DCT-II of length ``size`` at (possibly fractional) positions.

    ``a_u cos(π (x + ½) u / size)`` with ``a_0 = √(1/size)``, ``a_u = √(2/size)``; at ``x = 0 .. size-1`` these
    are the DCT matrix rows.

    Returns:
        ``[cutoff, len(positions)]`` float64.
    """
    u = np.arange(cutoff, dtype=np.float64)[:, None]
    scale = np.where(u == 0, np.sqrt(1.0 / size), np.sqrt(2.0 / size))
    return scale * np.cos(np.pi * (np.asarray(positions, dtype=np.float64)[None, :] + 0.5) * u / size)


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
        size = f"{image.shape[0]}x{image.shape[1]}"
        raise ValueError(f"an image of {size} pixels is smaller than the {rows}x{cols} patch grid")
    if not 1 <= cutoff <= min(rows, cols):
        raise ValueError(f"cutoff C={cutoff} must be between 1 and the grid side {min(rows, cols)}")
    pixels = np.asarray(image[: rows * ph, : cols * pw], dtype=np.float64)
    means = pixels.reshape(rows, ph, cols, pw, 3).mean(axis=(1, 3))
    on_rows, on_cols = cosine_rows(rows, cutoff, np.arange(rows)), cosine_rows(cols, cutoff, np.arange(cols))
    coefficients = np.einsum("uh,vw,hwc->uvc", on_rows, on_cols, means)
    at_rows = cosine_rows(rows, cutoff, (np.arange(rows * ph) + 0.5) / ph - 0.5)
    at_cols = cosine_rows(cols, cutoff, (np.arange(cols * pw) + 0.5) / pw - 0.5)
    return np.clip(np.einsum("ui,vj,uvc->ijc", at_rows, at_cols, coefficients), 0.0, 1.0)


def _model_input(pixels: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    """``[1, 3, h, w]``: the single (or, for anyres, the global) view of one preprocessed image."""
    first = pixels[0]
    return (first[0] if first.ndim == 4 else first).unsqueeze(0)


def _to_rgb(pixels: torch.Tensor, image_processor: Any) -> np.ndarray:
    mean = torch.tensor(image_processor.image_mean, dtype=torch.float64).view(3, 1, 1)
    std = torch.tensor(image_processor.image_std, dtype=torch.float64).view(3, 1, 1)
    return (pixels[0].double().cpu() * std + mean).clamp(0.0, 1.0).permute(1, 2, 0).numpy()


@torch.inference_mode()
def compute_view(model: Any, image_processor: Any, image: Image.Image) -> BracoView | None:
    """The panel's data for ``image``, or ``None`` when the model's projector has no token coder.

    The image goes through the same preprocessing, vision tower and projector as for generation, so the
    maps are the ones the coder uses when answering about this image.
    """
    coder = find_token_coder(model)
    if coder is None:
        return None
    pixels = _model_input(process_images([image], image_processor, model.config))
    features = model.get_vision_tower()(pixels.to(model.device, dtype=model.dtype))
    projector = model.get_model().mm_projector
    weight = next(projector.parameters(), None)
    if weight is not None:
        features = features.to(device=weight.device, dtype=weight.dtype)
    tokens, grid = coder.split_tokens(features)
    grid = (int(grid[0]), int(grid[1]))
    num_residual = int(getattr(coder, "residual_tokens", 1))
    if num_residual > 0:
        weights = coder.residual_weights(tokens, grid)[0].float().reshape(-1, *grid).cpu().numpy()
    else:
        weights = np.zeros((0, *grid), dtype=np.float32)
    tokens_sent = int(projector(features).shape[1])
    rgb = _to_rgb(pixels, image_processor)
    cutoff = int(getattr(coder, "cutoff", 0))
    lowpass = lowpass_view(rgb, grid, cutoff) if cutoff > 0 else None
    return BracoView(image=rgb, lowpass=lowpass, weights=weights, cutoff=cutoff, grid=grid, tokens_sent=tokens_sent)


def render_png(view: BracoView) -> bytes:
    """Draw the panel: model input, low-pass view, then one heat map per residual token over the image."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels: list[tuple[str, np.ndarray, np.ndarray | None]] = [("model input", view.image, None)]
    if view.lowpass is not None:
        panels.append((f"{view.cutoff}×{view.cutoff} DCT low-pass", view.lowpass, None))
    for index, heat in enumerate(view.weights, start=1):
        panels.append((f"residual {index} (max {heat.max():.2f})", view.image, heat))
    columns = min(len(panels), _COLUMNS)
    rows = -(-len(panels) // columns)
    figure = Figure(figsize=(columns * _PANEL_INCHES, rows * (_PANEL_INCHES + 0.25)), dpi=100)
    FigureCanvasAgg(figure)
    height, width = view.image.shape[:2]
    for index, (title, picture, heat) in enumerate(panels):
        axes = figure.add_subplot(rows, columns, index + 1)
        axes.imshow(picture, interpolation="nearest")
        if heat is not None:
            top = float(heat.max()) or 1.0
            axes.imshow(
                heat, cmap="inferno", alpha=0.6, vmin=0.0, vmax=top, extent=(0, width, height, 0),
                interpolation="nearest",
            )
        axes.set_title(title, fontsize=7)
        axes.set_xticks([])
        axes.set_yticks([])
    figure.tight_layout(pad=0.4)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def view_payload(view: BracoView | None) -> dict[str, Any]:
    """JSON for the worker's ``/worker_get_braco_view``: ``{"available": False}`` or the panel's data."""
    if view is None:
        return {"available": False}
    return {
        "available": True,
        "png": base64.b64encode(render_png(view)).decode("ascii"),
        "summary": view.summary(),
        "tokens_sent": view.tokens_sent,
        "tokens_uncompressed": view.tokens_uncompressed,
        "cutoff": view.cutoff,
        "residual_tokens": view.residual_tokens,
        "grid": list(view.grid),
    }


__all__ = ["BracoView", "compute_view", "cosine_rows", "find_token_coder", "lowpass_view", "render_png", "view_payload"]
