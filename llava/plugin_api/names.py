"""The plugin API's words: booleans, the one name grammar of a method's types (:class:`NameForm`), a method's name,
and the settings a plugin declares (:class:`Setting`). The standard library only."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The kinds of method a plugin declares types of (see the package docstring); the registry keeps one section each.
PLUGIN_KINDS = ("projector", "reducer")
#: A method's one name: lower-case letters and digits, one word (``mypool``).
_METHOD_NAME = re.compile(r"[a-z][a-z0-9]*")


def _check_method_name(name: Any, example: str) -> None:
    """Refuse a declaration's ``name`` that is not a method's one name, in one sentence showing ``example``."""
    if not isinstance(name, str) or not _METHOD_NAME.fullmatch(name):
        raise ValueError(f"a method's name is lower-case letters and digits, one word (e.g. {example!r}), got {name!r}")


def _check_kind(kind: str) -> None:
    """Refuse a plugin kind that is not one of :data:`PLUGIN_KINDS`."""
    if kind not in PLUGIN_KINDS:
        raise ValueError(f"unknown plugin kind {kind!r}; expected one of {list(PLUGIN_KINDS)}")


# ---------------------------------------------------------------------------------------------- booleans

#: The one spelling of booleans in flags and config files (any case): what :func:`parse_bool` accepts.
TRUE_WORDS = ("true", "yes", "t", "y", "1", "on")
FALSE_WORDS = ("false", "no", "f", "n", "0", "off")
BOOLEAN_WORDS = "true/false, yes/no, t/f, y/n, 1/0, on/off"


def parse_bool(value: Any) -> bool | None:
    """``value`` as a boolean, or ``None`` when it is not one: the one boolean rule of flags and config files
    (:mod:`llava.utils` exports it to the rest of llava; a plugin's boolean settings are parsed by it).

    Accepted: a bool; the integers 0 and 1; the strings of :data:`TRUE_WORDS` / :data:`FALSE_WORDS` in any case,
    surrounding spaces ignored. Anything else (``"maybe"``, ``2``, ``None``) is not a boolean.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    return None


# ---------------------------------------------------------------------------------------------- the name grammar

_TOKEN = re.compile(r"\{([A-Za-z]\w*)\}|\[([^\[\]]*)\]|([A-Za-z0-9_.\-]+)")


@dataclass(frozen=True)
class NameForm:
    """One form of a method's type names, in the one grammar: literal text (letters, digits, ``_ . -``), ``{X}`` a
    whole number named X, ``[a|b]`` an optional part with alternatives (no nesting; an alternative written ``~a`` is
    an alias: accepted, not shown in the :attr:`spelling`). ``{K}`` is, by convention, the visual tokens per view, so
    the form gives the type of a budget (:meth:`budget_name`).

    ``NameForm("mypool[_k{K}]")`` matches ``mypool`` and ``mypool_k16`` (its :attr:`regex` is
    ``mypool(?:_k(?P<K>\\d+))?``), gives ``mypool_k16`` for ``format(K=16)`` and ``{"K": 16}`` for
    ``parse("mypool_k16")``.
    """

    template: str

    def __post_init__(self) -> None:
        if not isinstance(self.template, str) or not self.template:
            raise ValueError(f"a name form is literal text, {{X}} numbers and [a|b] options, got {self.template!r}")
        names = [name for part in self._parts for name in part[1]]  # reading the template checks it
        if len(set(names)) != len(names):
            raise ValueError(f"name form {self.template!r} names a placeholder twice")

    @functools.cached_property
    def _parts(self) -> tuple[tuple[str, tuple[str, ...], bool], ...]:
        """``(regex, placeholders, optional)`` per piece of the template."""
        parts, position = [], 0
        while position < len(self.template):
            match = _TOKEN.match(self.template, position)
            if match is None:
                raise ValueError(f"name form {self.template!r}: cannot read {self.template[position:]!r}; use letters, digits, "
                                 "'_', '.', '-', {X} and [a|b]")
            number, option, literal = match.groups()
            if number is not None:
                parts.append((rf"(?P<{number}>\d+)", (number,), False))
            elif option is not None:
                alternatives = [NameForm(text.removeprefix("~")) for text in option.split("|")]
                regex = "(?:" + "|".join(form.regex for form in alternatives) + ")?"
                parts.append((regex, tuple(name for form in alternatives for name in form.placeholders), True))
            else:
                parts.append((re.escape(literal), (), False))
            position = match.end()
        return tuple(parts)

    @property
    def regex(self) -> str:
        """The pattern the registry matches (``re.fullmatch``), one named group per placeholder."""
        return "".join(part[0] for part in self._parts)

    @property
    def spelling(self) -> str:
        """How users write the names (the template without its aliases), for messages and ``--help``."""
        out = []
        for piece in _TOKEN.finditer(self.template):
            option = piece.group(2)
            shown = None if option is None else "|".join(text for text in option.split("|") if not text.startswith("~"))
            out.append(piece.group(0) if option is None else (f"[{shown}]" if shown else ""))
        return "".join(out)

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(name for part in self._parts for name in part[1])

    @property
    def required(self) -> tuple[str, ...]:
        """The placeholders every name of the form has (outside ``[...]``)."""
        return tuple(name for part in self._parts if not part[2] for name in part[1])

    def parse(self, name: str) -> dict[str, int] | None:
        """The values of ``name`` (``{"K": 16}``; an absent optional part gives none), or ``None`` when it is not of the form."""
        match = re.fullmatch(self.regex, name)
        return None if match is None else {key: int(value) for key, value in match.groupdict().items() if value is not None}

    def format(self, **values: int) -> str:
        """The name with these values: optional parts are written when all their placeholders are given.

        Raises:
            ValueError: For a missing required value, an unknown placeholder or a value that is not a whole number >= 0.
        """
        unknown = sorted(set(values) - set(self.placeholders))
        missing = [name for name in self.required if name not in values]
        bad = {key: value for key, value in values.items() if isinstance(value, bool) or not isinstance(value, int) or value < 0}
        if unknown or missing or bad:
            raise ValueError(f"name form {self.template!r} takes whole numbers for {list(self.placeholders)}; got {values!r}")
        return "".join(self._format_piece(piece, values) for piece in _TOKEN.finditer(self.template))

    @staticmethod
    def _format_piece(piece: re.Match[str], values: Mapping[str, int]) -> str:
        number, option, literal = piece.groups()
        if number is not None:
            return str(values[number])
        if literal is not None:
            return literal
        for alternative in (NameForm(text.removeprefix("~")) for text in option.split("|")):
            if alternative.placeholders and all(name in values for name in alternative.placeholders):
                return alternative.format(**{name: values[name] for name in alternative.placeholders})
        return ""

    def budget_name(self, budget: int) -> str | None:
        """The type of this form that sends ``budget`` tokens per view (its ``{K}``), or ``None`` when it has no ``{K}``
        or needs other values too."""
        if "K" not in self.placeholders or set(self.required) - {"K"}:
            return None
        return self.format(K=budget)

    def __str__(self) -> str:
        return self.spelling


# ---------------------------------------------------------------------------------------------- settings

SETTING_TYPES = (bool, int, float, str)


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

        Strings are converted (booleans by :func:`parse_bool`); a bool is never an int or float, and a float with a
        fraction is never an int.

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
