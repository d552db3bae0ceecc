"""Fourier-VLM (Wang et al., arXiv 2508.06038): parameter-free DCT low-pass of the visual token grid.

No public code exists; this follows the paper's description. The ``H x W`` grid of tower features is taken
to the frequency domain by an orthonormal 2-D DCT, only the ``C x C`` low-frequency block is kept, and a
size-``C`` inverse DCT turns it back into a ``C x C`` spatial grid, flattened row-major to ``K = C²`` tokens
that the (fine-tuned) ``mlp2x_gelu`` projector maps into the LLM.

It is Braco's backbone with ``idct`` coordinates and neither embedding nor residual tokens, so it reuses
Braco's basis (:mod:`braco_patch.basis`) and coordinate matrix (:mod:`braco_patch.coordinates`): the three
steps are one fixed ``[C², H·W]`` matrix ``(D_Cᵀ ⊗ D_Cᵀ)(D_H ⊗ D_W)[retained rows]``, built in float64 once
per grid, dtype and device. The paper computes the DCT with FFTs; the operator here gives the same numbers.

Boundary: pre-projector (``[B, H·W, D] → [B, C², D]``); no parameters; ``K = C²`` for ``C ≤ min(H, W)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..basis import dct_matrix, retained_block_operator
from ..coordinates import coordinate_matrix
from ._common import check_count, check_tokens, square_side

__all__ = ["FourierVLM"]


class FourierVLM(nn.Module):
    """DCT low-pass to a ``C x C`` grid.

    Args:
        dim: tower feature width D (only checked).
        budget: K = C², a perfect square (the paper's 4/9/16/25 are C = 2/3/4/5).
        grid: optional ``(H, W)``; without it the grid is N x N from the token count.
        rescale: multiply by ``C/√(H·W)`` so that a constant grid keeps its value (the orthonormal pair
            scales the mean by ``√(H·W)/C``; off by default, as in Braco's ``idct`` coordinates).
    """

    boundary = "pre"
    needs: frozenset[str] = frozenset()

    def __init__(self, dim: int, budget: int, *, grid: tuple[int, int] | None = None, rescale: bool = False) -> None:
        super().__init__()
        self.dim = check_count(dim, "dim")
        cutoff = math.isqrt(check_count(budget))
        if cutoff * cutoff != budget:
            raise ValueError(f"Fourier-VLM keeps a C×C block, so the budget must be a perfect square (4, 9, 16, 25, ...), got {budget}")
        self.cutoff = cutoff
        self.grid = None if grid is None else (int(grid[0]), int(grid[1]))
        if self.grid is not None:
            self._check_grid(self.grid)
        self.rescale = bool(rescale)
        self._operators: dict[tuple, torch.Tensor] = {}

    @property
    def output_tokens(self) -> int:
        """K = C²."""
        return self.cutoff**2

    def extra_repr(self) -> str:
        return f"dim={self.dim}, cutoff={self.cutoff}, rescale={self.rescale}"

    def _check_grid(self, grid: tuple[int, int]) -> None:
        if self.cutoff > min(grid):
            raise ValueError(
                f"Fourier-VLM with K={self.output_tokens} needs C={self.cutoff} but the {grid[0]}x{grid[1]} grid allows at most C={min(grid)}"
            )

    def operator(self, grid: tuple[int, int], dtype: torch.dtype = torch.float64, device: torch.device | None = None) -> torch.Tensor:
        """The fixed ``[C², H·W]`` map (DCT, crop, inverse DCT), cached per grid, dtype and device."""
        key = (grid, dtype, device)
        if key not in self._operators:
            self._check_grid(grid)
            with torch.inference_mode(False), torch.no_grad():
                op = coordinate_matrix("idct", self.cutoff) @ retained_block_operator(dct_matrix(grid[0]), dct_matrix(grid[1]), self.cutoff)
                if self.rescale:
                    op = op * (self.cutoff / math.sqrt(grid[0] * grid[1]))
                self._operators[key] = op.to(device=device, dtype=dtype)
        return self._operators[key]

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """``[B, H·W, D]`` → ``[B, C², D]`` (row-major over the C x C output grid)."""
        check_tokens(features, self.dim)
        grid = self.grid or (square_side(features.shape[1]),) * 2
        if features.shape[1] != grid[0] * grid[1]:
            raise ValueError(f"expected {grid[0] * grid[1]} tokens for the {grid[0]}x{grid[1]} grid, got {features.shape[1]}")
        return torch.matmul(self.operator(grid, features.dtype, features.device), features)
