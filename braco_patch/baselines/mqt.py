"""MQT-LLaVA (Hu et al., NeurIPS 2024; gordonhu608/MQT-LLaVA): a Matryoshka query transformer.

The ``mlp2x_gelu`` projector is replaced by one cross-attention layer ("query abstractor") whose ``Q`` (256)
learned queries carry 2-D sin-cos positions of a ``√Q x √Q`` grid:

    out = (MHA(LN_q(q + p_q), LN_k(keys), LN_v(x))) · W_proj,     W_proj: [D, d_llm], no bias

where ``x`` are the tower features ``[B, N, D]`` and the keys are, as in the release, the 2-D sin-cos
positions of the query grid (rounded to float16, as the release stores them) resized bicubically to the feature grid (``keys="position"``: the attention
pattern then does not depend on the image), or ``LN_k(x + p_x)`` (``keys="features"``: content keys, the
Qwen-VL resampler the release derives from). Queries never attend to each other, so query ``i``'s output
does not depend on how many queries run: **the first m outputs at budget M equal the m-token output**.

Nested (Matryoshka) training: in training mode each forward uses a random prefix of ``m`` queries, ``m``
drawn uniformly from ``{2, 4, …, Q}`` (the release's second stage; ``nested=False`` uses all ``Q``, its
first stage). At inference any ``1 ≤ K ≤ Q`` runs from one checkpoint (``num_tokens``, the release's
``--num_visual_tokens``).

Boundary: pre-projector in the paper's table, but the module *is* the projector: ``[B, N, D] → [B, K, d_llm]``.
Trainable: queries ``[Q, D]``, the attention (q/k/v/out projections with biases), three LayerNorms and
``W_proj`` (8.7 M for D = 1024, d_llm = 4096, Q = 256). The query positions are a fixed buffer.

One file on the plugin API: the module, its FLOPs, its LLaVA factory (``mqt_k{K}``: 256 queries, K at inference;
``mqt_q{Q}``: Q queries), cost, view and :data:`PLUGIN`. ``mm_mqt_num_tokens`` is a runtime setting: K changes on a
loaded model (:class:`MQTProjector`).
"""

from __future__ import annotations

import math
from typing import Any, Literal

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
    RunInfo,
    Setting,
    ViewInputs,
    linear_flops,
)

from ._common import CrossAttention, check_count, check_tokens, sincos_2d, square_side
from ._plugin import Resolved, attention_flops, check_patch_features, cost_budget, name_count, scale_parts, view_of

__all__ = ["BUDGET_NAME", "PLUGIN", "QUERIES_NAME", "MQTAbstractor", "MQTProjector", "mqt_attention", "mqt_flops", "nested_lengths"]


def nested_lengths(num_queries: int) -> list[int]:
    """The prefix lengths drawn in nested training: ``2, 4, …`` up to ``num_queries`` (``[1]`` when it is 1)."""
    return list(range(2, num_queries + 1, 2)) or [num_queries]


