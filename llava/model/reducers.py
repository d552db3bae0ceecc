"""The reducer registry (the ``reducer`` plugin kind) and a model's active reducer.

In-LLM methods (:class:`llava.plugin_api.ReducerPlugin`) register here, by hand (:func:`register_reducer_plugin`) or
through the ``llava.reducers`` entry-point group (setup.py): each entry point names a module whose import registers
its plugins. A type is chosen at run time, on any loaded LLaVA model whatever its projector (``--reducer
mydrop_k2_r50``): :func:`set_reducer` builds its steps against the model's LLM and installs the seam
(:mod:`llava.model.reduction`) once. Nothing here names a method.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from llava.plugin_api import LMDims, Reducer, ReducerBuild, ReducerPlugin, ReducerType
from llava.utils import UserError, load_entry_points

from .reduction import ReductionState, install_hooks, prompt_state, steps_by_layer

ENTRY_POINT_GROUP = "llava.reducers"
#: The word that turns every reducer off (``--reducer none``, the default).
NO_REDUCER = "none"
_PLUGINS: dict[str, ReducerPlugin] = {}


def register_reducer_plugin(plugin: ReducerPlugin) -> ReducerPlugin:
    """Register ``plugin`` (again: replaces the one of its name).

    Raises:
        ValueError: If one of its forms is another plugin's.
    """
    if not isinstance(plugin, ReducerPlugin):
        raise ValueError(f"register_reducer_plugin takes a ReducerPlugin, got {type(plugin).__name__}")
    for other in _PLUGINS.values():
        shared = {e.form.spelling for e in other.reducers} & {e.form.spelling for e in plugin.reducers}
        if other.name != plugin.name and shared:
            raise ValueError(f"reducer plugin {plugin.name!r} registers {sorted(shared)}, which plugin {other.name!r} already registers")
    _PLUGINS[plugin.name] = plugin
    return plugin


def unregister_reducer_plugin(name: str) -> None:
    """Remove a plugin (for tests; a no-op for an unknown name)."""
    _PLUGINS.pop(name, None)


def reducer_plugins() -> tuple[ReducerPlugin, ...]:
    """Every registered reducer plugin (entry points loaded once), in registration order."""
    load_entry_points(ENTRY_POINT_GROUP, "reducer")
    return tuple(_PLUGINS.values())


def reducer_spellings() -> str:
    """How users write the reducer types, for messages and ``--help`` (``mydrop_k{K}_r{R}, ...``)."""
    spelled = [entry.form.spelling for plugin in reducer_plugins() for entry in plugin.reducers]
    return ", ".join(spelled) if spelled else "(no reducer plugin is installed)"


def showcase_reducers() -> list[str]:
    """Every plugin's showcased types (the quickstart's ``--reducers all``)."""
    return [name for plugin in reducer_plugins() for name in plugin.showcase]


@dataclass(frozen=True)
class ReducerChoice:
    """A resolved reducer name: its plugin, type and name values."""

    name: str
    plugin: ReducerPlugin
    entry: ReducerType
    values: dict[str, int]

    def build(self, lm: LMDims) -> ReducerBuild:
        return ReducerBuild(self.name, self.values, lm)


def resolve_reducer(name: str) -> ReducerChoice:
    """The plugin and type of ``name``.

    Raises:
        UserError: One sentence naming ``name`` and the known spellings.
    """
    for plugin in reducer_plugins():
        found = plugin.match(name) if isinstance(name, str) else None
        if found is not None:
            return ReducerChoice(name, plugin, found[0], found[1])
    spellings = [entry.form.spelling for plugin in reducer_plugins() for entry in plugin.reducers]
    close = difflib.get_close_matches(str(name), showcase_reducers(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UserError(f"unknown reducer {name!r}{hint}; known reducers: {', '.join(spellings) or 'none installed'}, or 'none'")


def language_dims(config: Any) -> LMDims:
    """The LLM's dimensions of a LLaVA config (its text config when it has one)."""
    return LMDims.from_config(getattr(config, "text_config", None) or config)


def build_steps(name: str, config: Any) -> dict[int, list[Reducer]]:
    """The steps of reducer ``name`` for a model of ``config``, grouped by layer.

    Raises:
        UserError: For an unknown name or one the plugin refuses on this LLM (a layer it does not have).
    """
    choice = resolve_reducer(name)
    lm = language_dims(config)
    try:
        steps: Sequence[Reducer] = choice.entry.factory(choice.build(lm))
        return steps_by_layer(steps, lm.layers, name)
    except UserError:
        raise
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def decoder_layers(model: Any) -> Any:
    """The decoder layers of a LLaVA causal LM (``model.model.layers``)."""
    return model.get_model().layers


def set_reducer(model: Any, name: str | None) -> None:
    """Make ``name`` (a reducer type, or ``None``/``"none"``) the model's reducer; the seam's hooks go in once.

    Raises:
        UserError: For an unknown name, or a layer the model's LLM does not have.
    """
    if name is None or name == NO_REDUCER:
        model._llava_reducer = None
        return
    steps = build_steps(name, model.config)
    if getattr(model, "_llava_reducer_hooks", None) is None:
        model._llava_reducer_hooks = install_hooks(decoder_layers(model), model.get_model().norm)
    model._llava_reducer = (name, steps)


def active_reducer(model: Any) -> tuple[str, dict[int, list[Reducer]]] | None:
    """``(name, steps by layer)`` of the model's reducer, or ``None``."""
    return getattr(model, "_llava_reducer", None)


__all__ = [
    "ENTRY_POINT_GROUP", "NO_REDUCER", "ReducerChoice", "active_reducer", "build_steps", "decoder_layers",
    "language_dims", "prompt_reduction", "reducer_plugins", "reducer_spellings", "register_reducer_plugin", "resolve_reducer",
    "set_reducer", "showcase_reducers", "unregister_reducer_plugin",
]


def prompt_reduction(model: Any, visual: torch.Tensor | None, attention_mask: torch.Tensor | None,
                     generated: int = 0, labels: Any = None) -> ReductionState | None:
    """The reduction state of one spliced prompt batch, or ``None`` when the model has no reducer or the batch no image.

    Raises:
        UserError: With labels (reducers run at inference only), a negative ``generated``, or a prompt longer than the
            LLM's sliding window (whose cache would drop other rows than the reduced layers keep).
    """
    active = active_reducer(model)
    if active is None or visual is None or not bool(visual.any()):
        return None
    if labels is not None:
        raise UserError(f"reducer {active[0]!r} runs at inference only; train or score with labels without a reducer (--reducer none)")
    if isinstance(generated, bool) or not isinstance(generated, int) or generated < 0:
        raise UserError(f"generated_tokens must be a whole number >= 0, got {generated!r}")
    config = getattr(model.config, "text_config", None) or model.config
    window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
    if window is not None and visual.shape[1] >= window:
        raise UserError(f"reducer {active[0]!r} cannot run on a {visual.shape[1]}-token prompt with a {window}-token "
                        "sliding window; shorten the prompt or use --reducer none")
    return prompt_state(active[1], visual, attention_mask, generated)
