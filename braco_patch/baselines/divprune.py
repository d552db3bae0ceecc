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
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ._common import check_count, check_tokens

__all__ = ["DivPrune", "cosine_distance", "divprune_select"]


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
