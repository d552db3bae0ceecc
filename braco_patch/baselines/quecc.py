"""QueCC (Li et al., ICLR 2025, "Inference-optimal VLMs need only one visual token"; locuslab/llava-token-compression).

Prompt-conditioned regional queries, between the tower and the ``mlp2x_gelu`` projector:

1. **Text pass**: the user's prompt runs once through the LLM; the last-layer hidden state of its last
   (non-padding) token, ``t [B, d_text]``, is projected, ``T = LN(W_t t)``, and added to every tower feature
   of the select layer: ``x' = x + T``.
2. **Queries**: ``Q = q_mlp(x')`` (Linear, GELU, Linear, LayerNorm), downsampled on the ``G x G`` grid by a
   depthwise convolution with kernel = stride = ``s``: one query per ``s x s`` region, ``K = (G/s)²``.
3. **Regional cross-attention**: keys and values are ``k_mlp``/``v_mlp`` (Linear, GELU, Linear, LayerNorm) of
   the multi-level tower features (layers 12/16/22/23 of CLIP-L concatenated, width ``4D``); query ``r``
   attends (8 heads) only to the ``s²`` tokens of its own region ``r``.

Output: ``[B, K, D]``, regions in row-major order, then the projector. The text pass itself belongs to the
seam (it owns the LLM); this module takes its hidden states ``[B, L, d_text]`` and mask ``[B, L]``.

Budget rule: ``K = (G/s)²`` with ``s`` dividing ``G`` (:func:`region_scale`): on 24 x 24, K ∈ {1, 4, 9, 16,
36, 64, 144, 576}; **K = 25 is refused** — a 5 x 5 query grid needs ``s = 24/5``, which is not an integer
(the paper omits QueCC at 25 tokens for this reason). The grid is fixed at construction (the conv kernel is).

Boundary: pre-projector. Trainable: text projection, query/key/value MLPs, the depthwise conv, the attention.

One file on the plugin API: the module, its FLOPs, its LLaVA factory (``quecc_k{K}``: QueCC, keys ``compressor.*``,
then ``mlp2x_gelu``, ``0.*``/``2.*``; it reads the multi-level tower layers it resolves and each sample's question,
run through the LLM here), cost, view and :data:`PLUGIN`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn

from llava.plugin_api import (
    BuildContext,
    BuiltProjector,
    CompressorPlugin,
    CostModel,
    CostSetting,
    LMDims,
    ModelNeeds,
    ModuleCost,
    NameForm,
    ProjectorType,
    Setting,
    linear_flops,
    llm_prefill_flops,
)

from ._common import CrossAttention, check_count, check_tokens, concat_levels, region_index, region_scale, region_tokens
from ._plugin import (
    LAYERS_HELP,
    CompressThenProject,
    Resolved,
    attention_flops,
    cost_budget,
    mlp2_flops,
    name_count,
    projector_part,
    regional,
    regions_view,
    scale_parts,
    square_grid_of,
    square_types,
)

__all__ = ["NAME", "PLUGIN", "QueCC", "QueCCCompressor", "last_token_state", "quecc_flops", "quecc_text_pass_flops", "quecc_text_states"]


def _mlp(d_in: int, d: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d), nn.GELU(), nn.Linear(d, d), nn.LayerNorm(d, eps=1e-6))


def last_token_state(states: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``[B, L, d]`` hidden states → ``[B, d]`` at each row's last position whose mask is 1 (any padding side)."""
    if states.dim() != 3:
        raise ValueError(f"expected prompt hidden states of shape [batch, length, dim], got {tuple(states.shape)}")
    if mask is None:
        return states[:, -1]
    if mask.shape != states.shape[:2]:
        raise ValueError(f"expected a prompt mask of shape {tuple(states.shape[:2])}, got {tuple(mask.shape)}")
    positions = torch.arange(states.shape[1], device=states.device)
    last = (mask.bool() * (positions + 1)).argmax(dim=1)  # the largest masked position
    return states[torch.arange(states.shape[0], device=states.device), last]