class MQTAbstractor(nn.Module):
    """Query transformer with Matryoshka queries.

    Args:
        dim: tower feature width D (also the attention width).
        out_dim: LLM hidden size d_llm.
        num_queries: Q, a perfect square (256 in the release: a 16 x 16 query grid).
        num_tokens: K used in eval mode when ``forward`` gets none (the paper's budgets 4/9/16/25).
        heads: attention heads (16 in the release).
        keys: ``"position"`` (the release) or ``"features"`` (content keys).
        nested: sample a random prefix length in training (the release's stage 2).
    """

    boundary = "pre"
    needs: frozenset[str] = frozenset()

    def __init__(
        self,
        dim: int,
        out_dim: int,
        num_queries: int = 256,
        *,
        num_tokens: int | None = None,
        heads: int = 16,
        keys: Literal["position", "features"] = "position",
        nested: bool = True,
    ) -> None:
        super().__init__()
        self.dim, self.out_dim = check_count(dim, "dim"), check_count(out_dim, "out_dim")
        self.num_queries = check_count(num_queries, "num_queries")
        self.query_side = math.isqrt(num_queries)
        if self.query_side**2 != num_queries:
            raise ValueError(f"num_queries must be a perfect square (queries sit on a grid, 256 = 16x16 in the release), got {num_queries}")
        if keys not in ("position", "features"):
            raise ValueError(f"keys must be 'position' (the release) or 'features', got {keys!r}")
        self.keys = keys
        self.nested = bool(nested)
        self.num_tokens = self.num_queries if num_tokens is None else self._check_tokens(num_tokens)
        self.query = nn.Parameter(nn.init.trunc_normal_(torch.empty(num_queries, dim), std=0.02))
        # The release keeps this table as a float16 parameter (computed in float32, then ``.half()``): rounding it
        # the same way gives the release's query and key positions to float32 precision.
        self.register_buffer("query_pos", sincos_2d(dim, self.query_side, self.query_side).half().float(), persistent=False)
        self.attn = CrossAttention(dim, heads)
        self.ln_q, self.ln_k, self.ln_v = (nn.LayerNorm(dim, eps=1e-6) for _ in range(3))
        self.proj = nn.Parameter(torch.randn(dim, out_dim) * out_dim**-0.5)

    @property
    def output_tokens(self) -> int:
        """K in eval mode (``num_tokens``)."""
        return self.num_tokens

    def extra_repr(self) -> str:
        return f"dim={self.dim}, out_dim={self.out_dim}, num_queries={self.num_queries}, num_tokens={self.num_tokens}, keys={self.keys}"

    def _check_tokens(self, count: int) -> int:
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= self.num_queries:
            raise ValueError(f"MQT-LLaVA can return 1 to {self.num_queries} tokens (its query count), got {count!r}")
        return count

    def key_positions(self, side: int) -> torch.Tensor:
        """``[side², D]``: the query-grid positions resized bicubically to a ``side x side`` feature grid."""
        grid = self.query_pos.reshape(1, self.query_side, self.query_side, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(side, side), mode="bicubic", align_corners=False)
        return grid.permute(0, 2, 3, 1).reshape(side * side, -1)

    def sample_length(self) -> int:
        """A training prefix length, uniform over :func:`nested_lengths` (drawn with the global torch RNG)."""
        lengths = nested_lengths(self.num_queries)
        return lengths[int(torch.randint(len(lengths), ()))]

    def forward(self, features: torch.Tensor, num_tokens: int | None = None) -> torch.Tensor:
        """``[B, N, D]`` (N a square) → ``[B, m, d_llm]``.

        ``m`` is ``num_tokens`` when given; else a random nested length in training (``nested=True``) and
        the module's ``num_tokens`` in eval.
        """
        check_tokens(features, self.dim)
        side = square_side(features.shape[1])
        if num_tokens is not None:
            m = self._check_tokens(num_tokens)
        elif self.training and self.nested:
            m = self.sample_length()
        else:
            m = self.num_tokens
        dtype = features.dtype
        pos = self.key_positions(side).to(dtype)
        q = self.ln_q(self.query[:m].to(dtype) + self.query_pos[:m].to(dtype))
        k = self.ln_k(pos).expand(features.shape[0], -1, -1) if self.keys == "position" else self.ln_k(features + pos)
        v = self.ln_v(features)
        out = self.attn(q.expand(features.shape[0], -1, -1), k, v)
        return torch.matmul(out, self.proj.to(dtype))


class MQTProjector(MQTAbstractor):
    """:class:`MQTAbstractor` as a projector: ``mm_mqt_num_tokens`` changes K on a loaded model."""

    def apply_settings(self, values: dict[str, Any]) -> None:
        if values.get("mm_mqt_num_tokens") is not None:
            self.num_tokens = self._check_tokens(int(values["mm_mqt_num_tokens"]))


# ---------------------------------------------------------------------------------------------- FLOPs


def mqt_flops(
    dim: int, out_dim: int, tokens: int, num_tokens: int, *, keys: str = "position", count_attention: bool = False, batch: int = 1
) -> dict[str, int]:
    """:class:`MQTAbstractor` with ``m = num_tokens`` queries over N = ``tokens`` features.

    ``add``: query + position once per call (``m·D``), plus ``N·D`` per image for content keys ``x + p``. The
    (shared) queries and position keys are projected per image, as the module computes them.
    """
    parts = scale_parts({"add": tokens * dim if keys == "features" else 0}, batch)
    parts["add"] += num_tokens * dim
    parts.update(scale_parts(attention_flops(num_tokens, tokens, dim, count_attention), batch))
    parts["proj"] = batch * linear_flops(num_tokens, dim, out_dim)
    return parts


# ---------------------------------------------------------------------------------------------- LLaVA

BUDGET_NAME = NameForm("mqt_k{K}")
QUERIES_NAME = NameForm("mqt_q{Q}")


def _factory(context: BuildContext) -> BuiltProjector:
    name = context.projector_type
    check_patch_features(context)
    by_queries = QUERIES_NAME.parse(name) is not None
    count = name_count(context.match)
    settings = Resolved(context)
    queries = int(settings.get("mm_mqt_num_queries", count if by_queries else 256))
    if by_queries and queries != count:
        raise ValueError(f"config.json says mm_mqt_num_queries={queries} but mm_projector_type {name!r} means {count} queries; fix one of them")
    tokens = context.setting("mm_mqt_num_tokens")
    tokens = int(tokens) if tokens is not None else (queries if by_queries else count)
    if tokens > queries:
        raise ValueError(f"mm_projector_type {name!r} asks for {tokens} tokens but has {queries} queries; accepted: 1..{queries} (or raise mm_mqt_num_queries)")
    heads = int(settings.get("mm_mqt_heads", 16))
    keys = str(settings.get("mm_mqt_keys", "position"))
    nested = bool(settings.get("mm_mqt_nested", True))
    module = MQTProjector(context.mm_hidden, context.hidden, queries, num_tokens=tokens, heads=heads, keys=keys, nested=nested)
    return BuiltProjector(module, settings.keys)


