"""The ``braco`` command: ``braco <subcommand> ...``; each subcommand is also ``python -m braco_patch.<name>``."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

#: subcommand -> module with ``main(argv)``.
COMMANDS = {
    "demo": ("braco_patch.demo", "what the coder keeps of a real photograph, for every budget"),
    "cost": ("braco_patch.cost.cli", "prefill FLOPs (paper Table 1), compressor stages, and measured latency/memory"),
    "diagnose": ("braco_patch.diagnose", "energy retention, readability and linear probes of a vision tower per basis"),
    "calibrate": ("braco_patch.calibrate", "label-free coef/idct crossover K_b* of a vision tower on your images"),
    "export": ("braco_patch.export", "a copy of a checkpoint in the official Braco code's format (--official IN OUT)"),
}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="braco", description="Braco visual-token compression tools.")
    parser.add_argument("command", choices=sorted(COMMANDS), help="; ".join(f"{k}: {v[1]}" for k, v in COMMANDS.items()))
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        raise SystemExit(0 if argv else 2)
    args = parser.parse_args(argv[:1])
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    importlib.import_module(COMMANDS[args.command][0]).main(argv[1:])


if __name__ == "__main__":
    main()
