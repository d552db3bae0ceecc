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

One file on the plugin API: the module, its FLOPs, its LLaVA factory (``fouriervlm_k{K}``: Fourier-VLM then
``mlp2x_gelu``, keys ``0.*``/``2.*`` as ``mlp2x_gelu``'s), cost, view and :data:`PLUGIN`. Its config keys use the
prefix ``mm_fouriervlm_`` because ``mm_fourier_`` belongs to Braco's official keys.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from llava.plugin_api import (
    BuildContext,
    BuiltProjector,
    CompressorPlugin,
    CostModel,
    CostSetting,
    ModelNeeds,
    ModuleCost,
    NameForm,
    ProjectorType,
    Setting,
    ViewInputs,
)

from ..basis import dct_matrix, retained_block_operator
from ..coordinates import coordinate_matrix
from ._common import check_count, check_tokens, square_side
from ._plugin import CompressThenProject, Resolved, check_patch_features, cost_budget, name_count, projector_part, scale_parts, square_types, view_of

__all__ = ["NAME", "PLUGIN", "FourierVLM", "fouriervlm_flops"]


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


# ---------------------------------------------------------------------------------------------- FLOPs


def fouriervlm_flops(dim: int, grid: tuple[int, int], budget: int, *, batch: int = 1) -> dict[str, int]:
    """:class:`FourierVLM`: one ``[C², H·W] x [H·W, D]`` product (DCT, crop and inverse DCT folded)."""
    return scale_parts({"low_pass": 2 * budget * grid[0] * grid[1] * dim}, batch)


# ---------------------------------------------------------------------------------------------- LLaVA

NAME = NameForm("fouriervlm_k{K}")


def _factory(context: BuildContext) -> BuiltProjector:
    name, budget = context.projector_type, name_count(context.match)
    check_patch_features(context)
    cutoff = math.isqrt(budget)
    if cutoff * cutoff != budget:
        raise ValueError(
            f"mm_projector_type {name!r}: Fourier-VLM keeps a CxC block of frequencies, so K must be a perfect square "
            f"(4, 9, 16, 25, ...), got {budget}"
        )
    if context.tower is not None:
        grid = context.tower.grid
        if cutoff > min(grid):
            accepted = [c * c for c in range(1, min(grid) + 1)]
            raise ValueError(
                f"mm_projector_type {name!r} needs C={cutoff} but the {grid[0]}x{grid[1]} grid allows at most C={min(grid)}; "
                f"accepted budgets: {accepted}"
            )
    settings = Resolved(context)
    module = FourierVLM(context.mm_hidden, budget, rescale=bool(settings.get("mm_fouriervlm_rescale", False)))
    return BuiltProjector(CompressThenProject(module, context.mm_hidden, context.hidden), settings.keys)


def _cost(context: BuildContext, setting: CostSetting) -> ModuleCost:
    """The folded DCT low-pass, then ``mlp2x_gelu`` on K."""
    budget = cost_budget("fouriervlm", name_count(context.match), setting)
    cutoff = math.isqrt(budget)
    if cutoff * cutoff != budget or cutoff > min(setting.grid):
        raise ValueError(f"fouriervlm gives C² tokens with C at most {min(setting.grid)}, so {budget} is not a budget it can give")
    return ModuleCost(context.projector_type, budget, "pre", fouriervlm_flops(setting.mm_hidden, setting.grid, budget),
                      projector_part(budget, setting))



def _view(projector: Any, inputs: ViewInputs) -> Any:
    """The C x C DCT low-pass view of the image (:func:`braco_patch.view.lowpass_view`, the same basis)."""
    from llava.serve.panels import Picture

    from ..view import lowpass_view

    cutoff = int(projector.compressor.cutoff)
    low = lowpass_view(inputs.image, inputs.grid, cutoff)
    help_text = (f"The image averaged per patch, keeping only the {cutoff}×{cutoff} lowest 2-D DCT frequencies over the patch "
                 f"grid: the coarse layout Fourier-VLM's {cutoff * cutoff} tokens carry (the tokens themselves are the same "
                 "low-pass of the tower features, sampled on a C×C grid).")
    return view_of(inputs, [Picture(f"{cutoff}×{cutoff} DCT low-pass", low)], help_text, f"{cutoff}×{cutoff} low-pass grid", cutoff=cutoff)


PLUGIN = CompressorPlugin(
    name="fouriervlm",
    projectors=(ProjectorType.named(NAME, _factory, "Fourier-VLM: DCT low-pass to a CxC grid (K = C^2), then mlp2x_gelu",
                                    examples=("fouriervlm_k4",)),),
    settings=(Setting("mm_fouriervlm_rescale", bool, "scale by C/sqrt(H*W) so a constant grid keeps its value", default=False),),
    key_prefixes=("mm_fouriervlm_",),
    needs=ModelNeeds(square_grid=True),
    boundary=FourierVLM.boundary,
    view=_view,
    cost=CostModel(module_flops=_cost, types_at_budget=square_types(NAME, "fouriervlm")),
)
