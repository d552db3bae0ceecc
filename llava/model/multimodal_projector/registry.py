"""The one projector registry: every projector type, built-in or installed, and the plugin that declared it.

Resolution (one rule, everywhere a name is looked up): a projector type is matched against the registered
patterns, **exact names first**, then regular expressions (``re.fullmatch``), each group in registration order;
upstream's built-ins (:mod:`.builtin`) are registered before any installed plugin. Installed plugins register
through the ``llava.projectors`` entry-point group: each entry point names a module whose import calls
:func:`register_plugin`; the entry points are imported once, the first time a name is looked up.

Settings are plugin-owned config keys; :func:`check_plugin_config` checks and normalises them on every build,
and refuses keys of another plugin. :func:`build_context` is the one place a type's :class:`BuildContext` is made:
the builder hands it to the factory, the cost engine to the type's cost model.

The registry keeps one section per plugin kind (:data:`llava.plugin_api.PLUGIN_KINDS`: ``projector`` today; the
in-LLM reducer is the next); a name is resolved within its kind. This module imports the plugin API and the
built-ins; nothing here imports it back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from llava.plugin_api import PLUGIN_KINDS, BuildContext, CompressorPlugin, ProjectorType, Setting, TowerShape
from llava.utils import load_entry_points

from . import builtin

ENTRY_POINT_GROUP = "llava.projectors"

__all__ = [
    "ENTRY_POINT_GROUP", "Registration", "apply_runtime_settings", "build_context", "check_plugin_config", "config_copy", "config_values",
    "list_plugins", "list_projectors", "load_plugins", "owner_of", "plugin_for", "plugin_settings", "projector_spellings",
    "reference_scores", "register_plugin", "resolve_projector", "settings_in", "showcase", "tokens_depend_on_image", "unregister_plugin",
]


@dataclass(frozen=True)
class Registration:
    """One registered type, the plugin that declared it and its kind."""

    entry: ProjectorType
    plugin: CompressorPlugin
    regex: re.Pattern
    kind: str = "projector"


_PLUGINS: dict[str, CompressorPlugin] = {}
#: kind -> pattern -> registration, in registration order
_SECTIONS: dict[str, dict[str, Registration]] = {kind: {} for kind in PLUGIN_KINDS}
_TYPES = _SECTIONS["projector"]


def register_plugin(plugin: CompressorPlugin) -> CompressorPlugin:
    """Register ``plugin`` and its projector types (registering a plugin of the same name again replaces it).

    Raises:
        ValueError: If one of its setting keys, or one of its patterns, belongs to another plugin.
    """
    for other in _PLUGINS.values():
        if other.name == plugin.name:
            continue
        shared = set(other.keys) & set(plugin.keys)
        if shared:
            raise ValueError(f"plugin {plugin.name!r} declares {sorted(shared)}, which plugin {other.name!r} already declares")
        for kind in PLUGIN_KINDS:
            patterns = {entry.pattern for entry in other.types(kind)} & {entry.pattern for entry in plugin.types(kind)}
            if patterns:
                raise ValueError(f"plugin {plugin.name!r} registers {sorted(patterns)}, which plugin {other.name!r} already registers")
    unregister_plugin(plugin.name)
    _PLUGINS[plugin.name] = plugin
    for kind, section in _SECTIONS.items():
        for entry in plugin.types(kind):
            section[entry.pattern] = Registration(entry, plugin, re.compile(entry.pattern), kind)
    return plugin


def unregister_plugin(name: str) -> None:
    """Remove a plugin and its projector types (for tests; a no-op for an unknown name)."""
    plugin = _PLUGINS.pop(name, None)
    if plugin is not None:
        for kind, section in _SECTIONS.items():
            for entry in plugin.types(kind):
                section.pop(entry.pattern, None)


def load_plugins() -> None:
    """Import every ``llava.projectors`` entry point once (the built-ins are always registered)."""
    load_entry_points(ENTRY_POINT_GROUP, "projector")


def list_projectors() -> list[str]:
    """The registered projector patterns, built-ins first, in registration order."""
    load_plugins()
    return list(_TYPES)


def projector_spellings() -> str:
    """The registered projector types as users write them (``linear, mlp{N}x_gelu, ...``), for messages."""
    load_plugins()
    return ", ".join(registration.entry.spelling for registration in _TYPES.values())


def list_plugins() -> list[CompressorPlugin]:
    """Every registered plugin, built-ins first (the entry points are imported first)."""
    load_plugins()
    return list(_PLUGINS.values())


def resolve_projector(name: str) -> tuple[Registration, "re.Match[str]"]:
    """The registration of ``name`` and its match, by the module's resolution rule.

    Raises:
        ValueError: For a name no registered pattern matches, listing the registered ones.
    """
    if not isinstance(name, str):
        raise ValueError(f"mm_projector_type must be a string such as 'mlp2x_gelu', got {name!r}")
    load_plugins()
    ordered = sorted(_TYPES.values(), key=lambda registration: not registration.entry.exact)
    for registration in ordered:
        match = registration.regex.fullmatch(name)
        if match is not None:
            return registration, match
    raise ValueError(f"unknown mm_projector_type {name!r}; known projector types: {projector_spellings()}")


def plugin_for(projector_type: str | None) -> CompressorPlugin | None:
    """The plugin that declared ``projector_type`` (the built-ins' for ``mlp2x_gelu``), ``None`` for unknown names."""
    if not projector_type:
        return None
    try:
        return resolve_projector(projector_type)[0].plugin
    except ValueError:
        return None


def showcase(*, video: bool = False) -> tuple[str, ...]:
    """The projector types every registered plugin showcases (the built-ins' first), for a first comparison."""
    load_plugins()
    names = [name for plugin in list_plugins() for name in (plugin.video_showcase if video else plugin.showcase)]
    return tuple(dict.fromkeys(names))


def reference_scores() -> dict[str, dict[str, float]]:
    """Every registered plugin's published scores by name (a name declared twice: the first plugin's)."""
    load_plugins()
    out: dict[str, dict[str, float]] = {}
    for plugin in list_plugins():
        for name, scores in plugin.reference_scores.items():
            out.setdefault(name, dict(scores))
    return out


def tokens_depend_on_image(config: Any) -> bool:
    """Whether ``config.mm_projector_type``'s plugin declares a per-view token count that depends on the image."""
    plugin = plugin_for(getattr(config, "mm_projector_type", None))
    if plugin is None:
        return False
    declared = plugin.tokens_depend_on_image
    return bool(declared(config) if callable(declared) else declared)


def plugin_settings() -> list[tuple[CompressorPlugin, Setting]]:
    """Every declared setting with its plugin, in registration order (the training flags)."""
    return [(plugin, setting) for plugin in list_plugins() for setting in plugin.settings]


def owner_of(key: str) -> CompressorPlugin | None:
    """The plugin that declares or owns the config key ``key``."""
    for plugin in list_plugins():
        if plugin.owns(key):
            return plugin
    return None


def config_values(config: Any) -> dict[str, Any]:
    """The attributes of a model config (a ``PretrainedConfig`` or a namespace) as a flat mapping."""
    return dict(vars(config))


def check_plugin_config(config: Any) -> CompressorPlugin:
    """Validate and normalise, in place, the settings of the plugin that ``config.mm_projector_type`` names.

    Also refuses keys another plugin owns, since no projector would read them. Returns the plugin.

    Raises:
        ValueError: For an unknown projector type, or see :meth:`CompressorPlugin.check_config`.
    """
    projector_type = getattr(config, "mm_projector_type", None) or "linear"
    plugin = resolve_projector(projector_type)[0].plugin
    values = config_values(config)
    for key, value in plugin.check_config(values).items():
        setattr(config, key, value)
    for key in values:
        owner = owner_of(key)
        if owner is not None and owner is not plugin and values[key] is not None:
            raise ValueError(
                f"config key {key!r} belongs to the {owner.name!r} compressor, but mm_projector_type "
                f"{projector_type!r} is not one of its projector types"
            )
    return plugin


def build_context(config: Any, *, mm_hidden: int, hidden: int,
                  tower_loader: Callable[[], TowerShape | None] = lambda: None) -> tuple[Registration, BuildContext]:
    """The registration of ``config.mm_projector_type`` (default ``linear``) and the :class:`BuildContext` that its
    factory gets and its cost model gets: the one place a context is made.

    The plugin's keys in ``config`` are checked and normalised first, in place (:func:`check_plugin_config`).

    Raises:
        ValueError: For an unknown type or plugin keys that are unknown or invalid (one sentence).
    """
    name = getattr(config, "mm_projector_type", None) or "linear"
    registration, match = resolve_projector(name)
    check_plugin_config(config)
    context = BuildContext(
        projector_type=name, match=match, config=config, mm_hidden=int(mm_hidden), hidden=int(hidden),
        select_layer=int(_setting(config, "mm_vision_select_layer", -2)),
        select_feature=str(_setting(config, "mm_vision_select_feature", "patch")), tower_loader=tower_loader,
    )
    return registration, context


def config_copy(config: Any) -> SimpleNamespace:
    """A namespace holding ``config``'s attributes, for a context whose checks must not touch the caller's config."""
    return SimpleNamespace(**config_values(config))


def _setting(config: Any, key: str, default: Any) -> Any:
    """``config.key``, or upstream's default when it is absent or ``None`` (a stored 0 stays 0)."""
    value = getattr(config, key, None)
    return default if value is None else value


def settings_in(values: Mapping[str, Any], plugin: CompressorPlugin) -> dict[str, Any]:
    """The plugin's declared settings that are set (not ``None``) in ``values``."""
    return {key: values[key] for key in plugin.keys if values.get(key) is not None}


def apply_runtime_settings(model: Any, values: Mapping[str, Any]) -> None:
    """Change ``runtime`` settings of a loaded model's compressor (e.g. from an eval flag), checked.

    Each value is parsed by its :class:`Setting`, written to ``model.config`` and, when the projector has an
    ``apply_settings(dict)`` method, handed to it (the plugin decides what changing it means).

    Raises:
        ValueError: If the projector has no runtime settings, a key is not one of them, or a value is refused.
    """
    config = model.config
    projector_type = getattr(config, "mm_projector_type", None)
    plugin = plugin_for(projector_type)
    runtime = [setting.key for setting in plugin.settings if setting.runtime] if plugin is not None else []
    if not runtime:
        raise ValueError(f"mm_projector_type {projector_type!r} has no runtime settings")
    parsed: dict[str, Any] = {}
    for key, value in values.items():
        if key not in runtime:
            raise ValueError(f"{key!r} is not a runtime setting of the {plugin.name!r} compressor; runtime settings: {runtime}")
        parsed[key] = plugin.setting(key).parse(value)
    for key, value in parsed.items():
        setattr(config, key, value)
    projector = model.get_model().mm_projector
    if parsed and callable(getattr(projector, "apply_settings", None)):
        projector.apply_settings(parsed)


register_plugin(builtin.PLUGIN)
