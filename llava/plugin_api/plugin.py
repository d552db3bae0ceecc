"""The declaration of a projector-kind method (:class:`CompressorPlugin`): its name, types, settings, needs, cost and
view, checked when it is made. The standard library only."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .contract import BOUNDARIES, Boundary, ModelNeeds, ProjectorType, RunInfo
from .cost import CostModel
from .names import Setting, _check_kind, _check_method_name
from .view import CompressorView, ViewInputs


@dataclass(frozen=True)
class CompressorPlugin:
    """The declaration of one method (docs/PLUGINS.md).

    Args:
        name: The method's one name (lower-case letters and digits, e.g. ``"mypool"``): its rows in the cost and
            comparison tables, its demo panel, messages and flag help.
        projectors: Its ``projector``-kind types (:meth:`ProjectorType.named`).
        settings: Config keys / training flags.
        key_prefixes: Config-key prefixes the plugin owns; an undeclared key with one of them is an error.
        run_defaults: ``run_defaults(RunInfo) -> {key: value}`` for settings the user did not give.
        callbacks: ``callbacks(model) -> list[TrainerCallback]`` for a model that uses this plugin.
        needs: What its projectors need from the model, unless a factory returns its own (:class:`ModelNeeds`).
        boundary: ``"pre"`` (compresses tower features, then projects) or ``"post"`` (runs on projected tokens).
        view: ``view(projector, ViewInputs) -> CompressorView | None`` for the demo panel.
        cost: Its :class:`CostModel` (``None``: its cost cannot be counted).
        showcase: Types a first comparison should show (the quickstart's default list).
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
    view: Callable[[Any, ViewInputs], CompressorView | None] | None = None
    cost: CostModel | None = None
    showcase: tuple[str, ...] = ()
    video_showcase: tuple[str, ...] = ()
    reference_scores: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    tokens_depend_on_image: bool | Callable[[Any], bool] = False

    def __post_init__(self) -> None:
        _check_method_name(self.name, "mypool")
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

    def types(self, kind: str = "projector") -> tuple[ProjectorType, ...]:
        """Its declared types of ``kind`` (one of :data:`PLUGIN_KINDS`)."""
        _check_kind(kind)
        return self.projectors if kind == "projector" else ()

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

    def budget_types(self, budget: int) -> list[str]:
        """Its types sending ``budget`` tokens per view: the declared ``cost.types_at_budget``, else every type's
        ``{K}`` form at the budget (empty: the method is not one of a budget, e.g. upstream's projectors).

        Raises:
            ValueError: One sentence, when the method cannot give ``budget`` at all.
        """
        declared = self.cost.types_at_budget if self.cost is not None else None
        if declared is not None:
            return list(declared(budget))
        return [name for entry in self.projectors if (name := entry.budget_name(budget)) is not None]

    @property
    def takes_budget(self) -> bool:
        """Whether the method gives types per visual-token budget (a compressor, in ``--projector all``)."""
        declared = self.cost is not None and self.cost.types_at_budget is not None
        return declared or any(entry.form is not None and entry.form.budget_name(1) is not None for entry in self.projectors)

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
