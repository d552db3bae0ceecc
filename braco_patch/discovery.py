"""How a plugin package finds its methods: one file per method, nothing lists them.

A package of methods (``braco_patch.baselines``, ``braco_patch.reducers``) keeps shared pieces in ``_*`` modules and
its LLaVA seam in ``llava_plugin``; every other module is a method file declaring a ``PLUGIN``. This module imports
nothing of LLaVA: the seams pass the plugin class they register.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

SEAM = "llava_plugin"


def method_modules(path: Any) -> list[str]:
    """The method files of the package at ``path`` (its ``__path__``), by name: ``_*`` modules and the seam left out."""
    return sorted(info.name for info in pkgutil.iter_modules(path) if not info.name.startswith("_") and info.name != SEAM)


def declared_plugins(package: str, kind: type) -> tuple[Any, ...]:
    """The ``PLUGIN`` of every method file of ``package`` that is a ``kind``, by file name.

    Raises:
        RuntimeError: When none declares one (a broken package must not register nothing silently).
    """
    found = []
    for name in method_modules(importlib.import_module(package).__path__):
        plugin = getattr(importlib.import_module(f"{package}.{name}"), "PLUGIN", None)
        if isinstance(plugin, kind):
            found.append(plugin)
    if not found:
        raise RuntimeError(f"no method file of {package!r} declares a PLUGIN; the package is incomplete")
    return tuple(found)


__all__ = ["SEAM", "declared_plugins", "method_modules"]
