"""What a projector plugin declares, as types: settings, projector types, the build context a factory gets and
what it returns, and the plugin declaration itself.

The registry that holds the declarations is :mod:`.registry`; :mod:`.plugins` is the public door that re-exports
both. This module knows no plugin and imports only torch (through :mod:`.needs`) and the cost contract.

A factory is a function of one typed argument::

    def factory(context: BuildContext) -> BuiltProjector: ...

It reads the model config (``context.config``, read only), the widths and the tower's shape from the context, and
returns the module together with the config keys it wants saved (the values it resolved, so ``config.json``
rebuilds the same module). It reads no files and writes nothing into the config: the builder does both, once.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch.nn as nn

from llava.cost.module import CostModel
from llava.utils import BOOLEAN_WORDS, parse_bool

from .needs import ModelNeeds

Boundary = Literal["pre", "post"]
BOUNDARIES = ("pre", "post")
SETTING_TYPES = (bool, int, float, str)

__all__ = [
    "BOUNDARIES", "SETTING_TYPES", "BuildContext", "BuiltProjector", "CompressorPlugin", "ProjectorFactory",
    "ProjectorType", "RunInfo", "Setting", "TowerShape",
]


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
            query compressor); see :func:`llava.model.multimodal_projector.registry.apply_runtime_settings`.
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

        Strings are converted (booleans by :func:`llava.utils.parse_bool`); a bool is never an int or float, and a
        float with a fraction is never an int.

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


_TYPE_WORDS = {bool: f"a boolean ({BOOLEAN_WORDS})", int: "an integer", float: "a number", str: "a string"}


def _convert(kind: type, value: Any) -> Any:
    """``value`` as ``kind``, or ``None`` when it is not one."""
    if kind is bool:
        return parse_bool(value)
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


# ---------------------------------------------------------------------------------------------- building


@dataclass(frozen=True)
class TowerShape:
    """What a factory may know of the vision tower: one view's patch grid, its encoder layers, its CLS token."""

    grid: tuple[int, int]
    layers: int
    has_cls: bool


@dataclass(frozen=True)
class BuildContext:
    """Everything a factory gets (see the module docstring).

    Attributes:
        projector_type: ``config.mm_projector_type``.
        match: The registered pattern's ``re.fullmatch`` of it (groups: K, C, S, ...).
        config: The model config, **read only** (plugin keys already checked and normalised by the builder).
        mm_hidden: The tower's feature width (the projector's input).
        hidden: The LLM's width (the projector's output).
        select_layer: ``mm_vision_select_layer``.
        select_feature: ``mm_vision_select_feature`` (``patch`` or ``cls_patch``).
        tower_loader: Gives the tower's shape (``None`` when the config names no tower); called the first time a
            factory reads :attr:`tower`, so a type that needs no tower never reads a tower's config.
    """

    projector_type: str
    match: re.Match[str]
    config: Any
    mm_hidden: int
    hidden: int
    select_layer: int = -2
    select_feature: str = "patch"
    tower_loader: Callable[[], TowerShape | None] = field(default=lambda: None, repr=False, compare=False)

    @functools.cached_property
    def tower(self) -> TowerShape | None:
        """The tower's shape, or ``None`` when the builder cannot tell (a config that names no tower)."""
        return self.tower_loader()

    def setting(self, key: str, default: Any = None) -> Any:
        """The config's value of ``key``, or ``default`` when it is absent or ``None``."""
        value = getattr(self.config, key, None)
        return default if value is None else value

    def require_tower(self, why: str) -> TowerShape:
        """The tower's shape.

        Raises:
            ValueError: When the builder could not tell it, naming ``why`` the type needs it.
        """
        if self.tower is None:
            raise ValueError(
                f"mm_projector_type {self.projector_type!r} {why}, but the config names no vision tower "
                "(mm_vision_tower); set it to the tower's directory or hub name"
            )
        return self.tower


@dataclass(frozen=True)
class BuiltProjector:
    """What a factory returns.

    Attributes:
        module: The projector.
        config_keys: Keys to save into the model config (and so ``config.json``), e.g. the values it resolved.
        needs: What it needs from the model when that depends on its settings (e.g. the tower layers it resolved);
            ``None`` means the plugin's declared ``needs``.
    """

    module: nn.Module
    config_keys: Mapping[str, Any] = field(default_factory=dict)
    needs: ModelNeeds | None = None


ProjectorFactory = Callable[[BuildContext], BuiltProjector]


