"""The seam between the in-LLM reducers and LLaVA: finds every method file of this package and registers its plugin.

Loaded through the ``llava.reducers`` entry point ``reducers = braco_patch.reducers.llava_plugin`` (setup.py). Adding
a method is adding its file: nothing here or anywhere else lists it.
"""

from __future__ import annotations

import importlib

from llava.model.reducers import register_reducer_plugin
from llava.plugin_api import ReducerPlugin

from . import method_modules

__all__ = ["PLUGINS", "discover"]


def discover(package: str = __package__) -> tuple[ReducerPlugin, ...]:
    """The ``PLUGIN`` of every method file of ``package``, by file name.

    Raises:
        RuntimeError: When none declares one (a broken package must not register nothing silently).
    """
    found = []
    for name in method_modules(importlib.import_module(package).__path__):
        plugin = getattr(importlib.import_module(f"{package}.{name}"), "PLUGIN", None)
        if isinstance(plugin, ReducerPlugin):
            found.append(plugin)
    if not found:
        raise RuntimeError(f"no method file of {package!r} declares a PLUGIN; the package is incomplete")
    return tuple(found)


#: The reducers' plugins, registered.
PLUGINS = tuple(register_reducer_plugin(plugin) for plugin in discover())
