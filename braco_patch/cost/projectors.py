"""Cost of any projector type, asked of its plugin: the ``module_flops`` tool contract and full-pipeline FLOPs.

Every compressor plugin offers (``CompressorPlugin.tools``, docs/PLUGINS.md)::

    "module_flops": (config, setting: CostSetting) -> ModuleCost

``config`` is the checkpoint's model config (a ``PretrainedConfig`` or a namespace of ``config.json``; it
holds ``mm_projector_type`` and the plugin's ``mm_*`` keys); ``setting`` the dimensions the count depends on.
The tool counts in :mod:`.flops`'s convention and splits its count into ``module`` (the compressor, with any
extra work it causes, e.g. QueCC's prompt pass through the LLM) and ``projector`` (the ``mlp{N}x_gelu`` it
feeds or follows; empty when the module ends in the LLM's width itself). Built-in types (``linear``,
``mlp{N}x_gelu``, ``identity``) need no plugin. This module asks the registry which plugin owns a type (a lazy
import of llava's plugin registry) and never names a plugin.

Boundaries (paper ``tab:main_compressor_cost``): the pre-projector figure is ``module``; the post-projector
figure is ``module + projector``. The full prefill adds the vision tower and the LLM over ``K`` visual tokens
(per view) plus the prompt.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, Mapping

from .flops import LMDims, elementwise, llm_prefill_flops, projector_flops, total, vision_layers_run, vision_tower_flops

__all__ = [
    "CostSetting",
    "ModuleCost",
    "module_cost",
    "builtin_module_cost",
    "braco_module_flops",
    "projector_pipeline_flops",
    "checkpoint_prefill_flops",
    "projector_tool",
    "projectors_at_budget",
    "TOOL",
]

#: Name of the per-projector cost tool every compressor plugin offers.
TOOL = "module_flops"


@dataclass(frozen=True)
class CostSetting:
    """What a module's FLOPs depend on besides its own config.

    Attributes:
        mm_hidden: Vision feature width D (the projector's input).
        lm: The LLM's dimensions (its width is the projector's output; prompt-conditioned modules run it).
        grid: ``(H, W)`` patch grid of one view.
        projector_depth: Linear layers of the ``mlp{N}x_gelu`` projector.
        prompt_tokens: Question tokens a prompt-conditioned module runs through the LLM (QueCC). The paper
            states none; 7 reproduces its QueCC figure (docs/BENCHMARKS.md).
        count_attention: Count attention-score products (``QKᵀ``, ``A·V``) inside the module.
        computation: Braco's ``official`` (full-lattice DCT, the paper's) or ``ours`` (retained rows only).
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


# -- built-ins and plugins ---------------------------------------------------------------------------
def builtin_module_cost(projector_type: str, setting: CostSetting) -> ModuleCost | None:
    """``linear``, ``mlp{N}x_gelu`` and ``identity``: no compressor, K = N (``None`` for other names)."""
    n = setting.tokens
    if projector_type == "identity":
        return ModuleCost(projector_type, n, "post")
    if projector_type == "linear":
        return ModuleCost(projector_type, n, "post", projector=projector_flops(n, setting.mm_hidden, setting.lm.hidden, 1))
    match = re.fullmatch(r"mlp(\d+)x_gelu", projector_type)
    if match is None:
        return None
    return ModuleCost(projector_type, n, "post", projector=projector_flops(n, setting.mm_hidden, setting.lm.hidden, int(match.group(1))))


def _plugin_for(projector_type: str) -> Any:
    from llava.model.multimodal_projector.plugins import plugin_for

    return plugin_for(projector_type)


def projector_tool(projector_type: str, name: str = TOOL) -> Any:
    """The tool ``name`` of the plugin that owns ``projector_type``.

    Raises:
        ValueError: If no plugin owns the type, or its plugin offers no such tool.
    """
    plugin = _plugin_for(projector_type)
    if plugin is None:
        from llava.model.multimodal_projector.builder import list_projectors

        raise ValueError(f"unknown projector type {projector_type!r}; expected one of {list_projectors()}")
    tool = plugin.tools.get(name)
    if tool is None:
        raise ValueError(f"the {plugin.name!r} compressor (projector type {projector_type!r}) offers no {name!r} tool, so its cost cannot be counted")
    return tool


def module_cost(projector_type: str, setting: CostSetting, config: Any = None) -> ModuleCost:
    """The cost of ``projector_type`` (``config``: its checkpoint config; default: just the type)."""
    builtin = builtin_module_cost(projector_type, setting)
    if builtin is not None:
        return builtin
    if config is None:
        config = SimpleNamespace(mm_projector_type=projector_type)
    cost = projector_tool(projector_type)(config, setting)
    if not isinstance(cost, ModuleCost):
        raise RuntimeError(f"the {TOOL!r} tool for {projector_type!r} returned {type(cost).__name__}, not a ModuleCost")
    return cost


