"""A method's cost: the LLM's dimensions (:class:`LMDims`), the FLOP helpers of llava's convention, what a count
depends on (:class:`CostSetting`), one type's count (:class:`ModuleCost`) and a plugin's cost declaration
(:class:`CostModel`). The standard library only."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from .contract import Boundary, BuildContext, TowerShape

if TYPE_CHECKING:  # the reducer's context names LMDims, so it is imported here for annotations only
    from .reducer import ReducerBuild

# ---------------------------------------------------------------------------------------------- cost
# Counted in llava's FLOP convention (the statement: llava.cost.flops.CONVENTION): 1 multiply-add = 2 FLOPs for every
# matrix product, attention scores only when asked, elementwise add/mul (1 per element) inside a compressor only.

LMHead = Literal["all", "last"]


@dataclass(frozen=True)
class LMDims:
    """What the FLOPs of a decoder-only LLM (Llama, Qwen2) depend on."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_config(cls, cfg: Any) -> LMDims:
        """From a ``LlamaConfig`` or ``Qwen2Config`` (grouped-query attention via ``num_key_value_heads``)."""
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        return cls(
            hidden=cfg.hidden_size, intermediate=cfg.intermediate_size, layers=cfg.num_hidden_layers, heads=heads,
            kv_heads=getattr(cfg, "num_key_value_heads", None) or heads, head_dim=head_dim, vocab=cfg.vocab_size,
        )

    def capped(self, layers: int | None) -> LMDims:
        return self if layers is None else replace(self, layers=min(layers, self.layers))


def linear_flops(tokens: int, d_in: int, d_out: int) -> int:
    """``Linear(d_in, d_out)`` on ``tokens`` rows: ``2·T·d_in·d_out`` (bias add not counted)."""
    return 2 * tokens * d_in * d_out


def attention_score_flops(q_tokens: int, k_tokens: int, heads: int, head_dim: int) -> int:
    """``QKᵀ`` and ``A·V`` over the full ``Tq x Tk`` matrix: ``2 · 2·Tq·Tk·heads·head_dim``."""
    return 4 * q_tokens * k_tokens * heads * head_dim


def projector_flops(tokens: int, d_in: int, d_hidden: int, depth: int = 2) -> dict[str, int]:
    """``mlp{depth}x_gelu`` on ``tokens`` tokens: ``Linear(d_in, h)`` then ``depth-1`` x ``Linear(h, h)``."""
    out = {"linear_1": linear_flops(tokens, d_in, d_hidden)}
    for i in range(2, depth + 1):
        out[f"linear_{i}"] = linear_flops(tokens, d_hidden, d_hidden)
    return out


def llm_prefill_flops(dims: LMDims, tokens: int, *, count_attention: bool = False, lm_head: LMHead = "all") -> dict[str, int]:
    """One prefill forward over ``tokens`` positions.

    Per layer: q and o ``2·T·h·(heads·hd)``, k and v ``2·T·h·(kv_heads·hd)`` (grouped-query attention),
    SwiGLU gate/up/down ``3·2·T·h·m``; with ``count_attention`` the scores over all query heads
    ``4·T²·heads·hd`` (full matrix, as dense kernels compute it). ``lm_head``: logits for ``all`` positions
    (what transformers 4.37's prefill computed, so what a profiler of that era saw) or the ``last`` one.
    """
    if lm_head not in ("all", "last"):
        raise ValueError(f"unknown lm_head accounting {lm_head!r}; expected 'all' or 'last'")
    h, q_width, kv_width = dims.hidden, dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
    per_layer_proj = 2 * linear_flops(tokens, h, q_width) + 2 * linear_flops(tokens, h, kv_width)
    return {
        "attention_proj": dims.layers * per_layer_proj,
        "attention_scores": dims.layers * attention_score_flops(tokens, tokens, dims.heads, dims.head_dim) if count_attention else 0,
        "mlp": dims.layers * 3 * linear_flops(tokens, h, dims.intermediate),
        "lm_head": linear_flops(tokens if lm_head == "all" else 1, h, dims.vocab),
    }


def total(costs: Mapping[str, Any]) -> int:
    """Sum of a flat or nested ``{name: FLOPs}`` mapping."""
    return sum(total(v) if isinstance(v, Mapping) else int(v) for v in costs.values())


#: Compressor parts that are elementwise arithmetic (every other part is a matrix product).
ELEMENTWISE_PARTS = frozenset({"gate", "add", "prior", "selection", "scale"})


