"""Shared pieces of the baseline compressors: input checks, the region rule, region attention, sin-cos positions.

Every rule lives here once (the grid of a token count, the (N/s)² budget rule that QueCC and TokenPacker
share, the layout of s x s regions), so the modules cannot disagree about them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
import torch.nn as nn

__all__ = [
    "BUDGETS",
    "square_side",
    "check_tokens",
    "check_count",
    "per_head_importance",
    "region_scale",
    "region_tokens",
    "region_index",
    "concat_levels",
    "RELEASE_LEVELS",
    "multi_level_layers",
    "CrossAttention",
    "sincos_2d",
]

#: The paper's matched budgets (tab:token-retain); each module accepts more where its rule allows.
BUDGETS = (4, 9, 16, 25)


def square_side(num_tokens: int, what: str = "tokens") -> int:
    """Side ``n`` of an ``n x n`` grid with ``num_tokens`` tokens, or a ``ValueError`` naming the count."""
    side = math.isqrt(max(int(num_tokens), 0))
    if side < 1 or side * side != num_tokens:
        raise ValueError(f"expected {what} on an N×N grid (a square count, no CLS token), got {num_tokens}")
    return side


def check_tokens(x: torch.Tensor, dim: int, name: str = "features") -> None:
    """``x`` must be ``[batch, tokens, dim]``."""
    if x.dim() != 3 or x.shape[-1] != dim:
        raise ValueError(f"expected {name} of shape [batch, tokens, {dim}], got {tuple(x.shape)}")


def check_count(count: int, name: str = "budget") -> int:
    """A positive integer count (tokens, queries), else a ``ValueError``."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"{name} must be a positive integer, got {count!r}")
    return count


def per_head_importance(attention: torch.Tensor, num_patches: int) -> torch.Tensor:
    """Each head's importance of each patch, ``[B, heads, N]`` float32, from attention probabilities ``[B, heads, T, T]``.

    ``T = N + 1`` (CLS first): the CLS token's attention to each patch (its own column dropped). ``T = N`` (a tower
    without CLS, e.g. SigLIP): the attention each patch receives, averaged over the queries.
    """
    if attention.dim() != 4 or attention.shape[-1] != attention.shape[-2] or attention.shape[-1] not in (num_patches, num_patches + 1):
        raise ValueError(
            f"expected attention [batch, heads, T, T] with T = {num_patches + 1} (CLS) or {num_patches} (no CLS), got {tuple(attention.shape)}"
        )
    attention = attention.float()
    return attention[:, :, 0, 1:] if attention.shape[-1] == num_patches + 1 else attention.mean(dim=2)