@dataclass(frozen=True)
class ProjectorType:
    """One name pattern of a plugin (``re.fullmatch`` on ``mm_projector_type``) and its factory.

    Args:
        pattern: A plain name (``"identity"``) or an anchored regular expression (``r"mlp(\\d+)x_gelu"``).
        factory: ``factory(BuildContext) -> BuiltProjector``.
        description: One line for listings and ``--help``.
        examples: Concrete names of this pattern that build on a tiny test tower (a 6 x 6 grid); the test suite
            builds, runs, saves and reloads every one (tests/llava/test_registered_projectors.py). A plain name
            is its own example.
        example_settings: Config keys the examples need on that tiny tower (e.g. a small C for a type whose
            defaults are sized for a 24 x 24 grid).
        spelling: How users write the names of a pattern, for error messages and listings
            (``"mlp{N}x_gelu"``); a plain name is its own spelling, and a pattern without one is shown as is.
    """

    pattern: str
    factory: ProjectorFactory
    description: str = ""
    examples: tuple[str, ...] = ()
    example_settings: Mapping[str, Any] = field(default_factory=dict)
    spelling: str = ""

    def __post_init__(self) -> None:
        regex = re.compile(self.pattern)
        examples = self.examples or ((self.pattern,) if self.exact else ())
        if not examples:
            raise ValueError(f"projector pattern {self.pattern!r} must declare examples (concrete names it builds)")
        bad = [name for name in examples if regex.fullmatch(name) is None]
        if bad:
            raise ValueError(f"examples {bad} do not match their projector pattern {self.pattern!r}")
        object.__setattr__(self, "examples", tuple(examples))
        object.__setattr__(self, "spelling", self.spelling or self.pattern)

    @property
    def exact(self) -> bool:
        """Whether the pattern is a plain name (resolved before every regular expression)."""
        return re.escape(self.pattern) == self.pattern


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
    """The declaration of one projector plugin (docs/PLUGINS.md; :mod:`.plugins`).

    Args:
        name: Short name for messages and flag help (e.g. ``"tinypool"``).
        projectors: Name patterns and factories.
        settings: Config keys / training flags.
        key_prefixes: Config-key prefixes the plugin owns; an undeclared key with one of them is an error.
        run_defaults: ``run_defaults(RunInfo) -> {key: value}`` for settings the user did not give.
        callbacks: ``callbacks(model) -> list[TrainerCallback]`` for a model that uses this plugin.
        needs: What its projectors need from the model, unless a factory returns its own (:class:`ModelNeeds`).
        boundary: ``"pre"`` (compresses tower features, then projects) or ``"post"`` (runs on projected tokens).
        view: ``view(projector, ViewInputs) -> CompressorView | None`` for the demo panel.
        cost: Its :class:`~llava.cost.module.CostModel` (``None``: its cost cannot be counted).
        showcase: Projector types a first comparison should show (the quickstart's default list).
        video_showcase: The same for a first comparison on videos (the video quickstart's default list).
        reference_scores: Published benchmark scores by name (``{"paper-vanilla": {"gqa": 62.9, ...}}``), which
            ``llava.eval.summarize --baseline NAME`` and ``llava.eval.compare --vanilla NAME`` accept.
        tokens_depend_on_image: Whether the number of tokens per view depends on the image (adaptive selection):
            a bool, or ``tokens_depend_on_image(config) -> bool``. Such a projector cannot feed a merge that needs
            the same count in every view (AnyRes ``spatial``), which is refused before training or loading.
    """

    name: str
    projectors: tuple[ProjectorType, ...]
    settings: tuple[Setting, ...] = ()
    key_prefixes: tuple[str, ...] = ()
    run_defaults: Callable[[RunInfo], dict[str, Any]] | None = None
    callbacks: Callable[[Any], list[Any]] | None = None
    needs: ModelNeeds = ModelNeeds()
    boundary: Boundary = "pre"
    view: Callable[[Any, Any], Any] | None = None
    cost: CostModel | None = None
    showcase: tuple[str, ...] = ()
    video_showcase: tuple[str, ...] = ()
    reference_scores: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    tokens_depend_on_image: bool | Callable[[Any], bool] = False

    def __post_init__(self) -> None:
        if self.boundary not in BOUNDARIES:
            raise ValueError(f"plugin {self.name!r} has boundary {self.boundary!r}; expected 'pre' or 'post'")
        if not isinstance(self.needs, ModelNeeds):
            raise ValueError(f"plugin {self.name!r} declares needs {self.needs!r}; expected a ModelNeeds (a factory returns needs that depend on settings)")
        keys = [setting.key for setting in self.settings]
        if len(set(keys)) != len(keys):
            raise ValueError(f"plugin {self.name!r} declares a setting key twice: {sorted(keys)}")
        outside = [key for key in keys if self.key_prefixes and not key.startswith(self.key_prefixes)]
        if outside:
            raise ValueError(f"plugin {self.name!r} settings {outside} do not start with its key_prefixes {self.key_prefixes}")
        for prefix in self.key_prefixes:
            if not prefix.startswith("mm_") or prefix in ("mm_", "mm_vision_", "mm_projector_"):
                raise ValueError(f"plugin {self.name!r} cannot own the key prefix {prefix!r}; use a prefix of its own")
        unknown = [name for name in (*self.showcase, *self.video_showcase) if not self.matches(name)]
        if unknown:
            raise ValueError(f"plugin {self.name!r} showcases {unknown}, which none of its projector patterns matches")

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
