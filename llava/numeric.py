"""Numeric options: one rule for every number a command, a server or a library call takes from its user.

A number is accepted only when it is finite and within its range: a ``> 0`` check alone lets ``inf``, ``nan``
(every comparison with it is false) and values such as ``1e-320`` through, which then overflow where they are
used (``int(inf)``, a deadline of ``time() + inf``, ``fps / 1e-320``). :func:`check_number` is the rule;
:func:`number_type` is the same rule as an ``argparse`` type, so a bad flag stops the command before anything
loads (exit 2, ``argument --flag: expected ...``). Bounds are the limits of what the option can mean (a timeout
of at most a week, a frame count a model can take), not taste; each command names them in its ``--help``.

Imports nothing heavy: commands build their parsers with it before torch is imported.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from llava.utils import UserError

#: The longest timeout or interval, in seconds, a command or server accepts (one week): longer ones overflow
#: some clocks (``inf`` does) and mean "never" anyway.
MAX_SECONDS = 7 * 24 * 3600.0
#: The largest size limit in MiB a command or server takes (1 TiB).
MAX_MIB = 1024 * 1024
#: The largest picture limit in megapixels a server takes (10 gigapixels).
MAX_MEGAPIXELS = 10_000
#: The largest count of requests, images or connections a server holds at once.
MAX_COUNT = 1_000_000


def _shown(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def describe_range(lo: float | None, hi: float | None, *, integer: bool = False, lo_open: bool = False) -> str:
    """What the rule accepts, in words: ``"an integer from 1 to 64"``, ``"a finite number above 0 and at most 10"``."""
    kind = "an integer" if integer else "a finite number"
    if hi is None and lo == (0 if lo_open else 1) and (integer or lo_open):
        return "a positive integer" if integer else "a positive number"
    if lo is not None and hi is not None:
        return f"{kind} above {_shown(lo)} and at most {_shown(hi)}" if lo_open else f"{kind} from {_shown(lo)} to {_shown(hi)}"
    if lo is not None:
        return f"{kind} {'>' if lo_open else '>='} {_shown(lo)}"
    if hi is not None:
        return f"{kind} <= {_shown(hi)}"
    return kind


def number_problem(value: Any, lo: float | None = None, hi: float | None = None, *, integer: bool = False,
                   lo_open: bool = False) -> str | None:
    """Why ``value`` breaks the rule (see :func:`describe_range`), or ``None`` when it is accepted.

    ``bool`` is not a number here; an integral float (``4.0``) counts as an integer, ``4.5`` does not.
    """
    wanted = describe_range(lo, hi, integer=integer, lo_open=lo_open)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be {wanted}"
    if not math.isfinite(value) or (integer and not float(value).is_integer()):
        return f"must be {wanted}"
    if lo is not None and (value <= lo if lo_open else value < lo):
        return f"must be {wanted}"
    if hi is not None and value > hi:
        return f"must be {wanted}"
    return None


def check_number(value: Any, name: str, lo: float | None = None, hi: float | None = None, *, integer: bool = False,
                 lo_open: bool = False, unit: str = "") -> Any:
    """The rule for a number a user gave: finite, within ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``).

    Args:
        value: The number (``int`` or ``float``).
        name: The option as the user spelled it (``"--stream-timeout"``), or a keyword's name.
        lo, hi: The bounds (``None``: unbounded on that side).
        integer: Whether the value must be a whole number.
        lo_open: Whether ``lo`` itself is refused.
        unit: What the number counts (``"seconds"``), added to the sentence.

    Returns:
        ``value`` (an ``int`` when ``integer``).

    Raises:
        UserError: ``"<name> must be <what it accepts> [unit], got <value>"``.
    """
    problem = number_problem(value, lo, hi, integer=integer, lo_open=lo_open)
    if problem is not None:
        raise UserError(f"{name} {problem}{f' ({unit})' if unit else ''}, got {value!r}")
    return int(value) if integer else value


def number_type(lo: float | None = None, hi: float | None = None, *, integer: bool = False, lo_open: bool = False,
                unit: str = "") -> Callable[[str], Any]:
    """:func:`check_number` as an ``argparse`` type: ``type=number_type(0, MAX_SECONDS, lo_open=True)``.

    The text is read as an ``int`` (``integer``) or a ``float``; a text that is not such a number, or a number
    the rule refuses, is argparse's one-line error (``argument --flag: expected ..., got 'inf'``), exit 2.
    """
    wanted = describe_range(lo, hi, integer=integer, lo_open=lo_open) + (f" ({unit})" if unit else "")

    def parse(text: str) -> Any:
        try:
            value: Any = int(text) if integer else float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
        if number_problem(value, lo, hi, integer=integer, lo_open=lo_open) is not None:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text if integer else repr(text)}")
        return value

    parse.__name__ = "integer" if integer else "number"  # argparse names the type in some of its messages
    return parse


def seconds_type(hi: float = MAX_SECONDS) -> Callable[[str], float]:
    """The ``argparse`` type of a timeout or interval: seconds above 0 and at most ``hi`` (a week by default)."""
    return number_type(0, hi, lo_open=True, unit="seconds")


def check_seconds(value: Any, name: str, hi: float = MAX_SECONDS) -> float:
    """:func:`check_number` for a timeout or interval given in code (``Controller(stream_timeout=...)``)."""
    return float(check_number(value, name, 0, hi, lo_open=True, unit="seconds"))


__all__ = [
    "MAX_COUNT", "MAX_MEGAPIXELS", "MAX_MIB", "MAX_SECONDS", "check_number", "check_seconds", "describe_range",
    "number_problem", "number_type", "seconds_type",
]