class QueCC(nn.Module):
    """Query-conditioned convolutional compression.

    Args:
        dim: tower width D (select layer).
        budget: K = (G/s)².
        grid_side: G, the tower's grid side (24 for CLIP-L/336).
        text_dim: width of the LLM hidden states (4096 for Vicuna-7B).
        level_dim: width of the concatenated multi-level features (default ``4·dim``: four layers).
        heads: attention heads (8 in the repository).
    """

    boundary = "pre"
    needs = frozenset({"levels", "text"})

    def __init__(self, dim: int, budget: int, grid_side: int, text_dim: int, *, level_dim: int | None = None, heads: int = 8) -> None:
        super().__init__()
        self.dim = check_count(dim, "dim")
        self.grid_side = check_count(grid_side, "grid_side")
        self.scale = region_scale(budget, grid_side, "QueCC")
        self.budget = budget
        self.text_dim = check_count(text_dim, "text_dim")
        self.level_dim = 4 * dim if level_dim is None else check_count(level_dim, "level_dim")
        self.text_projection = nn.Sequential(nn.Linear(text_dim, dim), nn.LayerNorm(dim, eps=1e-6))
        self.q_mlp = _mlp(dim, dim)
        self.k_mlp = _mlp(self.level_dim, dim)
        self.v_mlp = _mlp(self.level_dim, dim)
        self.q_downsample = nn.Conv2d(dim, dim, kernel_size=self.scale, stride=self.scale, groups=dim)
        self.attn = CrossAttention(dim, heads)

    @property
    def output_tokens(self) -> int:
        return self.budget

    def regions(self, device: torch.device | None = None) -> torch.Tensor:
        """``[K, s²]`` grid positions each output token attends to (row-major regions), e.g. for a demo view."""
        return region_index(self.grid_side, self.scale, device)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, budget={self.budget}, grid_side={self.grid_side}, scale={self.scale}, level_dim={self.level_dim}"

    def queries(self, features: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Steps 1–2: ``[B, N, D]`` and pooled text ``[B, d_text]`` → ``[B, K, D]`` region queries."""
        x = features + self.text_projection(text).unsqueeze(1)
        g = self.grid_side
        q = self.q_mlp(x).transpose(1, 2).reshape(x.shape[0], self.dim, g, g)
        return self.q_downsample(q).flatten(2).transpose(1, 2)

    def forward(
        self,
        features: torch.Tensor,
        levels: torch.Tensor | Sequence[torch.Tensor] | Mapping[int, torch.Tensor],
        text_states: torch.Tensor,
        text_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``features [B, G², D]``, multi-level ``levels`` (``[B, G², level_dim]`` or its parts), the prompt's
        LLM hidden states ``[B, L, d_text]`` (or ``[B, d_text]`` already pooled) and mask ``[B, L]`` → ``[B, K, D]``."""
        check_tokens(features, self.dim)
        if features.shape[1] != self.grid_side**2:
            raise ValueError(f"QueCC was built for a {self.grid_side}x{self.grid_side} grid ({self.grid_side**2} tokens), got {features.shape[1]}")
        multi = concat_levels(levels, self.level_dim)
        text = text_states if text_states.dim() == 2 else last_token_state(text_states, text_mask)
        if text.shape != (features.shape[0], self.text_dim):
            raise ValueError(f"expected prompt states of width {self.text_dim} for {features.shape[0]} images, got {tuple(text_states.shape)}")
        q = self.queries(features, text.to(features.dtype)).unsqueeze(2)  # [B, K, 1, D]
        kv_k = region_tokens(self.k_mlp(multi), self.grid_side, self.scale)  # [B, K, s², D]
        kv_v = region_tokens(self.v_mlp(multi), self.grid_side, self.scale)
        return self.attn(q, kv_k, kv_v).squeeze(2)


class QueCCCompressor(QueCC):
    """:class:`QueCC` that treats a missing prompt (zero-width states) as a zero text vector."""

    def forward(self, features, levels, text_states, text_mask=None):  # noqa: D102 - see QueCC.forward
        if text_states.dim() == 2 and text_states.shape[1] == 0:
            text_states = features.new_zeros(features.shape[0], self.text_dim)
        return super().forward(features, levels, text_states, text_mask)


def quecc_text_states(inputs: Any, features: torch.Tensor) -> torch.Tensor:
    """``[B, d_text]``: the LLM's last-layer state at the last token of each image's question.

    The question (``CompressorInputs.prompt`` for a plugin that asked for ``text="question"``) is the first user
    turn without image markers, tokenized on its own with the tokenizer's special tokens (LLaMA: BOS), as the
    release re-tokenizes it. Each runs on its own (``[1, L_i, hidden]``, no padding), so an image's tokens never
    depend on the batch. The pass carries no gradient into the LLM (the text projection after it trains).
    Without text (``encode_images`` called on its own, e.g. the demo's token count) the state is zero, and so is
    an image's whose question has no token at all (stage 1's ``plain`` samples have no question; on a tokenizer
    that adds no BOS, e.g. Qwen2's, that leaves nothing to run).
    """
    width = int(features.shape[0])
    prompts = inputs.prompt
    if prompts is None or inputs.run_language_model is None:
        return features.new_zeros(width, 0)
    states = []
    with torch.no_grad():
        for embeds in prompts:
            if embeds.shape[0] == 0:  # no question: stage-1 'plain' samples keep only the image (no BOS in Qwen2)
                states.append(embeds.new_zeros(embeds.shape[-1]))
                continue
            states.append(inputs.run_language_model(embeds.unsqueeze(0))[0, -1])
    return torch.stack(states).to(device=features.device, dtype=features.dtype)


# ---------------------------------------------------------------------------------------------- FLOPs


def quecc_flops(
    dim: int, grid_side: int, budget: int, text_dim: int, *, level_dim: int | None = None, count_attention: bool = False, batch: int = 1
) -> dict[str, int]:
    """:class:`QueCC` without the prompt pass (see :func:`quecc_text_pass_flops`).

    Text projection ``2·d_text·D``, its ``add`` to the N features, the query MLP on N tokens, the depthwise
    conv ``2·K·D·s²``, key/value MLPs on the multi-level features, attention over ``s²`` keys per query.
    """
    n, s = grid_side**2, region_scale(budget, grid_side, "QueCC")
    width = 4 * dim if level_dim is None else level_dim
    parts = {
        "text_projection": linear_flops(1, text_dim, dim),
        "add": n * dim,
        "q_mlp": mlp2_flops(n, dim, dim),
        "q_downsample": 2 * budget * dim * s * s,
        "k_mlp": mlp2_flops(n, width, dim),
        "v_mlp": mlp2_flops(n, width, dim),
    }
    parts.update(attention_flops(budget, n, dim, count_attention, kv_per_query=s * s))
    return scale_parts(parts, batch)


def quecc_text_pass_flops(lm: LMDims, prompt_tokens: int, *, lm_head: str = "all", batch: int = 1) -> dict[str, int]:
    """QueCC's extra pass of the prompt through the LLM (the repository runs the causal-LM forward: logits at
    every position, ``lm_head="all"``)."""
    return scale_parts(llm_prefill_flops(lm, prompt_tokens, lm_head=lm_head), batch)


# ---------------------------------------------------------------------------------------------- LLaVA

NAME = NameForm("quecc_k{K}")


def _levels_and_text(projector: Any, features: torch.Tensor, inputs: Any) -> tuple[list[torch.Tensor], torch.Tensor]:
    return [inputs.layers[index] for index in projector.layers], quecc_text_states(inputs, features)


def _factory(context: BuildContext) -> BuiltProjector:
    budget, settings = name_count(context.match), Resolved(context)
    side, layers = regional(context, budget, "QueCC", settings)
    heads = int(settings.get("mm_quecc_heads", 8))
    dim = context.mm_hidden
    module = QueCCCompressor(dim, budget, side, context.hidden, level_dim=len(layers) * dim, heads=heads)
    needs = ModelNeeds(tower_layers=layers, text="question", square_grid=True)
    return BuiltProjector(CompressThenProject(module, dim, context.hidden, read=_levels_and_text, layers=layers), settings.keys, needs)


def _cost(context: BuildContext, setting: CostSetting) -> ModuleCost:
    """The module plus its extra question pass through the LLM (``setting.prompt_tokens`` tokens, logits at every
    position as the repository's ``forward`` computes them), then ``mlp2x_gelu`` on K."""
    budget = cost_budget("quecc", name_count(context.match), setting)
    side = square_grid_of(setting, "quecc")
    module: dict[str, Any] = dict(quecc_flops(setting.mm_hidden, side, budget, setting.lm.hidden, count_attention=setting.count_attention))
    module["prompt_pass"] = quecc_text_pass_flops(setting.lm, setting.prompt_tokens)
    return ModuleCost(context.projector_type, budget, "pre", module, projector_part(budget, setting),
                      f"prompt pass over {setting.prompt_tokens} question tokens included")



PLUGIN = CompressorPlugin(
    name="quecc",
    projectors=(ProjectorType.named(NAME, _factory, "QueCC: prompt-conditioned regional queries (K = (G/s)^2), then mlp2x_gelu",
                                    examples=("quecc_k4",)),),
    settings=(
        Setting("mm_quecc_layers", str, LAYERS_HELP),
        Setting("mm_quecc_heads", int, "attention heads", default=8, minimum=1),
    ),
    key_prefixes=("mm_quecc_",),
    needs=ModelNeeds(text="question", square_grid=True),  # and the tower layers it resolves (the factory's)
    boundary=QueCC.boundary,
    view=regions_view,
    cost=CostModel(module_flops=_cost, types_at_budget=square_types(NAME, "quecc")),
)