def _cost(context: BuildContext, setting: CostSetting) -> ModuleCost:
    """The query abstractor at K = ``mm_mqt_num_tokens`` (else the name's count); it ends in the LLM width itself."""
    budget = cost_budget("mqt", int(context.setting("mm_mqt_num_tokens") or name_count(context.match)), setting)
    module = mqt_flops(setting.mm_hidden, setting.lm.hidden, setting.tokens, budget, count_attention=setting.count_attention)
    return ModuleCost(context.projector_type, budget, "pre", module, {}, "ends in the LLM width")


def _run_defaults(run: RunInfo) -> dict[str, Any]:
    """The release: stage 1 trains all queries, stage 2 random nested prefixes."""
    return {"mm_mqt_nested": run.stage != "pretrain"}


#: MQT queries drawn at most in the demo panel (one heat map each).
MQT_PICTURES = 8


def mqt_attention(projector: Any, features: torch.Tensor) -> torch.Tensor:
    """``[B, K, N]`` attention probabilities of the K active queries (heads averaged), recomputed as the module does."""
    module = projector
    side = int(round(features.shape[1] ** 0.5))
    dtype = features.dtype
    m = module.num_tokens
    with torch.no_grad():
        pos = module.key_positions(side).to(dtype)
        q = module.ln_q(module.query[:m].to(dtype) + module.query_pos[:m].to(dtype)).expand(features.shape[0], -1, -1)
        k = module.ln_k(pos).expand(features.shape[0], -1, -1) if module.keys == "position" else module.ln_k(features + pos)
        attn = module.attn
        qh, kh = attn._split(attn.q_proj(q)), attn._split(attn.k_proj(k))
        logits = torch.matmul(qh, kh.transpose(-1, -2)) * (qh.shape[-1] ** -0.5)
        return torch.softmax(logits.float(), dim=-1).mean(dim=1)


def _view(projector: Any, inputs: ViewInputs) -> Any:
    """Attention maps of the first queries over the grid (``arrays["attention"]``: ``[K, H, W]``, heads averaged); with
    the release's position keys these do not depend on the image: that is what the method does."""
    from llava.serve.panels import CompressorView, heat_picture

    weights = mqt_attention(projector, inputs.features)[0]
    rows, cols = inputs.grid
    maps = weights.reshape(-1, rows, cols).cpu().numpy()
    pictures = [heat_picture(f"query {index + 1}", inputs.image, heat) for index, heat in enumerate(maps[:MQT_PICTURES])]
    help_text = (f"Where each of the first {min(len(maps), MQT_PICTURES)} of the {len(maps)} queries looks (attention averaged "
                 "over heads). With position keys (the release) this is the same for every image.")
    view = view_of(inputs, pictures, help_text, f"first {len(maps)} of {projector.num_queries} nested queries")
    return CompressorView(view.summary, view.pictures, view.help, view.details, {"attention": maps})


PLUGIN = CompressorPlugin(
    name="mqt",
    projectors=(
        ProjectorType.named(BUDGET_NAME, _factory, "MQT-LLaVA: nested query transformer (256 queries), K tokens at inference",
                            examples=("mqt_k4",)),
        ProjectorType.named(QUERIES_NAME, _factory, "MQT-LLaVA with Q queries; K = mm_mqt_num_tokens (default Q)",
                            examples=("mqt_q16",)),
    ),
    settings=(
        Setting("mm_mqt_num_queries", int, "Q, learned queries (the release: 256)", default=256, minimum=1),
        Setting("mm_mqt_num_tokens", int,
                "K at inference, any 1..Q from one checkpoint (the release's --num_visual_tokens; default: the name's K, or Q)",
                minimum=1, runtime=True),
        Setting("mm_mqt_heads", int, "attention heads", default=16, minimum=1),
        Setting("mm_mqt_keys", str, "attention keys: the query grid's positions (the release) or the features",
                default="position", choices=("position", "features")),
        Setting("mm_mqt_nested", bool, "train with random nested prefix lengths (default: no in stage 1, yes in stage 2, as the release)"),
    ),
    key_prefixes=("mm_mqt_",),
    run_defaults=_run_defaults,
    needs=ModelNeeds(square_grid=True),
    boundary=MQTAbstractor.boundary,
    view=_view,
    cost=CostModel(module_flops=_cost),
)
