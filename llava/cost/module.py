"""What one projector costs, asked of the plugin that registered it: the typed cost contract.

A compressor plugin declares :class:`CostModel` (``CompressorPlugin.cost``, docs/PLUGINS.md):

- ``module_flops(config, setting) -> ModuleCost``: the module's FLOPs for one view, counted in :mod:`.flops`'s
  convention and split into ``module`` (the compressor, with any extra work it causes, such as a question pass
  through the LLM) and ``projector`` (the ``mlp{N}x_gelu`` it feeds or follows; empty when the module ends in the
  LLM's width itself). ``config`` is the checkpoint's model config, or a namespace holding at least
  ``mm_projector_type``, so the count reads the same keys the factory reads;
- ``types_at_budget(budget) -> [projector types]``: the types that send ``budget`` visual tokens per view, or a
  ``ValueError`` of one sentence when the method cannot give it (e.g. regions that must divide the grid).

Upstream's built-in types (``linear``, ``mlp{N}x_gelu``, ``identity``) declare their cost the same way, as the
built-in plugin. Boundaries (pre- or post-projector):
the pre-projector figure is ``module``, the post-projector figure ``module + projector``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any, Literal

from .flops import LMDims, total

__all__ = ["CostModel", "CostSetting", "ModuleCost", "module_cost", "types_at_budget"]


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
    """

    mm_hidden: int
    lm: LMDims
    grid: tuple[int, int]
    projector_depth: int = 2
    prompt_tokens: int = 7
    count_attention: bool = False
    computation: Literal["official", "ours"] = "official"

    @property
    def tokens(self) -> int:
        """N = H·W patch tokens of one view."""
        return self.grid[0] * self.grid[1]


@dataclass(frozen=True)
class ModuleCost:
    """One projector type's cost for one view: K, boundary and FLOPs by part (``{part: FLOPs}``, nestable)."""

    projector_type: str
    tokens: int
    boundary: Literal["pre", "post"]
    module: Mapping[str, Any] = field(default_factory=dict)
    projector: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""

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
    """A compressor plugin's cost declaration (see the module docstring)."""

    module_flops: Callable[[Any, CostSetting], ModuleCost] | None = None
    types_at_budget: Callable[[int], Sequence[str]] | None = None


def _cost_model(projector_type: str) -> CostModel:
    """The :class:`CostModel` of the plugin that owns ``projector_type``.

    Raises:
        ValueError: If no plugin owns the type, or its plugin declares no cost.
    """
    from llava.model.multimodal_projector.plugins import plugin_for

    plugin = plugin_for(projector_type)
    if plugin is None:
        from llava.model.multimodal_projector.registry import projector_spellings

        raise ValueError(f"unknown projector type {projector_type!r}; known projector types: {projector_spellings()}")
    if plugin.cost is None or plugin.cost.module_flops is None:
        raise ValueError(f"the {plugin.name!r} compressor (projector type {projector_type!r}) declares no module FLOPs, so its cost cannot be counted")
    return plugin.cost


def module_cost(projector_type: str, setting: CostSetting, config: Any = None) -> ModuleCost:
    """The cost of ``projector_type`` (``config``: its checkpoint config; default: just the type)."""
    if config is None:
        config = SimpleNamespace(mm_projector_type=projector_type)
    cost = _cost_model(projector_type).module_flops(config, setting)
    if not isinstance(cost, ModuleCost):
        raise RuntimeError(f"the cost model of {projector_type!r} returned {type(cost).__name__}, not a ModuleCost")
    return cost


def types_at_budget(budget: int) -> dict[str, list[str] | str]:
    """``{plugin name: [projector types]}`` giving ``budget`` visual tokens per view; a plugin that cannot maps to the
    reason, one sentence. Plugins that declare no ``types_at_budget`` (the built-ins) are not listed.

    Raises:
        ValueError: If ``budget`` is not a positive integer.
    """
    from llava.model.multimodal_projector.plugins import list_plugins

    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"a visual-token budget must be a positive integer, got {budget!r}")
    out: dict[str, list[str] | str] = {}
    for plugin in list_plugins():
        if plugin.cost is None or plugin.cost.types_at_budget is None:  # not a compressor at a budget (the built-ins)
            continue
        try:
            out[plugin.name] = list(plugin.cost.types_at_budget(budget))
        except ValueError as exc:
            out[plugin.name] = str(exc)
    return out