def region_scale(budget: int, side: int, method: str) -> int:
    """Region side ``s`` such that an ``side x side`` grid gives ``budget = (side / s)²`` regions.

    The rule of QueCC (kernel = stride = s) and TokenPacker (``scale_factor`` s): the output is a
    ``(side/s) x (side/s)`` grid of queries, one per ``s x s`` region, so ``s`` must divide the side.
    """
    check_count(budget)
    out_side = math.isqrt(budget)
    accepted = [(side // s) ** 2 for s in range(side, 0, -1) if side % s == 0]
    if out_side * out_side != budget or side % out_side != 0:
        raise ValueError(
            f"{method} cannot give {budget} tokens on a {side}x{side} grid: it needs a (side/s)² grid of s x s "
            f"regions with s dividing {side}; accepted budgets: {accepted}"
        )
    return side // out_side


def region_index(side: int, scale: int, device: torch.device | None = None) -> torch.Tensor:
    """``[K, s²]`` row-major grid positions of each ``s x s`` region, regions in row-major order.

    Row ``r = i·(side/s) + j`` lists the tokens ``(i·s + a)·side + (j·s + b)`` for ``a, b < s``.
    """
    out = side // scale
    i = torch.arange(out, device=device).view(out, 1, 1, 1)
    j = torch.arange(out, device=device).view(1, out, 1, 1)
    a = torch.arange(scale, device=device).view(1, 1, scale, 1)
    b = torch.arange(scale, device=device).view(1, 1, 1, scale)
    return ((i * scale + a) * side + (j * scale + b)).reshape(out * out, scale * scale)


def region_tokens(x: torch.Tensor, side: int, scale: int) -> torch.Tensor:
    """``[B, side², d]`` grid tokens → ``[B, K, s², d]``, the tokens of each region (see :func:`region_index`)."""
    b, _, d = x.shape
    out = side // scale
    # [B, i, a, j, b, d] -> [B, i, j, a, b, d]: a pure reshape/permute, no gather needed.
    x = x.reshape(b, out, scale, out, scale, d).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, out * out, scale * scale, d)


#: ``hidden_states`` indices that QueCC and TokenPacker concatenate on CLIP-L (24 layers; index 0 = embeddings).
RELEASE_LEVELS = (12, 16, 22, 23)


def multi_level_layers(num_layers: int) -> tuple[int, ...]:
    """``hidden_states`` indices of the multi-level features for a tower of ``num_layers`` layers.

    24 layers: the releases' (12, 16, 22, 23). Other depths: the same relative depths, ``⌊l·L/24 + ½⌋``
    clamped to ``[1, L]`` (a 27-layer SigLIP gets (14, 18, 25, 26); a 2-layer test tower (1, 1, 2, 2)), so
    the concatenated width stays ``4·D``.
    """
    check_count(num_layers, "num_layers")
    return tuple(min(max(math.floor(l * num_layers / 24 + 0.5), 1), num_layers) for l in RELEASE_LEVELS)


def concat_levels(levels: torch.Tensor | Sequence[torch.Tensor] | Mapping[int, torch.Tensor], width: int) -> torch.Tensor:
    """Multi-level tower features as one ``[B, N, width]`` tensor (levels concatenated on the channel axis).

    Accepts the concatenation itself, a list/tuple of ``[B, N, d_l]`` (in order), or ``{layer: [B, N, d_l]}``
    (concatenated in ascending layer order, as the original repositories index ``hidden_states[l]``).
    """
    if isinstance(levels, Mapping):
        levels = [levels[k] for k in sorted(levels)]
    if not isinstance(levels, torch.Tensor):
        if len(levels) == 0:
            raise ValueError("expected at least one tower level, got none")
        levels = torch.cat(list(levels), dim=-1)
    if levels.dim() != 3 or levels.shape[-1] != width:
        raise ValueError(f"expected multi-level features of total width {width} ([batch, tokens, {width}]), got {tuple(levels.shape)}")
    return levels


class CrossAttention(nn.Module):
    """Multi-head attention of queries ``[..., Lq, d]`` over keys/values ``[..., Lk, d]``.

    The math of ``nn.MultiheadAttention`` (biased q/k/v/out projections, softmax(QKᵀ/√h_d)V per head),
    written with plain matmuls over any leading batch axes so that regions can be a batch axis and every
    product is visible to FLOP counters. Softmax runs in float32 (bf16 logits lose the small weights).
    """

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"attention width {dim} is not divisible by {heads} heads; pick a head count that divides it")
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, -1)).transpose(-2, -3)  # [..., heads, L, hd]

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.q_proj(query)), self._split(self.k_proj(key)), self._split(self.v_proj(value))
        logits = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
        weights = torch.softmax(logits.float(), dim=-1).to(v.dtype)
        out = torch.matmul(weights, v).transpose(-2, -3).flatten(-2)
        return self.out_proj(out)


def sincos_2d(dim: int, rows: int, cols: int) -> torch.Tensor:
    """MAE-style 2-D sin-cos positions ``[rows·cols, dim]`` in float64, row-major.

    The first ``dim/2`` channels encode the column index, the rest the row index; each half is
    ``[sin(p·ω), cos(p·ω)]`` with ``ω_i = 10000^(-i/(dim/4))``.
    """
    if dim % 4:
        raise ValueError(f"sin-cos position width must be a multiple of 4, got {dim}")
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float64) / (dim / 4))
    r, c = torch.meshgrid(torch.arange(rows, dtype=torch.float64), torch.arange(cols, dtype=torch.float64), indexing="ij")

    def one(p: torch.Tensor) -> torch.Tensor:
        angles = p.reshape(-1, 1) * omega
        return torch.cat([angles.sin(), angles.cos()], dim=1)

    return torch.cat([one(c), one(r)], dim=1)
