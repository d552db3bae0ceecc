"""Whether a reducer type runs on a given LLM and image, and which type of a plugin to show there.

One rule for every command that picks reducer types for an LLM it did not choose (the quickstart's tiny LLM,
the cost command's ``--projector all`` on any preset or config): a type fits when its plugin's factory builds on the LLM's
decoder layers (:func:`llava.model.reducers.build_steps`) and its cost model keeps at most the image's tokens at every
layer; a plugin's type to show is the first of its showcased types (its paper's settings), then of its declared
examples (written for a tiny LLM), that fits and drops image tokens at some layer. Nothing here names a method.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llava.utils import UserError

if TYPE_CHECKING:
    from llava.plugin_api import ReducerPlugin

__all__ = ["candidates", "fit_refusal", "fitting_type", "layer_counts"]


def layer_counts(name: str, lm_config: Any, visual: int) -> list[int] | None:
    """The image tokens per decoder layer reducer ``name`` leaves of ``visual``, by its plugin's cost model, or ``None``
    when the plugin declares no per-layer count."""
    from .reducers import language_dims, resolve_reducer

    choice = resolve_reducer(name)
    cost = choice.plugin.cost
    if cost is None or cost.layer_tokens is None:
        return None
    return [int(count) for count in cost.layer_tokens(choice.build(language_dims(lm_config)), visual)]


def fit_refusal(name: str, lm_config: Any, visual: int, reduces: bool = False) -> str | None:
    """Why reducer ``name`` cannot run on an LLM of ``lm_config`` with ``visual`` image tokens, or ``None`` when it can.

    It can when its factory builds on the LLM (:func:`llava.model.reducers.build_steps`: every layer it names exists)
    and no layer keeps more image tokens than there are; with ``reduces``, some layer must also keep fewer.

    Raises:
        UserError: For a name no installed reducer plugin knows.
    """
    from .reducers import build_steps, resolve_reducer

    resolve_reducer(name)  # an unknown name is the registry's sentence, not a misfit
    try:
        build_steps(name, lm_config)
    except UserError as exc:
        return str(exc).rstrip(".")
    try:
        counts = layer_counts(name, lm_config, visual)
    except ValueError as exc:  # the plugin's own sentence for a budget the image cannot hold
        return str(exc).rstrip(".")
    if counts is None:
        return None
    if max(counts) > visual:
        return f"reducer {name!r} keeps {max(counts)} image tokens at some layer, but the image has {visual}"
    if reduces and min(counts) >= visual:
        return f"reducer {name!r} keeps all {visual} image tokens at every layer"
    return None


def candidates(plugin: ReducerPlugin) -> list[str]:
    """The types ``all`` tries for ``plugin``, in order: its showcased ones, then each form's declared examples."""
    return list(dict.fromkeys([*plugin.showcase, *(name for entry in plugin.reducers for name in entry.examples)]))


def fitting_type(plugin: ReducerPlugin, lm_config: Any, visual: int) -> tuple[str | None, list[str], str | None]:
    """``(type, tried, None)``: the first of :func:`candidates` that fits and reduces; else ``(None, tried, why the
    first did not)``."""
    tried = candidates(plugin)
    first = None
    for name in tried:
        why = fit_refusal(name, lm_config, visual, reduces=True)
        if why is None:
            return name, tried, None
        first = first or why
    return None, tried, first