def elementwise(costs: Mapping[str, Any]) -> int:
    """The elementwise share of a (nested) cost mapping; ``total(costs) - elementwise(costs)`` is matrix products."""
    return sum(elementwise(v) if isinstance(v, Mapping) else (int(v) if k in ELEMENTWISE_PARTS else 0) for k, v in costs.items())


@dataclass(frozen=True)
class CostSetting:
    """What a module's FLOPs depend on besides its own config.

    Attributes:
        mm_hidden: Vision feature width D (the projector's input).
        lm: The LLM's dimensions (its width is the projector's output; prompt-conditioned modules run it).
        grid: ``(H, W)`` patch grid of one view.
        projector_depth: Linear layers of the ``mlp{N}x_gelu`` projector.
        prompt_tokens: Question tokens a prompt-conditioned module runs through the LLM.
        count_attention: Count attention-score products (``QKᵀ``, ``A·V``) inside the module.
        computation: ``official`` (as the method's authors compute it) or ``ours`` (this project's module, where
            it computes the same result with less work); a count without such a difference ignores it.
        variant: One of the cost model's :attr:`CostModel.variants` (another way to count the same module, e.g. a
            release's own computation), or ``None`` for the method's own count.
        tower_layers: The tower's encoder layers, when the pipeline knows them (the context's tower then has them).
        tower_cls: Whether the tower has a CLS token.
    """

    mm_hidden: int
    lm: LMDims
    grid: tuple[int, int]
    projector_depth: int = 2
    prompt_tokens: int = 7
    count_attention: bool = False
    computation: Literal["official", "ours"] = "official"
    variant: str | None = None
    tower_layers: int | None = None
    tower_cls: bool = True

    @property
    def tokens(self) -> int:
        """N = H·W patch tokens of one view."""
        return self.grid[0] * self.grid[1]

    @property
    def tower(self) -> TowerShape | None:
        """The tower's shape as the cost context gives it to a cost function (``None`` when the depth is unknown)."""
        return None if self.tower_layers is None else TowerShape(tuple(self.grid), self.tower_layers, self.tower_cls)


@dataclass(frozen=True)
class ModuleCost:
    """One type's cost for one view: K, boundary and FLOPs by part (``{part: FLOPs}``, nestable).

    ``module`` is the method and any extra work it causes (a question pass through the LLM); ``projector`` the
    ``mlp{N}x_gelu`` it feeds or follows (empty when the module ends in the LLM's width). The pre-projector figure
    is ``module``, the post-projector figure ``module + projector``. ``method`` is filled in by the cost engine.
    """

    projector_type: str
    tokens: int
    boundary: Boundary
    module: Mapping[str, Any] = field(default_factory=dict)
    projector: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""
    method: str = ""

    @property
    def pre(self) -> int:
        """Pre-projector figure: the module alone."""
        return total(self.module)

    @property
    def post(self) -> int:
        """Post-projector figure: the module plus the projector it feeds or follows."""
        return total(self.module) + total(self.projector)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pre": self.pre, "post": self.post}


@dataclass(frozen=True)
class CostModel:
    """A plugin's cost declaration.

    Attributes:
        module_flops: ``module_flops(context, setting) -> ModuleCost``: the type's FLOPs for one view. ``context`` is
            the :class:`BuildContext` its factory would get for the same config (the match, ``context.setting(key)``),
            ``setting`` the pipeline's :class:`CostSetting`. Refuse a type it cannot count (a budget the grid cannot
            give, an input-dependent token count) with one ``ValueError`` sentence.
        types_at_budget: ``types_at_budget(budget) -> [types]`` sending ``budget`` visual tokens per view, or one
            ``ValueError`` sentence when the method never can. Default: each projector type's ``{K}`` form at the
            budget (:meth:`CompressorPlugin.budget_types`).
        variants: Other ways to count the same module, by label, each with what it counts (e.g. ``{"repository":
            "the release's full T x T score matrix"}``); ``module_flops`` reads the chosen one from ``setting.variant``.
        layer_tokens: For a reducer: ``layer_tokens(build, visual) -> [visual tokens per decoder layer]``, the image
            tokens each of the LLM's ``build.lm.layers`` layers runs on when ``visual`` enter the first (one entry
            per layer, never an average; the cost engine counts every layer at its own count).
    """

    module_flops: Callable[[BuildContext, CostSetting], ModuleCost] | None = None
    types_at_budget: Callable[[int], Sequence[str]] | None = None
    variants: Mapping[str, str] = field(default_factory=dict)
    layer_tokens: Callable[[ReducerBuild, int], Sequence[int]] | None = None
