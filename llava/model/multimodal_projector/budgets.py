"""Projector types at a visual-token budget, asked of every compressor plugin (the ``projectors_at_budget`` tool).

A plugin that can give a budget offers ``tools["projectors_at_budget"]``: ``(budget: int) -> list[str]``, the
projector types (``mm_projector_type`` values) that send ``budget`` visual tokens per view, or a ``ValueError``
with one sentence when it cannot (e.g. a region method whose regions must divide the grid). The quickstart's
``--projectors all`` and the cost command's ``--projector all`` expand through :func:`projectors_at_budget`.
"""

from __future__ import annotations

from .plugins import list_plugins

__all__ = ["BUDGET_TOOL", "projectors_at_budget"]

BUDGET_TOOL = "projectors_at_budget"


def projectors_at_budget(budget: int) -> dict[str, list[str] | str]:
    """``{plugin name: [projector types]}`` for ``budget``; a plugin that refuses (or offers no tool) maps to the reason.

    Raises:
        ValueError: If ``budget`` is not a positive integer.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"a visual-token budget must be a positive integer, got {budget!r}")
    out: dict[str, list[str] | str] = {}
    for plugin in list_plugins():
        tool = plugin.tools.get(BUDGET_TOOL)
        if tool is None:
            out[plugin.name] = f"offers no {BUDGET_TOOL!r} tool"
            continue
        try:
            out[plugin.name] = list(tool(budget))
        except ValueError as exc:
            out[plugin.name] = str(exc)
    return out
