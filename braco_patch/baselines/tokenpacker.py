"""TokenPacker (Li et al., IJCV 2025; CircleRadon/TokenPacker): region-restricted point queries, then the MLP.

It replaces the ``mlp2x_gelu`` projector:

1. **Point queries**: the select-layer features on the ``G x G`` grid, bilinearly downsampled to
   ``(G/s) x (G/s)`` (``align_corners=False``, no antialiasing: each query reads the 2 x 2 pixels at the
   centre of its own region), then ``LN_q(W_q q)`` (no bias).
2. **Keys/values**: ``LN(mlp(x_multi))`` with ``mlp`` = Linear(4D → D), GELU, Linear(D → D), on the
   multi-level features (CLIP layers 12/16/22/23 concatenated).
3. **Point-to-region attention**: query ``r`` attends (8 heads) only to the ``s²`` keys of its own ``s x s``
   region (the repository's ``divide_feature`` + MultiheadAttention), no residual.
4. **MLP**: Linear(D → d_llm), GELU, Linear(d_llm → d_llm).

So a query's output depends only on the features inside its own region.

Budget rule: ``K = (G/s)²`` with ``s`` dividing ``G`` (the repository raises when it does not): on 24 x 24,
K ∈ {1, 4, 9, 16, 36, 64, 144, 576} (s = 12/8/6 for 4/9/16); **K = 25 is refused** (s = 24/5 is not an integer).

Boundary: post-projector (the module ends in the LLM's width: ``[B, G², D] → [B, K, d_llm]``).
Trainable: everything above (37 M for D = 1024, d_llm = 4096).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._common import CrossAttention, check_count, check_tokens, concat_levels, region_index, region_scale, region_tokens

__all__ = ["TokenPacker"]


def _kv_mlp(d_in: int, d: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d), nn.GELU(), nn.Linear(d, d))


class TokenPacker(nn.Module):
    """Point-to-region packing projector.

    Args:
        dim: tower width D (select layer; also the attention width).
        out_dim: LLM hidden size d_llm.
        budget: K = (G/s)².
        grid_side: G (24 for CLIP-L/336).
        level_dim: width of the concatenated multi-level features (default ``4·dim``).
        heads: attention heads (``D // 128`` = 8 in the repository).
    """

    boundary = "post"
    needs = frozenset({"levels"})

    def __init__(self, dim: int, out_dim: int, budget: int, grid_side: int, *, level_dim: int | None = None, heads: int | None = None) -> None:
        super().__init__()
        self.dim, self.out_dim = check_count(dim, "dim"), check_count(out_dim, "out_dim")
        self.grid_side = check_count(grid_side, "grid_side")
        self.scale = region_scale(budget, grid_side, "TokenPacker")
        self.budget = budget
        self.level_dim = 4 * dim if level_dim is None else check_count(level_dim, "level_dim")
        heads = max(dim // 128, 1) if heads is None else check_count(heads, "heads")
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = _kv_mlp(self.level_dim, dim)
        self.v_proj = _kv_mlp(self.level_dim, dim)
        self.ln_q, self.ln_k, self.ln_v = (nn.LayerNorm(dim, eps=1e-6) for _ in range(3))
        self.attn = CrossAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, out_dim), nn.GELU(), nn.Linear(out_dim, out_dim))

    @property
    def output_tokens(self) -> int:
        return self.budget

    def regions(self, device: torch.device | None = None) -> torch.Tensor:
        """``[K, s²]`` grid positions each output token attends to (row-major regions), e.g. for a demo view."""
        return region_index(self.grid_side, self.scale, device)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, out_dim={self.out_dim}, budget={self.budget}, grid_side={self.grid_side}, scale={self.scale}"

    def point_queries(self, features: torch.Tensor) -> torch.Tensor:
        """``[B, G², D]`` → ``[B, K, D]``: bilinear downsampling by ``s`` (computed in float32)."""
        g, out = self.grid_side, self.grid_side // self.scale
        grid = features.float().reshape(features.shape[0], g, g, -1).permute(0, 3, 1, 2)
        small = F.interpolate(grid, size=(out, out), mode="bilinear", align_corners=False)
        return small.permute(0, 2, 3, 1).reshape(features.shape[0], out * out, -1).to(features.dtype)

    def forward(self, features: torch.Tensor, levels: torch.Tensor | Sequence[torch.Tensor] | Mapping[int, torch.Tensor]) -> torch.Tensor:
        """``features [B, G², D]`` and multi-level ``levels`` (``[B, G², level_dim]`` or its parts) → ``[B, K, d_llm]``."""
        check_tokens(features, self.dim)
        if features.shape[1] != self.grid_side**2:
            g = self.grid_side
            raise ValueError(f"TokenPacker was built for a {g}x{g} grid ({g * g} tokens), got {features.shape[1]}")
        multi = concat_levels(levels, self.level_dim)
        q = self.ln_q(self.q_proj(self.point_queries(features))).unsqueeze(2)  # [B, K, 1, D]
        k = region_tokens(self.ln_k(self.k_proj(multi)), self.grid_side, self.scale)  # [B, K, s², D]
        v = region_tokens(self.ln_v(self.v_proj(multi)), self.grid_side, self.scale)
        return self.mlp(self.attn(q, k, v).squeeze(2))
