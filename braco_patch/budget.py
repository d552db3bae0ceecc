"""``python -m braco_patch.budget BUDGET``: a token budget or allocation name, resolved for the shell launchers.

The launchers (``scripts/v1_5/braco/*.sh``, ``scripts/train_braco.sh``, ``scripts/evaluate.sh``) call this instead
of parsing names in bash, so the grammar lives once (:func:`braco_patch.config.parse_name`). ``BUDGET`` is a
total K (``16``), ``k16``, or an allocation ``c<C>s<S>[_coef|_idct|_randrot]``, with or without ``braco_``.

Output, one line of space-separated fields::

    NAME PROJECTOR TOKENS CUTOFF RESIDUAL COORDINATES
    k16  braco_k16 16     3      7        coef

``NAME`` is the run's folder tag (``k<K>`` for a budget, the allocation otherwise); ``COORDINATES`` is the
resolved mode (``coef``, ``idct`` or ``randrot``). A bad budget prints one sentence on stderr and exits 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .config import PROJECTOR_PREFIX, BracoConfig, parse_name

USAGE = "usage: python -m braco_patch.budget BUDGET   (4, 9, 16, 25, any K, k<K>, or c<C>s<S> such as c3s7)"


def resolve(budget: str) -> tuple[str, BracoConfig]:
    """``(folder tag, config)`` of a budget argument.

    Raises:
        ValueError: One sentence naming the argument and the accepted forms.
    """
    text = budget.strip().removeprefix(PROJECTOR_PREFIX)
    name = f"k{text}" if text.isdigit() else text
    try:
        fields, _ = parse_name(name)
        config = BracoConfig(**fields)
    except ValueError as error:
        raise ValueError(
            f"unknown budget {budget!r}: expected 4, 9, 16, 25, another positive integer K, or c<C>s<S> such as c3s7 ({error})"
        ) from None
    return name, config


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if len(args) != 1 else sys.stdout)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        name, config = resolve(args[0])
    except ValueError as error:
        print(f"budget: error: {error}", file=sys.stderr)
        return 2
    fields = (name, PROJECTOR_PREFIX + name, config.output_tokens, config.cutoff, config.residual_tokens, config.resolved_coordinates)
    print(" ".join(str(field) for field in fields))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
