"""Keep kineto's trace markers out of the user's terminal while ``torch.profiler`` runs.

kineto (the library behind ``torch.profiler``) writes two ``USDT:... profiler_start`` / ``profiler_stop`` lines to
the process's standard error for every profiled call, one measured row of the cost command being one call. They are
logged at kineto's highest severity, above its errors, so ``KINETO_LOG_LEVEL`` cannot hide them without hiding
kineto's errors too. :func:`without_trace_markers` therefore captures file descriptor 2 around the profiled block
and writes back every line but those markers, in order, once the block ends (also when it raises).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["MARKER", "without_trace_markers"]

#: A kineto trace-marker line: ``USDT:<date> <time> <pid>:<tid> <file>:<line>] profiler_start`` (or ``_stop``).
MARKER = re.compile(rb"^USDT:.*\] profiler_(start|stop)\r?$")

_STDERR = 2


@contextmanager
def without_trace_markers() -> Iterator[None]:
    """Run the block with standard error captured; afterwards replay it without kineto's trace-marker lines.

    Everything else written to file descriptor 2 meanwhile (Python's ``sys.stderr``, warnings, C++ errors) comes
    back unchanged. Where descriptor 2 cannot be duplicated (no such descriptor), the block runs uncaptured.
    """
    sys.stderr.flush()
    try:
        saved = os.dup(_STDERR)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), _STDERR)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, _STDERR)
            os.close(saved)
            captured.seek(0)
            _replay(captured.read())


def _replay(data: bytes) -> None:
    """Write ``data`` to descriptor 2 without the lines :data:`MARKER` matches."""
    kept = b"".join(line for line in data.splitlines(keepends=True) if not MARKER.match(line.rstrip(b"\n")))
    view = memoryview(kept)
    while view:
        written = os.write(_STDERR, view)
        view = view[written:]
