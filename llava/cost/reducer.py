"""The LLM prefill of an in-LLM reducer, counted layer by layer (the cost command's ``--reducer NAME``).

Accounting (stated with every table, never averaged over layers): each decoder layer ``l`` runs its q/k/v/o
projections and its MLP on its own token count ``T_l = text + visual_l`` (``visual_l`` from the plugin's
``CostModel.layer_tokens``; ``text`` is the prompt's other tokens); attention scores ``QKᵀ`` and ``A·V`` over
``T_l x T_l`` only when the accounting counts them (causal or not, the full square, as :mod:`llava.cost.flops`
counts); every selection adds what the seam computes for it explicitly: the layer's ``k_proj`` over its ``T_l`` rows,
``q_proj`` over the selection's query rows and one ``QKᵀ`` row per query and head (the input RMSNorm and the softmax
are elementwise and not counted); the LM head as the accounting says (every kept position or the last).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llava.plugin_api import LMDims, attention_score_flops, linear_flops, llm_prefill_flops, total

__all__ = ["LayerCount", "ReducerPrefill", "per_layer_text", "reducer_prefill", "with_reducer"]


@dataclass(frozen=True)
class LayerCount:
    """One decoder layer: its image and total tokens and FLOPs (``layer`` the layer's own work, ``selection`` the
    attention rows a reducer reading this layer computes)."""

    layer: int
    visual: int
    tokens: int
    flops: int
    selection: int = 0


@dataclass(frozen=True)
class ReducerPrefill:
    """A reducer's LLM prefill, by layer, and the same prefill without it."""

    name: str
    method: str
    layers: tuple[LayerCount, ...]
    lm_head: int
    baseline: int
    accounting: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(row.flops + row.selection for row in self.layers) + self.lm_head

    @property
    def per_layer(self) -> str:
        """The image tokens each decoder layer sees, run-length written (``576 x2, 288 x30``)."""
        return per_layer_text([row.visual for row in self.layers])

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "method": self.method, "total": self.total, "baseline": self.baseline,
                "lm_head": self.lm_head, "accounting": self.accounting, "per_layer": self.per_layer,
                "layers": [vars(row) for row in self.layers]}


def per_layer_text(counts: list[int]) -> str:
    """``[576, 576, 288, ...]`` → ``"576 x2, 288 x30"``: each run of equal counts once, with its length."""
    runs: list[list[int]] = []
    for count in counts:
        if runs and runs[-1][0] == count:
            runs[-1][1] += 1
        else:
            runs.append([count, 1])
    return ", ".join(f"{count} x{length}" for count, length in runs)


def _layer_flops(lm: LMDims, tokens: int, count_attention: bool) -> int:
    one = LMDims(lm.hidden, lm.intermediate, 1, lm.heads, lm.kv_heads, lm.head_dim, lm.vocab)
    parts = llm_prefill_flops(one, tokens, count_attention=count_attention, lm_head="last")
    return total(parts) - parts["lm_head"]


def _selection_flops(lm: LMDims, tokens: int, queries: int) -> int:
    q_width, kv_width = lm.heads * lm.head_dim, lm.kv_heads * lm.head_dim
    scores = attention_score_flops(queries, tokens, lm.heads, lm.head_dim) // 2  # QKᵀ only, no A·V
    return linear_flops(tokens, lm.hidden, kv_width) + linear_flops(queries, lm.hidden, q_width) + scores


