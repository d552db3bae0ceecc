"""``braco calibrate``: label-free ``coef``/``idct`` coordinate calibration (paper App. I, Table ``app_coordinate_calibration``).

Also ``python -m braco_patch.calibrate``; the implementation is :mod:`braco_patch.diagnostics.commands`.
"""

from __future__ import annotations

from .diagnostics.commands import calibrate_main


def main(argv: list[str] | None = None) -> None:
    calibrate_main(argv)


if __name__ == "__main__":
    main()
