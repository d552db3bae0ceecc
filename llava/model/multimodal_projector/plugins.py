"""Compressor plugins: one declaration per visual-token compressor, in one place.

A compressor (a projector that changes the number of visual tokens, or any projector with settings of its own)
declares itself with a :class:`CompressorPlugin` and :func:`register_plugin`, usually from the module that the
``llava.projectors`` entry point names. The declaration says:

- ``projectors``: its name patterns (``re.fullmatch``) → factories ``factory(config, match) -> nn.Module``;
  they go into the projector registry of :mod:`.builder`;
- ``settings``: :class:`Setting` s. Each is a ``config.json`` key and, with the same name, a training flag
  (``--key``; it appears in ``train.py --help``, is parsed by ``HfArgumentParser`` and checked by
  :meth:`Setting.parse`). Given flags are written to ``config.json``; on load the keys are checked again
  (types, choices, ranges) and a key that starts with one of ``key_prefixes`` but is not declared is an error
  that names the closest declared key;
- ``run_defaults``: values for unset settings that depend on the run (stage, planned optimizer steps),
  e.g. a temperature schedule per training stage;
- ``callbacks``: ``callbacks(model) -> list[TrainerCallback]``, added by ``train.py`` to the trainer;
- ``needs``: what :meth:`LlavaMetaForCausalLM.encode_images` must hand the projector besides the select
  layer's features (:class:`ModelNeeds`: other tower layers, one layer's attention relative to the select
  layer, the question or the whole prompt; a constant or ``needs(config) -> ModelNeeds``), resolved once when
  the projector is built and kept on it (:func:`attach_needs`, :func:`projector_needs`);
- ``boundary``: ``"pre"`` (the module compresses tower features, then projects; the built module is the whole
  projector) or ``"post"`` (it runs on projected tokens); the cost tools account by it;
- ``view``: ``view(projector, ViewInputs) -> CompressorView | None``, the demo panel's picture
  (:mod:`llava.serve.panels`);
- ``cost``: a :class:`llava.cost.module.CostModel`: its module's FLOPs in llava's convention and its projector types
  per visual-token budget (the cost tables, ``llava.eval.compare``, the quickstart's ``--projectors all``).

**How a projector is called** (:meth:`LlavaMetaForCausalLM.encode_images`): a projector whose plugin needs
nothing (:attr:`ModelNeeds.extra` is false) is called as ``projector(features)`` with ``features``
``[N, T, mm_hidden_size]`` (the select layer, after ``mm_vision_select_feature``), exactly as upstream. Otherwise
it is called as ``projector(features, inputs)`` with ``inputs`` a :class:`CompressorInputs`. The text a
compressor reads arrives as an argument of that call (from ``generate`` / ``forward``'s ``question_ids`` or the
model's own ids, :mod:`llava.model.compressor_text`), never as model state.

This module imports nothing heavy and knows no plugin by name.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from llava.cost.module import CostModel

from .needs import NEEDS_ATTRIBUTE, TEXT_NEEDS, CompressorInputs, ModelNeeds, projector_needs

Boundary = Literal["pre", "post"]
BOUNDARIES = ("pre", "post")
SETTING_TYPES = (bool, int, float, str)
_TRUE_WORDS = ("true", "yes", "t", "y", "1")
_FALSE_WORDS = ("false", "no", "f", "n", "0")


# ---------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Setting:
    """One plugin setting: a ``config.json`` key and the training flag of the same name.

    Args:
        key: e.g. ``"mm_tiny_gain"``; must start with ``mm_``.
        type: ``bool``, ``int``, ``float`` or ``str``.
        help: Shown in ``--help``.
        default: What the plugin uses when the key is absent (documentation only: an unset flag stays ``None``
            and is not written, so the plugin's own default applies).
        choices: Accepted values (``str`` settings).
        minimum, maximum: Inclusive bounds (numeric settings).
        runtime: The setting may change after loading, without retraining (e.g. the token count of a nested
            query compressor); see :func:`apply_runtime_settings`.
    """

    key: str
    type: type
    help: str = ""
    default: Any = None
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    runtime: bool = False

    def __post_init__(self) -> None:
        if not self.key.startswith("mm_") or not self.key.isidentifier():
            raise ValueError(f"a plugin setting key must be an identifier starting with 'mm_', got {self.key!r}")
        if self.type not in SETTING_TYPES:
            raise ValueError(f"setting {self.key!r} has type {self.type!r}; expected one of bool, int, float, str")

    def parse(self, value: Any) -> Any:
        """``value`` (from a flag or ``config.json``) as this setting's type, checked; ``None`` stays ``None``.

        Strings are converted (``"false"``/``"no"``/``"0"`` are False for booleans); a bool is never an
        int or float, and a float with a fraction is never an int.

        Raises:
            ValueError: One sentence naming the key, the value and what is accepted.
        """
        if value is None:
            return None
        parsed = _convert(self.type, value)
        if parsed is None:
            raise ValueError(f"{self.key} must be {_TYPE_WORDS[self.type]}, got {value!r}")
        if self.choices is not None and parsed not in self.choices:
            raise ValueError(f"{self.key} must be one of {list(self.choices)}, got {value!r}")
        if self.type in (int, float):
            low = -math.inf if self.minimum is None else self.minimum
            high = math.inf if self.maximum is None else self.maximum
            if not low <= parsed <= high:
                raise ValueError(f"{self.key} must be between {low:g} and {high:g}, got {value!r}")
        return parsed

    @property
    def description(self) -> str:
        """``help`` plus the default and accepted values, for ``--help``."""
        parts = [self.help] if self.help else []
        if self.default is not None:
            parts.append(f"default: {self.default}")
        if self.choices is not None:
            parts.append("one of " + ", ".join(map(str, self.choices)))
        return "; ".join(parts)


_TYPE_WORDS = {bool: "a boolean (true/false/yes/no/1/0)", int: "an integer", float: "a number", str: "a string"}


def _convert(kind: type, value: Any) -> Any:
    """``value`` as ``kind``, or ``None`` when it is not one."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.lower() in _TRUE_WORDS + _FALSE_WORDS:
            return value.lower() in _TRUE_WORDS
        return None
    if kind is int:
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
            return int(value)
        return None
    if kind is float:
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            return float(value) if math.isfinite(value) else None
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return None
            return number if math.isfinite(number) else None
        return None
    return value if isinstance(value, str) else None


# ---------------------------------------------------------------------------------------------- plugins


ProjectorFactory = Callable[[Any, "re.Match[str]"], torch.nn.Module]


@dataclass(frozen=True)
class ProjectorType:
    """One name pattern of a plugin (``re.fullmatch`` on ``mm_projector_type``) and its factory."""

    pattern: str
    factory: ProjectorFactory
    description: str = ""


@dataclass(frozen=True)
class RunInfo:
    """What a plugin's ``run_defaults`` may depend on.

    Attributes:
        stage: ``"pretrain"`` (only the projector trains, ``--tune_mm_mlp_adapter True``) or ``"finetune"``.
        total_steps: The run's planned optimizer steps, as the transformers ``Trainer`` counts them.
        projector_type: ``--mm_projector_type``.
    """

    stage: str
    total_steps: int
    projector_type: str


@dataclass(frozen=True)
class CompressorPlugin:
    """The declaration of one compressor (see the module docstring).

    Args:
        name: Short name for messages and flag help (e.g. ``"divprune"``).
        projectors: Name patterns and factories.
        settings: Config keys / training flags.
        key_prefixes: Config-key prefixes the plugin owns; an undeclared key with one of them is an error.
        run_defaults: ``run_defaults(RunInfo) -> {key: value}`` for settings the user did not give.
        callbacks: ``callbacks(model) -> list[TrainerCallback]`` for a model that uses this plugin.
        needs: A :class:`ModelNeeds`, or ``needs(config) -> ModelNeeds``.
        boundary: ``"pre"`` or ``"post"`` (see the module docstring).
        view: ``view(projector, ViewInputs) -> CompressorView | None`` for the demo panel.
        cost: Its :class:`~llava.cost.module.CostModel` (``None``: its cost cannot be counted).
    """

    name: str
    projectors: tuple[ProjectorType, ...]
    settings: tuple[Setting, ...] = ()
    key_prefixes: tuple[str, ...] = ()
    run_defaults: Callable[[RunInfo], dict[str, Any]] | None = None
    callbacks: Callable[[Any], list[Any]] | None = None
    needs: ModelNeeds | Callable[[Any], ModelNeeds] = ModelNeeds()
    boundary: Boundary = "pre"
    view: Callable[[Any, Any], Any] | None = None
    cost: CostModel | None = None

    def __post_init__(self) -> None:
        if self.boundary not in BOUNDARIES:
            raise ValueError(f"plugin {self.name!r} has boundary {self.boundary!r}; expected 'pre' or 'post'")
        keys = [setting.key for setting in self.settings]
        if len(set(keys)) != len(keys):
            raise ValueError(f"plugin {self.name!r} declares a setting key twice: {sorted(keys)}")
        outside = [key for key in keys if self.key_prefixes and not key.startswith(self.key_prefixes)]
        if outside:
            raise ValueError(f"plugin {self.name!r} settings {outside} do not start with its key_prefixes {self.key_prefixes}")
        for prefix in self.key_prefixes:
            if not prefix.startswith("mm_") or prefix in ("mm_", "mm_vision_", "mm_projector_"):
                raise ValueError(f"plugin {self.name!r} cannot own the key prefix {prefix!r}; use a prefix of its own")

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(setting.key for setting in self.settings)

    def setting(self, key: str) -> Setting:
        for setting in self.settings:
            if setting.key == key:
                return setting
        raise KeyError(key)

    def matches(self, projector_type: str) -> bool:
        return any(re.fullmatch(entry.pattern, projector_type) for entry in self.projectors)

    def needs_for(self, config: Any) -> ModelNeeds:
        return self.needs(config) if callable(self.needs) else self.needs

    def owns(self, key: str) -> bool:
        return key in self.keys or (bool(self.key_prefixes) and key.startswith(self.key_prefixes))

    def check_config(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Check this plugin's keys in a flat config mapping; returns ``{key: parsed value}`` of the present ones.

        Raises:
            ValueError: For an undeclared key with one of ``key_prefixes`` (naming the closest declared key) or a
                value :meth:`Setting.parse` refuses.
        """
        parsed: dict[str, Any] = {}
        for key, value in values.items():
            if not self.owns(key):
                continue
            if key not in self.keys:
                close = difflib.get_close_matches(key, self.keys, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(self.keys)}"
                raise ValueError(f"{key!r} is not a setting of the {self.name!r} compressor{hint}")
            parsed[key] = self.setting(key).parse(value)
        return parsed


_PLUGINS: dict[str, CompressorPlugin] = {}


def register_plugin(plugin: CompressorPlugin) -> CompressorPlugin:
    """Register ``plugin`` and its projector types (registering a plugin of the same name again replaces it).

    Raises:
        ValueError: If one of its setting keys is declared by another plugin.
    """
    from .builder import register_projector

    for other in _PLUGINS.values():
        shared = set(other.keys) & set(plugin.keys) if other.name != plugin.name else set()
        if shared:
            raise ValueError(f"plugin {plugin.name!r} declares {sorted(shared)}, which plugin {other.name!r} already declares")
    _PLUGINS[plugin.name] = plugin
    for entry in plugin.projectors:
        register_projector(entry.pattern, entry.description)(entry.factory)
    return plugin


def unregister_plugin(name: str) -> None:
    """Remove a plugin and its projector types (for tests; a no-op for an unknown name)."""
    from .builder import unregister_projector

    plugin = _PLUGINS.pop(name, None)
    if plugin is not None:
        for entry in plugin.projectors:
            unregister_projector(entry.pattern)


def list_plugins() -> list[CompressorPlugin]:
    """Every registered plugin (the ``llava.projectors`` entry points are imported first)."""
    from .builder import load_plugins

    load_plugins()
    return list(_PLUGINS.values())


def plugin_for(projector_type: str | None) -> CompressorPlugin | None:
    """The plugin whose patterns match ``projector_type`` (``None`` for built-ins and unknown names)."""
    if not projector_type:
        return None
    for plugin in list_plugins():
        if plugin.matches(projector_type):
            return plugin
    return None


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


def check_plugin_config(config: Any) -> CompressorPlugin | None:
    """Validate and normalise, in place, the settings of the plugin that ``config.mm_projector_type`` names.

    Also refuses keys another plugin owns, since no projector would read them. Returns the plugin.

    Raises:
        ValueError: See :meth:`CompressorPlugin.check_config`.
    """
    projector_type = getattr(config, "mm_projector_type", None)
    plugin = plugin_for(projector_type)
    values = config_values(config)
    if plugin is not None:
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


def needs_for_config(config: Any) -> ModelNeeds:
    """What the configured projector needs from the model (nothing extra for built-ins).

    This looks the plugin up by name; the model does it once, when the projector is built
    (:func:`attach_needs`), never per forward pass.
    """
    plugin = plugin_for(getattr(config, "mm_projector_type", None))
    return plugin.needs_for(config) if plugin is not None else ModelNeeds()


def attach_needs(projector: torch.nn.Module, config: Any) -> torch.nn.Module:
    """Resolve what ``config``'s projector needs and keep it on the built ``projector``; returns the projector."""
    setattr(projector, NEEDS_ATTRIBUTE, needs_for_config(config))
    return projector


def settings_in(values: Mapping[str, Any], plugin: CompressorPlugin) -> dict[str, Any]:
    """The plugin's declared settings that are set (not ``None``) in ``values``."""
    return {key: values[key] for key in plugin.keys if values.get(key) is not None}


def apply_runtime_settings(model: Any, values: Mapping[str, Any]) -> None:
    """Change ``runtime`` settings of a loaded model's compressor (e.g. from an eval flag), checked.

    Each value is parsed by its :class:`Setting`, written to ``model.config`` and, when the projector has an
    ``apply_settings(dict)`` method, handed to it (the plugin decides what changing it means).

    Raises:
        ValueError: If the model has no compressor plugin, a key is not one of its runtime settings, or a value
            is refused.
    """
    config = model.config
    plugin = plugin_for(getattr(config, "mm_projector_type", None))
    if plugin is None:
        raise ValueError(f"mm_projector_type {getattr(config, 'mm_projector_type', None)!r} has no runtime settings")
    runtime = [setting.key for setting in plugin.settings if setting.runtime]
    parsed: dict[str, Any] = {}
    for key, value in values.items():
        if key not in runtime:
            raise ValueError(f"{key!r} is not a runtime setting of the {plugin.name!r} compressor; runtime settings: {runtime or 'none'}")
        parsed[key] = plugin.setting(key).parse(value)
    for key, value in parsed.items():
        setattr(config, key, value)
    projector = model.get_model().mm_projector
    if parsed and callable(getattr(projector, "apply_settings", None)):
        projector.apply_settings(parsed)
    if parsed:  # a setting may change what the compressor reads: resolve its needs again
        attach_needs(projector, config)


__all__ = [
    "BOUNDARIES",
    "NEEDS_ATTRIBUTE",
    "TEXT_NEEDS",
    "apply_runtime_settings",
    "attach_needs",
    "CompressorInputs",
    "CompressorPlugin",
    "ModelNeeds",
    "ProjectorType",
    "RunInfo",
    "Setting",
    "check_plugin_config",
    "list_plugins",
    "needs_for_config",
    "owner_of",
    "plugin_for",
    "plugin_settings",
    "projector_needs",
    "register_plugin",
    "settings_in",
    "unregister_plugin",
]