def braco_module_flops(config: Any, setting: CostSetting) -> ModuleCost:
    """Braco's ``module_flops`` tool: the coder per paper step (``setting.computation``), then ``mlp{N}x_gelu`` on K."""
    from ..llava_plugin import braco_config_from_model_config
    from .flops import check_allocation, compressor_flops

    projector_type = config.mm_projector_type
    allocation = braco_config_from_model_config(config, projector_type)
    check_allocation(allocation, setting.grid, f"projector {projector_type}")
    k = allocation.output_tokens
    return ModuleCost(
        projector_type, k, "pre",
        module=compressor_flops(allocation, setting.mm_hidden, setting.grid, setting.computation),
        projector=projector_flops(k, setting.mm_hidden, setting.lm.hidden, setting.projector_depth),
    )


def projectors_at_budget(budget: int) -> dict[str, list[str] | str]:
    """Each plugin's projector types for ``budget`` visual tokens (:mod:`llava.model.multimodal_projector.budgets`)."""
    from llava.model.multimodal_projector.budgets import projectors_at_budget as ask

    return ask(budget)


# -- full pipeline -----------------------------------------------------------------------------------
def projector_pipeline_flops(
    spec: Any, projector_type: str, *, prompt_tokens: int, count_attention: bool = False, lm_head: str = "all",
    vision_layers: str = "all", computation: str = "official", question_tokens: int = 7, config: Any = None,
    llm_layers: int | None = None, vision_layer_cap: int | None = None,
) -> dict[str, Any]:
    """One image's prefill FLOPs through ``projector_type`` on ``spec`` (a :class:`~.presets.PipelineSpec`), first input.

    ``llm_layers`` / ``vision_layer_cap`` cap the layer counts (to match a capped measured run).

    Returns:
        ``{"visual_tokens", "total", "vision", "compressor", "projector", "llm", "boundary"}``.
    """
    inp = spec.inputs[0]
    setting = CostSetting(
        mm_hidden=spec.mm_hidden, lm=spec.lm_dims, grid=spec.grid(inp), projector_depth=spec.projector_depth,
        prompt_tokens=question_tokens, count_attention=count_attention, computation=computation,
    )
    cost = module_cost(projector_type, setting, config)
    vdims = spec.vision_dims
    layers = vision_layers_run(vdims, spec.select_layer, vision_layers)
    if vision_layer_cap is not None:
        layers = min(layers, vision_layer_cap)
    vision = total(vision_tower_flops(vdims, image_size=inp.image_size, layers=layers, count_attention=count_attention))
    visual = cost.tokens * inp.views
    lm = spec.lm_dims.capped(llm_layers)
    llm = total(llm_prefill_flops(lm, visual + prompt_tokens, count_attention=count_attention, lm_head=lm_head))
    parts = {
        "vision": vision * inp.views, "compressor": cost.pre * inp.views,
        "projector": total(cost.projector) * inp.views, "llm": llm,
    }
    return {
        "visual_tokens": visual, "total": sum(parts.values()), **parts, "boundary": cost.boundary,
        "elementwise": elementwise(cost.module) * inp.views,
    }


def checkpoint_prefill_flops(checkpoint_dir: str | os.PathLike[str], prompt_tokens: int) -> dict[str, Any]:
    """Analytic FLOPs of one image's prefill through a saved checkpoint, for any projector type.

    Counted: the whole vision tower, the compressor (its plugin's ``module_flops``, our computation), the
    projector, and the LLM over the visual tokens plus ``prompt_tokens`` text tokens, attention scores
    included, LM head on the last position only.

    Returns:
        ``{"visual_tokens", "total", "vision", "compressor", "projector", "llm", "boundary", "accounting"}``.
    """
    from .presets import load_spec

    config_file = Path(checkpoint_dir) / "config.json"
    values = json.loads(config_file.read_text())
    spec = load_spec(config_file)
    projector_type = values.get("mm_projector_type") or "linear"
    out = projector_pipeline_flops(
        spec, projector_type, prompt_tokens=prompt_tokens, count_attention=True, lm_head="last", computation="ours",
        question_tokens=prompt_tokens, config=SimpleNamespace(**values),
    )
    out["accounting"] = (
        f"prompt {prompt_tokens} text tokens + visual tokens; attention scores counted; vision tower: every layer; "
        "LM head on the last position; compressor: its plugin's module_flops (ours computation)"
    )
    return out
