"""What one type costs, asked of the plugin that registered it.

A plugin declares a :class:`~llava.plugin_api.CostModel` (``CompressorPlugin.cost``; the types are the plugin API's,
re-exported here): ``module_flops(context, setting) -> ModuleCost``, its type's FLOPs for one view, given the
:class:`~llava.plugin_api.BuildContext` its factory would get for the same config (one function makes both,
:func:`llava.model.multimodal_projector.registry.build_context`) and the pipeline's :class:`CostSetting`; and its
types per visual-token budget (default: its ``{K}`` name forms). Upstream's built-in types (``linear``,
``mlp{N}x_gelu``, ``identity``) declare their cost the same way. The pre-projector figure is ``module``, the
post-projector figure ``module + projector``.

- :func:`module_cost`: one type's cost, from its plugin (``ModuleCost.method`` is the plugin's name);
- :func:`types_at_budget`: every method's types at a budget;
- :func:`expand_types`: ``all`` in a list of types (a cost command's ``--projector all``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from llava.plugin_api import CostModel, CostSetting, ModuleCost

__all__ = ["ALL", "CostModel", "CostSetting", "ModuleCost", "expand_types", "module_cost", "types_at_budget"]

logger = logging.getLogger(__name__)

#: The name that stands for every method's types at the given budgets.
ALL = "all"


def module_cost(projector_type: str, setting: CostSetting, config: Any = None) -> ModuleCost:
    """The cost of ``projector_type`` (``config``: its checkpoint config, costed with its stored settings, left
    untouched; default: just the type), asked of the plugin that registered it.

    Raises:
        ValueError: One sentence, for an unknown type, a plugin that declares no cost, an unknown
            ``setting.variant`` or a type the cost model refuses (e.g. a budget the grid cannot give).
    """
    from llava.model.multimodal_projector.registry import build_context, config_copy, plugin_for, projector_spellings

    plugin = plugin_for(projector_type)
    if plugin is None:
        raise ValueError(f"unknown projector type {projector_type!r}; known projector types: {projector_spellings()}")
    if plugin.cost is None or plugin.cost.module_flops is None:
        raise ValueError(f"the {plugin.name!r} compressor (projector type {projector_type!r}) declares no module FLOPs, so its cost cannot be counted")
    if setting.variant is not None and setting.variant not in plugin.cost.variants:
        offered = ", ".join(plugin.cost.variants) or "none"
        raise ValueError(f"the {plugin.name!r} cost model has no variant {setting.variant!r}; its variants: {offered}")
    values = config_copy(config) if config is not None else SimpleNamespace()
    values.mm_projector_type = projector_type
    _, context = build_context(values, mm_hidden=setting.mm_hidden, hidden=setting.lm.hidden, tower_loader=lambda: setting.tower)
    cost = plugin.cost.module_flops(context, setting)
    if not isinstance(cost, ModuleCost):
        raise RuntimeError(f"the cost model of {projector_type!r} returned {type(cost).__name__}, not a ModuleCost")
    return replace(cost, method=plugin.name)


def types_at_budget(budget: int) -> dict[str, list[str] | str]:
    """``{method: [types]}`` giving ``budget`` visual tokens per view; a method that cannot maps to the reason, one
    sentence. Plugins that take no budget (the built-ins) are not listed.

    Raises:
        ValueError: If ``budget`` is not a positive integer.
    """
    from llava.model.multimodal_projector.registry import list_plugins

    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"a visual-token budget must be a positive integer, got {budget!r}")
    out: dict[str, list[str] | str] = {}
    for plugin in list_plugins():
        if not plugin.takes_budget:
            continue
        try:
            out[plugin.name] = plugin.budget_types(budget)
        except ValueError as exc:
            out[plugin.name] = str(exc)
    return out


def expand_types(names: Iterable[str], budgets: Sequence[int], setting: CostSetting | None = None) -> list[str]:
    """``names`` with ``all`` replaced by every method's types at each of ``budgets``.

    Methods that refuse a budget are logged and left out; with ``setting``, so are the types ``all`` gives that
    cannot run on its grid (their cost model refuses them).

    Raises:
        ValueError: One sentence, when ``all`` is asked for and no registered plugin takes a budget (the
            plugins' entry points are not installed), instead of costing upstream's projector alone.
    """
    from llava.model.multimodal_projector.registry import ENTRY_POINT_GROUP, list_plugins, projector_spellings

    names = list(names)
    if ALL in names and not any(plugin.takes_budget for plugin in list_plugins()):
        raise ValueError(
            f"'{ALL}' names every compressor, but no compressor plugin is registered (only {projector_spellings()}); install "
            f"the package that declares them into this environment (e.g. pip install -e . in this repository, which registers "
            f"its {ENTRY_POINT_GROUP} entry points) or name the projector types"
        )
    out: list[str] = []
    for name in names:
        if name != ALL:
            out.append(name)
            continue
        for budget in budgets:
            for method, types in types_at_budget(budget).items():
                if isinstance(types, str):
                    logger.info("budget %d: %s left out (%s)", budget, method, types)
                    continue
                out.extend(t for t in types if setting is None or _fits(t, setting))
    return list(dict.fromkeys(out))


def _fits(projector_type: str, setting: CostSetting) -> bool:
    try:
        module_cost(projector_type, setting)
    except ValueError as exc:
        logger.info("%s left out: %s", projector_type, exc)
        return False
    return True
