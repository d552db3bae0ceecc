"""Few-kernel forms of the coder's residual step (paper §3.3 "Spatial residual tokens", App. J.2; issue 29).

:mod:`.residual` states step 4 as the paper does, one unit per formula. At batch 1 on a GPU that form is
launch-bound: about a hundred small kernels for a few GEMMs of work. The functions here compute the same
numbers with a handful of kernels, and with no host sync and no data-dependent shape, so that
``torch.compile`` and CUDA graphs capture them whole:

- gradient energy: the two neighbour differences are squared and summed in one ``mse_loss`` + ``sum`` each,
  and one fixed ``[edges, H·W]`` product (:func:`energy_scatter`) adds every edge to both of its tokens
  (``torch.compile`` writes both edge sets into the product's input in one kernel);
- standardisation: one ``layer_norm`` over the grid, whose weight carries the prior weight, the unbiased-std
  correction ``√((L-1)/L)`` and ``1/τ``;
- sparsemax: ``τ* = max_k (Σ_{i≤k} z_(i) - 1) / k`` over the descending sort ``z_(1) ≥ z_(2) ≥ ...``
  (the maximum is reached exactly at the support size, so no support size is ever read): sort, prefix sums,
  one ``addcmul`` with the fixed ``1/k`` (:func:`rank_reciprocals`), max, subtract, clamp. Autograd through it
  gives the sparsemax Jacobian. (The prefix sums as one product with a triangular matrix would save a kernel,
  but cost more than the rest of the selection on a CPU, and 7 of the 87 us of GPU work per call on an H200.)

Every fixed operator is built in float64 once and cast by the coder; the prior, its standardisation and
the selection run in float32 (float64 for a float64 coder), as in :mod:`.residual`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = [
    "MAX_FUSED_TOKENS", "FusedOperators", "energy_scatter", "rank_reciprocals", "working_dtype", "fused_operators",
    "neighbour_energy", "standardised_prior", "prior_gain", "sparsemax_rows",
]

#: Largest grid (H·W tokens) the fused form serves; its edge-to-token matrix holds about ``2 (H·W)²`` floats (8 MiB
#: at 32 x 32). Larger grids keep the step-by-step form of :mod:`.residual`.
MAX_FUSED_TOKENS = 1024

#: ``layer_norm``'s epsilon is inside the square root of the biased variance; this value makes
#: ``√(var_biased + ε)·√(L/(L-1)) = √(var_unbiased + 10⁻¹²)``, i.e. :func:`.residual.standardise`'s
#: ``std + 10⁻⁶`` wherever the energy is not constant (and 0 where it is, as there).
_STD_EPS_SQUARED = 1e-12


class FusedOperators(NamedTuple):
    """The fixed operators of one grid, in the working dtype (float32, or float64) on one device."""

    scatter: torch.Tensor  # [(H-1)·W + H·(W-1), H·W]
    inv_rank: torch.Tensor  # [H·W]: 1/k
    neg_inv_rank: torch.Tensor  # [H·W]: -1/k


def energy_scatter(grid: tuple[int, int]) -> torch.Tensor:
    """The incidence matrix that adds each edge's energy to both of its end tokens (row-major grid).

    Returns:
        ``[(H-1)·W + H·(W-1), H·W]`` float64: the vertical edges first (row ``i·W + j`` has ones at the tokens
        ``(i, j)`` and ``(i+1, j)``), then the horizontal ones (row ``(H-1)·W + i·(W-1) + j``: ``(i, j)``, ``(i, j+1)``).
    """
    h, w = grid
    tokens = torch.arange(h * w).view(h, w)
    vertical = torch.zeros((h - 1) * w, h * w, dtype=torch.float64)
    edges = torch.arange((h - 1) * w)
    vertical[edges, tokens[:-1].flatten()] = 1.0
    vertical[edges, tokens[1:].flatten()] = 1.0
    horizontal = torch.zeros(h * (w - 1), h * w, dtype=torch.float64)
    edges = torch.arange(h * (w - 1))
    horizontal[edges, tokens[:, :-1].flatten()] = 1.0
    horizontal[edges, tokens[:, 1:].flatten()] = 1.0
    return torch.cat([vertical, horizontal])


def rank_reciprocals(length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(1/k, -1/k)`` for ``k = 1 .. L``, so that ``addcmul(-1/k, cumsum(zs), 1/k) = (cumsum(zs) - 1) / k``.

    Returns:
        ``([L], [L])`` float64.
    """
    inv_rank = 1.0 / torch.arange(1, length + 1, dtype=torch.float64)
    return inv_rank, -inv_rank


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the prior and the selection for tokens of ``dtype``: float64 stays, anything else is float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def fused_operators(grid: tuple[int, int], device: torch.device, dtype: torch.dtype = torch.float32) -> FusedOperators:
    """:class:`FusedOperators` for ``grid``, built in float64 and cast to ``dtype`` on ``device`` once."""
    inv_rank, neg_inv_rank = rank_reciprocals(grid[0] * grid[1])
    return FusedOperators(*(t.to(device=device, dtype=dtype) for t in (energy_scatter(grid), inv_rank, neg_inv_rank)))


def neighbour_energy(grid_tokens: torch.Tensor, ops: FusedOperators) -> torch.Tensor:
    """:func:`.residual.gradient_energy` in six kernels: ``[B, H, W, d]`` → ``[B, H·W]``, in the operators' dtype."""
    vertical = F.mse_loss(grid_tokens[:, 1:], grid_tokens[:, :-1], reduction="none").sum(-1).flatten(1)
    horizontal = F.mse_loss(grid_tokens[:, :, 1:], grid_tokens[:, :, :-1], reduction="none").sum(-1).flatten(1)
    return torch.mm(torch.cat([vertical, horizontal], 1), ops.scatter)


def prior_gain(prior_weight: torch.Tensor, temperature: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
    """The ``layer_norm`` weight ``[L]`` of :func:`standardised_prior`: ``prior_weight · √((L-1)/L) / τ`` in ``dtype``."""
    gain = prior_weight.to(dtype) * math.sqrt((length - 1) / length) / temperature.to(dtype)
    return gain.expand(length).contiguous()


def standardised_prior(energy: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    """``gain · standardise(energy)`` in one ``layer_norm``: ``[B, L]`` → ``[B, 1, L]``.

    ``gain`` comes from :func:`prior_gain`, which also undoes the biased variance of ``layer_norm``.
    """
    length = energy.shape[-1]
    return F.layer_norm(energy, (length,), gain, None, _STD_EPS_SQUARED * (length - 1) / length).unsqueeze(1)


def sparsemax_rows(z: torch.Tensor, ops: FusedOperators) -> torch.Tensor:
    """Sparsemax over the last axis of scores ``z [B, S, L]`` (the operators' dtype), in six kernels.

    Rows are independent, and non-finite scores give no error: a row holding a NaN is all NaN, a ``+inf``
    gives NaN at its place and 0 elsewhere (so the token pooled with that row is NaN, as with
    :func:`.residual.select`, which makes such rows all NaN); a ``-inf`` score gets weight 0, the limit of
    sparsemax (:func:`.residual.select` makes that row NaN).
    """
    ordered = torch.sort(z, dim=-1, descending=True).values
    thresholds = torch.addcmul(ops.neg_inv_rank, ordered.cumsum(dim=-1), ops.inv_rank)
    tau = thresholds.amax(dim=-1, keepdim=True)
    return torch.clamp(z - tau, min=0)
