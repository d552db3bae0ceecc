"""What a method's demo view gets for one image (:class:`ViewInputs`) and returns (:class:`CompressorView` of
:class:`Picture` s), drawn by :mod:`llava.serve.panels`. The standard library only (torch for type checkers)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for annotations only: importing the API must not import torch
    import torch


@dataclass(frozen=True)
class ViewInputs:
    """What a view gets for one image (prepared by :func:`llava.serve.panels.compute_view`).

    Attributes:
        image: ``[h, w, 3]`` float64 numpy array in [0, 1]: the model's input image (after the checkpoint's padding
            and resizing), de-normalised back to RGB.
        features: ``[1, T, D]`` the tower's select-layer features, on the projector's device and dtype.
        grid: ``(H, W)`` patch grid.
        tokens_sent: K, visual tokens per image the model sends to the LLM.
        model: The whole model, for views that need more than the features.
        pixels: ``[1, 3, h, w]`` the model input itself (for views that ask the tower for more, e.g. attention).
    """

    image: Any
    features: torch.Tensor
    grid: tuple[int, int]
    tokens_sent: int
    model: Any = None
    pixels: torch.Tensor | None = None

    @property
    def tokens_uncompressed(self) -> int:
        """N = H·W, what an uncompressed projector (e.g. mlp2x_gelu) sends."""
        return self.grid[0] * self.grid[1]


@dataclass(frozen=True)
class Picture:
    """One picture of the panel: ``image`` (``[h, w, 3]`` in [0, 1]) with an optional ``[H, W]`` heat map over the grid."""

    title: str
    image: Any
    heat: Any = None


@dataclass(frozen=True)
class CompressorView:
    """A method's panel for one image (drawn with :mod:`llava.serve.panels`' picture helpers).

    Attributes:
        summary: One Markdown line (see :func:`llava.serve.panels.tokens_summary`).
        pictures: What to draw, in order.
        help: Markdown shown under the picture: how to read it.
        details: JSON-able numbers for the worker's answer (e.g. the budget split).
        arrays: The arrays behind the pictures (e.g. weight maps), for in-process callers and tests.
    """

    summary: str
    pictures: tuple[Picture, ...]
    help: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)
    arrays: Mapping[str, Any] = field(default_factory=dict)