def reducer_prefill(name: str, lm: LMDims, visual: int, text: int, *, count_attention: bool = False,
                    lm_head: str = "all", depth: int | None = None) -> ReducerPrefill:
    """The per-layer prefill of reducer ``name`` on an LLM of ``lm`` with ``visual`` image and ``text`` other tokens.

    ``depth`` counts only the first ``depth`` decoder layers of that LLM (a capped measurement): the reducer acts as on
    the whole LLM, its steps at later layers do not run, and the LM head reads the last counted layer's rows.

    Raises:
        UserError: For an unknown reducer, or one whose plugin declares no ``layer_tokens``.
    """
    from llava.model.reducers import build_steps, resolve_reducer
    from llava.utils import UserError

    choice = resolve_reducer(name)
    cost = choice.plugin.cost
    if cost is None or cost.layer_tokens is None:
        raise UserError(f"reducer {name!r} ({choice.plugin.name}) declares no per-layer token count, so its cost cannot be counted")
    per_layer = list(cost.layer_tokens(choice.build(lm), visual))
    if len(per_layer) != lm.layers:
        raise ValueError(f"reducer {name!r} counted {len(per_layer)} layers for a {lm.layers}-layer LLM")
    depth = lm.layers if depth is None else min(depth, lm.layers)
    per_layer = per_layer[:depth]
    steps = build_steps(name, _config_of(lm))
    selection: dict[int, int] = {}
    for group in steps.values():
        for step in group:
            if step.layer >= depth:
                continue
            queries = step.query_rows if step.query_rows is not None else text
            # the rows a selection reads: the reducing layer's input before its drop (= the layer before's rows)
            seen = (per_layer[step.layer - 1] if step.layer > 0 else visual) + text
            selection[step.attention_layer] = selection.get(step.attention_layer, 0) + _selection_flops(lm, seen, queries)
    rows = tuple(
        LayerCount(layer, count, count + text, _layer_flops(lm, count + text, count_attention), selection.get(layer, 0))
        for layer, count in enumerate(per_layer)
    )
    head_rows = rows[-1].tokens if lm_head == "all" else 1
    baseline = depth * _layer_flops(lm, visual + text, count_attention) + linear_flops(visual + text if lm_head == "all" else 1, lm.hidden, lm.vocab)
    accounting = {"text_tokens": text, "count_attention": count_attention, "lm_head": lm_head, "layers": f"{depth} of {lm.layers}",
                  "per_layer": "every layer at its own token count; selections counted at the layer whose attention they read"}
    return ReducerPrefill(name, choice.plugin.name, rows, linear_flops(head_rows, lm.hidden, lm.vocab), baseline, accounting)


def _config_of(lm: LMDims) -> Any:
    """A config-like object with the LLM's dimensions (what :func:`llava.model.reducers.build_steps` reads)."""
    from types import SimpleNamespace

    return SimpleNamespace(hidden_size=lm.hidden, intermediate_size=lm.intermediate, num_hidden_layers=lm.layers,
                           num_attention_heads=lm.heads, num_key_value_heads=lm.kv_heads, head_dim=lm.head_dim,
                           vocab_size=lm.vocab)


def with_reducer(prefill: dict[str, Any], name: str, lm: LMDims, text: int, *, count_attention: bool = True,
                 lm_head: str = "last") -> dict[str, Any]:
    """A prefill count (by default a checkpoint's, :func:`llava.cost.pipeline.checkpoint_prefill_flops`: attention
    scores counted, LM head on the last position; else counted as ``count_attention`` / ``lm_head`` say) with its
    LLM part replaced by reducer ``name``'s per-layer count over the prefill's own visual tokens (a compressor's
    output, then reduced inside the LLM: both are counted).

    Adds ``"reducer"`` (:meth:`ReducerPrefill.to_dict`) and ``"per_layer"`` (the image tokens per layer).

    Raises:
        UserError: For an unknown reducer or one without a per-layer count.
        ValueError: If the reducer's no-reduction count disagrees with the checkpoint's LLM count (a bug).
    """
    table = reducer_prefill(name, lm, int(prefill["visual_tokens"]), text, count_attention=count_attention, lm_head=lm_head)
    if table.baseline != prefill["llm"]:
        raise ValueError(f"the per-layer count without {name!r} ({table.baseline}) differs from the prefill's LLM count "
                         f"({prefill['llm']}); the two accountings disagree")
    return {**prefill, "llm": table.total, "total": prefill["total"] - prefill["llm"] + table.total,
            "reducer": table.to_dict(), "per_layer": table.per_layer}
