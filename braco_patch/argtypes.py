"""``argparse`` types shared by the ``braco`` subcommands (kept apart from :mod:`braco_patch.cli`, the top-level
command, so that subpackages never import it). They are llava's one numeric rule (:mod:`llava.numeric`: a finite
number within the flag's range), so every command of the project refuses a bad number the same way."""

from __future__ import annotations

from llava.numeric import number_type

__all__ = ["non_negative_int", "positive_int"]

#: ``argparse`` type for counts: an integer >= 1, else one clear error (``expected a positive integer, got 0``).
positive_int = number_type(1, integer=True)
#: ``argparse`` type for an amount that may be zero (warm-up iterations, extra tokens): an integer >= 0.
non_negative_int = number_type(0, integer=True)
