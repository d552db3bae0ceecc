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

One file on the plugin API: the module, its FLOPs, its LLaVA factory (``tokenpacker_k{K}``: it replaces the
projector and reads the multi-level tower layers it resolves), cost, view and :data:`PLUGIN`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

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
    linear_flops,
)

from ._common import CrossAttention, check_count, check_tokens, concat_levels, region_index, region_scale, region_tokens
from ._plugin import (
    LAYERS_HELP,
    Resolved,
    attention_flops,
    cost_budget,
    mlp2_flops,
    name_count,
    regional,
    regions_view,
    scale_parts,
    square_grid_of,
    square_types,
)

__all__ = ["NAME", "PLUGIN", "TokenPacker", "TokenPackerProjector", "tokenpacker_flops"]


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


class TokenPackerProjector(TokenPacker):
    """:class:`TokenPacker` called as ``projector(features, inputs)``: its levels are the tower layers it asked for."""

    def __init__(self, *args: Any, layers: tuple[int, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.layers = tuple(layers)

    def forward(self, features: torch.Tensor, inputs: Any = None) -> torch.Tensor:  # noqa: D102
        if inputs is None:
            raise ValueError("TokenPacker needs the tower's multi-level features; call it through encode_images")
        return super().forward(features, [inputs.layers[index] for index in self.layers])


# ---------------------------------------------------------------------------------------------- FLOPs


def tokenpacker_flops(
    dim: int, out_dim: int, grid_side: int, budget: int, *, level_dim: int | None = None, count_attention: bool = False, batch: int = 1
) -> dict[str, int]:
    """:class:`TokenPacker` including its MLP (it ends in d_llm). Bilinear downsampling is not counted."""
    n, s = grid_side**2, region_scale(budget, grid_side, "TokenPacker")
    width = 4 * dim if level_dim is None else level_dim
    parts = {"q_proj": linear_flops(budget, dim, dim), "k_mlp": mlp2_flops(n, width, dim), "v_mlp": mlp2_flops(n, width, dim)}
    parts.update(attention_flops(budget, n, dim, count_attention, kv_per_query=s * s))
    parts["mlp"] = linear_flops(budget, dim, out_dim) + linear_flops(budget, out_dim, out_dim)
    return scale_parts(parts, batch)


# ---------------------------------------------------------------------------------------------- LLaVA

NAME = NameForm("tokenpacker_k{K}")


def _factory(context: BuildContext) -> BuiltProjector:
    budget, settings = name_count(context.match), Resolved(context)
    side, layers = regional(context, budget, "TokenPacker", settings)
    dim = context.mm_hidden
    heads = int(settings.get("mm_tokenpacker_heads", max(dim // 128, 1)))
    module = TokenPackerProjector(dim, context.hidden, budget, side, level_dim=len(layers) * dim, heads=heads, layers=layers)
    return BuiltProjector(module, settings.keys, ModelNeeds(tower_layers=layers, square_grid=True))


def _cost(context: BuildContext, setting: CostSetting) -> ModuleCost:
    """The packer's attention and key/value MLPs (the module), its own two-layer MLP (the projector part)."""
    budget = cost_budget("tokenpacker", name_count(context.match), setting)
    side = square_grid_of(setting, "tokenpacker")
    parts = dict(tokenpacker_flops(setting.mm_hidden, setting.lm.hidden, side, budget, count_attention=setting.count_attention))
    own_mlp = {"mlp": parts.pop("mlp")}
    return ModuleCost(context.projector_type, budget, "post", parts, own_mlp, "its own MLP is the projector part")



PLUGIN = CompressorPlugin(
    name="tokenpacker",
    projectors=(ProjectorType.named(NAME, _factory, "TokenPacker: point-to-region queries over multi-level features (K = (G/s)^2), then its MLP",
                                    examples=("tokenpacker_k9",)),),
    settings=(
        Setting("mm_tokenpacker_layers", str, LAYERS_HELP),
        Setting("mm_tokenpacker_heads", int, "attention heads (default: D // 128)", minimum=1),
    ),
    key_prefixes=("mm_tokenpacker_",),
    needs=ModelNeeds(square_grid=True),  # and the tower layers it resolves (the factory's)
    boundary=TokenPacker.boundary,
    view=regions_view,
    cost=CostModel(module_flops=_cost, types_at_budget=square_types(NAME, "tokenpacker")),
    video_showcase=(NAME.format(K=16),),
)
