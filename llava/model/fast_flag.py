"""``--fast {none,compile,cudagraph}``: the one flag of every command that generates, and its one rule.

- ``none``: eager PyTorch, as before.
- ``compile``: prefill and decoding steps (and the vision tower with a fixed-count projector) compiled with
  ``torch.compile``; works on the CPU too.
- ``cudagraph``: the same steps captured into CUDA graphs (CUDA only).

Without the flag a command takes the fast path on CUDA (``cudagraph``: no compile wait, the eager kernels replayed)
and eager decoding elsewhere. What the fast path does: :mod:`llava.model.fast_generation` and docs/SPEED.md.

This module imports no torch at import time, so a command's ``--help`` stays quick.
"""

from __future__ import annotations

import argparse
from typing import Any

from llava.capture import FAST_MODES
from llava.utils import UserError

FAST_HELP = ("generation path: none (eager), compile (torch.compile, also on cpu) or cudagraph (CUDA graphs); "
             "default: cudagraph on cuda, none elsewhere; greedy answers are the same on every path")


def add_fast_flag(parser: argparse.ArgumentParser | Any) -> None:
    """Add ``--fast`` to ``parser`` (an argparse parser or argument group)."""
    parser.add_argument("--fast", choices=FAST_MODES, default=None, help=FAST_HELP)


def resolve_fast(mode: str | None, device: Any) -> str:
    """The fast path for ``--fast mode`` on ``device`` (a resolved device name): ``mode`` as given, checked, or
    :func:`default_fast` when ``None``.

    Raises:
        UserError: For a name outside ``FAST_MODES``, or ``cudagraph`` on a device that is not CUDA.
    """
    if mode is None:
        return default_fast(device)
    if mode not in FAST_MODES:
        raise UserError(f"--fast {mode!r} is not a fast path; use one of {', '.join(FAST_MODES)}")
    if mode == "cudagraph" and not str(device).startswith("cuda"):
        raise UserError(f"--fast cudagraph needs a CUDA device, got --device {device}; use --fast compile or none")
    return mode


def default_fast(device: Any) -> str:
    """``cudagraph`` on a CUDA device, ``none`` elsewhere."""
    return "cudagraph" if str(device).startswith("cuda") else "none"


def use_fast(model: Any, mode: str) -> None:
    """Put the loaded ``model``'s generation on the fast path ``mode`` (``none``: eager)."""
    from llava.model.fast_generation import enable_fast_path  # torch: only once a model is loaded

    enable_fast_path(model, mode)


__all__ = ["FAST_HELP", "add_fast_flag", "default_fast", "resolve_fast", "use_fast"]
