"""``--reducers``: which in-LLM reducer types the quickstart runs on its trained vanilla checkpoint.

A reducer costs no training: after the projectors have trained, each reducer type answers the held-out questions on
the ``mlp2x_gelu`` checkpoint through the loaders' own ``--reducer`` flag, and becomes one more row of the table
(:func:`llava.quickstart.run.run_reducer`). This module only decides the types, from the reducer registry
(:mod:`llava.model.reducers`), never from a list of methods:

- a name the user gives must run on the quickstart's LLM and image: its plugin's factory builds on the LLM's decoder
  layers, and its cost model keeps at most the image's tokens at every layer (else one sentence, before anything
  runs);
- ``all`` is one type per registered plugin: the first of the plugin's showcased types, then of its declared examples
  (:attr:`llava.plugin_api.ReducerType.examples`, written for a tiny LLM), that runs here and drops image tokens at
  some layer; a plugin with none is a note naming why its first candidate does not fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llava.model.reducer_fit import candidates, fit_refusal, fitting_type
from llava.utils import UserError

if TYPE_CHECKING:
    from llava.plugin_api import ReducerPlugin

__all__ = ["ALL", "candidates", "default_type", "expand_reducers", "fit_refusal"]

#: ``--reducers all``: a type of every registered reducer plugin that fits the quickstart's LLM.
ALL = "all"


def default_type(plugin: ReducerPlugin, lm_config: Any, visual: int) -> tuple[str | None, str | None]:
    """``(type, None)``: the plugin's type that fits (:func:`llava.model.reducer_fit.fitting_type`); else ``(None, note)``."""
    chosen, tried, why = fitting_type(plugin, lm_config, visual)
    if chosen is not None:
        return chosen, None
    layers = lm_config.num_hidden_layers
    return None, (f"reducer plugin {plugin.name}: none of its types {tried} fits the quickstart's {layers}-layer LLM with "
                  f"{visual} image tokens ({why})")


def expand_reducers(names: Sequence[str], lm_config: Any, visual: int) -> tuple[tuple[str, ...], list[str]]:
    """``names`` with ``all`` replaced by one type per registered reducer plugin (:func:`default_type`).

    Args:
        names: ``--reducers`` as given: reducer types (the loaders' ``--reducer`` spellings) and/or ``all``.
        lm_config: The quickstart LLM's config (``num_hidden_layers``, ``hidden_size``, ...).
        visual: The image tokens the vanilla checkpoint sends to the LLM.

    Returns:
        ``(reducer types, notes on plugins left out)``.

    Raises:
        UserError: One sentence for a name that is unknown or does not run on this LLM and image.
    """
    from llava.model.reducers import NO_REDUCER, reducer_plugins

    out: list[str] = []
    notes: list[str] = []
    for name in names:
        if name == ALL:
            for plugin in reducer_plugins():
                chosen, note = default_type(plugin, lm_config, visual)
                out.extend([chosen] if chosen else [])
                notes.extend([note] if note else [])
            continue
        if name == NO_REDUCER:
            raise UserError(f"--reducers {name}: leave --reducers out to run no reducer; give reducer types or '{ALL}'")
        why = fit_refusal(name, lm_config, visual)
        if why is not None:
            raise UserError(f"--reducers {name} does not fit the quickstart's {lm_config.num_hidden_layers}-layer LLM with "
                            f"{visual} image tokens: {why}; '--reducers {ALL}' picks a type of each method that fits")
        out.append(name)
    return tuple(dict.fromkeys(out)), notes
