"""``braco diagnose energy|probe``: compressibility diagnostics of a vision tower (paper §3.2, App. A–B, G).

Also ``python -m braco_patch.diagnose``; the implementation is :mod:`braco_patch.diagnostics.commands`.
"""

from __future__ import annotations

from .diagnostics.commands import diagnose_main


def main(argv: list[str] | None = None) -> None:
    diagnose_main(argv)


if __name__ == "__main__":
    main()
