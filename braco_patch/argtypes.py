"""``argparse`` types shared by the ``braco`` subcommands (kept apart from :mod:`braco_patch.cli`, the top-level
command, so that subpackages never import it)."""

from __future__ import annotations

import argparse

__all__ = ["positive_int"]


def positive_int(value: str) -> int:
    """``argparse`` type for counts: an integer >= 1, else one clear error."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {number}")
    return number
