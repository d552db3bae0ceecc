"""Serving: terminal chat, the web chat page, and upstream's controller / model-worker setup.

Entry points (each ``python -m llava.serve.<name>``, or ``python llava/serve/<name>.py`` as some forks run
them): ``cli``, ``demo`` (page + model in one process), ``controller``, ``model_worker``,
``gradio_web_server``, ``register_worker``, ``test_message``. Shared pieces: ``generation`` (the streaming
loop), ``engine`` (request checks and the worker API semantics), ``backends`` (where the page gets answers),
``chat_ui`` (the page), ``panels`` (the compressor panel), ``images`` and ``uploads`` (upload checks),
``admission`` (which workers the controller admits), ``protocol`` (wire format), ``templates``, ``webapi``
(request bodies, deadlines, connection limits). Outgoing calls go through :mod:`llava.net`. See docs/SERVING.md.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import NoReturn


def run_as_module(path: str) -> NoReturn:
    """Run ``llava/serve/<name>.py``, started as a file, as ``python -m llava.serve.<name>`` would.

    A file run directly has no package, so its relative imports fail, and its folder (which holds modules named
    ``protocol``, ``templates``, ...) shadows top-level modules. Each entry module calls this first when started
    as a file, after putting the repository root in place of that folder on ``sys.path``.
    """
    name = "llava.serve." + os.path.splitext(os.path.basename(path))[0]
    runpy.run_module(name, run_name="__main__", alter_sys=True)
    sys.exit(0)


__all__ = ["run_as_module"]
