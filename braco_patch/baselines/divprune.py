"""DivPrune (Alvar et al., CVPR 2025; vbdi/divprune): diversity-based pruning after the projector.

Training-free and prompt-independent. On the projected image tokens (the LLM's input embeddings of the
image), with the cosine distance ``d(i, j) = 1 − cos(x_i, x_j)``:

1. the first token is the most isolated one, ``argmax_j min_{i≠j} d(i, j)`` (the repository takes the
   second-smallest entry of each column, the smallest being the token itself);
2. each next token maximises its distance to the chosen set, ``argmax_j min_{i∈S} d(i, j)``
   (greedy max–min / farthest-point selection);
3. the kept tokens are returned in their original (ascending grid) order, as the repository does when it
   sorts the kept positions before cutting the sequence.

Ties go to the lowest index (``torch.argmax``), as in the repository. The original reads batch index 0
only; here every sample runs its own selection, vectorised over the batch, with chosen tokens masked
explicitly rather than through their zero self-distance. Distances are computed in float32.

Boundary: post-projector (``[B, N, d_llm] → [B, K, d_llm]``); no parameters; any ``1 ≤ K ≤ N``.
The original's budget is a ratio (``SUBSET_RATIO``, ``K = round(ratio·N)``); here it is K itself.

One file on the plugin API: the module, its FLOPs, its LLaVA factory (``divprune_k{K}``: ``mlp2x_gelu``, then the
selection, so ``mlp2x_gelu`` weights ``0.*``/``2.*`` load unchanged), cost, view and :data:`PLUGIN`.
"""

from __future__ import annotations

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
    ViewInputs,
    mlp_projector,
)

from ._common import check_count, check_tokens
from ._plugin import check_selection_budget, cost_budget, name_count, projector_part, scale_parts, view_of

__all__ = ["DivPrune", "NAME", "PLUGIN", "cosine_distance", "divprune_flops", "divprune_select"]


def cosine_distance(x: torch.Tensor) -> torch.Tensor:
    """``[B, N, d]`` → ``[B, N, N]`` float32 ``1 − cos``."""
    unit = nn.functional.normalize(x.float(), dim=-1)
    return 1.0 - torch.matmul(unit, unit.transpose(1, 2))


def divprune_select(tokens: torch.Tensor, budget: int) -> torch.Tensor:
    """Greedy max–min selection order, ``[B, N, d]`` → ``[B, K]`` indices in the order they were picked."""
    dist = cosine_distance(tokens)
    b, n, _ = dist.shape
    eye = torch.eye(n, dtype=torch.bool, device=dist.device)
    # Step 1: distance of every token to its nearest other token; the most isolated one starts the set.
    nearest = dist.masked_fill(eye, float("inf")).amin(dim=1)
    first = nearest.argmax(dim=1)
    picks = [first]
    chosen = torch.zeros(b, n, dtype=torch.bool, device=dist.device)
    rows = torch.arange(b, device=dist.device)
    chosen[rows, first] = True
    to_set = dist[rows, first]  # [B, N]: min distance of every token to the chosen set
    for _ in range(budget - 1):
        nxt = to_set.masked_fill(chosen, float("-inf")).argmax(dim=1)
        picks.append(nxt)
        chosen[rows, nxt] = True
        to_set = torch.minimum(to_set, dist[rows, nxt])
    return torch.stack(picks, dim=1)


class DivPrune(nn.Module):
    """Keep ``budget`` mutually distant tokens of the projected image sequence.

    Args:
        budget: K, tokens kept per image (any positive integer up to the token count).
        dim: optional token width, checked when given (d_llm after the projector).
    """

    boundary = "post"
    needs: frozenset[str] = frozenset()

    def __init__(self, budget: int, *, dim: int | None = None) -> None:
        super().__init__()
        self.budget = check_count(budget)
        self.dim = None if dim is None else check_count(dim, "dim")

    @property
    def output_tokens(self) -> int:
        return self.budget

    def extra_repr(self) -> str:
        return f"budget={self.budget}"

    def select(self, tokens: torch.Tensor) -> torch.Tensor:
        """Kept token indices ``[B, K]`` in ascending (original) order."""
        if tokens.dim() != 3:
            raise ValueError(f"expected projected tokens of shape [batch, tokens, dim], got {tuple(tokens.shape)}")
        if self.dim is not None:
            check_tokens(tokens, self.dim, "projected tokens")
        if self.budget > tokens.shape[1]:
            raise ValueError(f"DivPrune cannot keep {self.budget} of {tokens.shape[1]} tokens; the budget must be at most the token count")
        with torch.no_grad():
            return divprune_select(tokens, self.budget).sort(dim=1).values

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[B, N, d]`` → ``[B, K, d]`` (gradients flow to the kept tokens)."""
        idx = self.select(tokens)
        return torch.gather(tokens, 1, idx.unsqueeze(-1).expand(-1, -1, tokens.shape[-1]))


# ---------------------------------------------------------------------------------------------- FLOPs


def divprune_flops(tokens: int, dim: int, budget: int, *, batch: int = 1) -> dict[str, int]:
    """:class:`DivPrune`: the ``N x N`` cosine similarity, ``2·N²·d``; the greedy steps are reductions."""
    del budget  # the K greedy steps are min/argmax reductions: not counted
    return scale_parts({"similarity": 2 * tokens * tokens * dim}, batch)


# ---------------------------------------------------------------------------------------------- LLaVA

NAME = NameForm("divprune_k{K}")


def _factory(context: BuildContext) -> BuiltProjector:
    budget = name_count(context.match)
    if context.tower is not None:
        grid = context.tower.grid
        check_selection_budget(budget, grid, context.projector_type, grid[0] * grid[1])
    return BuiltProjector(nn.Sequential(*mlp_projector(context.mm_hidden, context.hidden, 2), DivPrune(budget)))


def _cost(context: BuildContext, setting: CostSetting) -> ModuleCost:
    """``mlp2x_gelu`` on all N tokens (the projector part), then the ``N x N`` similarity in the LLM width."""
    budget, n = cost_budget("divprune", name_count(context.match), setting), setting.tokens
    module = divprune_flops(n, setting.lm.hidden, budget)
    return ModuleCost(context.projector_type, budget, "post", module, projector_part(n, setting), "projector on all N tokens, then selection")


def _view(projector: Any, inputs: ViewInputs) -> Any:
    """Kept positions on the projected tokens (``details["kept"]``, ascending)."""
    from llava.serve.panels import kept_positions_picture

    selector = projector[-1]
    with torch.no_grad():
        projected = projector[:-1](inputs.features)
        kept = selector.select(projected)[0].tolist()
    if projected.shape[1] == inputs.tokens_uncompressed + 1:  # cls_patch features: position 0 is the CLS token
        kept = [index - 1 for index in kept if index > 0]
    picture = kept_positions_picture(f"kept {len(kept)} of {inputs.tokens_uncompressed}", inputs.image, inputs.grid, kept)
    help_text = "Bright patches are the projected tokens DivPrune keeps: each next one is the farthest (cosine) from those already kept."
    return view_of(inputs, [picture], help_text, kept=kept)


PLUGIN = CompressorPlugin(
    name="divprune",
    projectors=(ProjectorType.named(NAME, _factory, "DivPrune: mlp2x_gelu, then greedy max-min diversity selection of K tokens",
                                    examples=("divprune_k4",)),),
    key_prefixes=("mm_divprune_",),
    needs=ModelNeeds(),
    boundary=DivPrune.boundary,
    view=_view,
    cost=CostModel(module_flops=_cost),
    video_showcase=(NAME.format(K=16),),
)
