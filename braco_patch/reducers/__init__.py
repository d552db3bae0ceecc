"""The in-LLM token reducers, one file per method (FastV, PyramidDrop, ...), each written against the plugin API
alone (:mod:`llava.plugin_api`): its selection, its steps, its per-layer token count, its view and ``PLUGIN``.

Nothing here lists the methods: :mod:`.llava_plugin` finds the method files and registers their plugins
(docs/PLUGINS.md, "The reducer kind"; docs/BASELINES.md for each method's parity with its release).
"""

from __future__ import annotations

import pkgutil
from typing import Any


def method_modules(path: Any = None) -> list[str]:
    """The method files of this package by name (shared ``_*`` modules and the seam ``llava_plugin`` left out)."""
    found = pkgutil.iter_modules(__path__ if path is None else path)
    return sorted(info.name for info in found if not info.name.startswith("_") and info.name != "llava_plugin")
