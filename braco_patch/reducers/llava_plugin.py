"""The seam between the in-LLM reducers and LLaVA: finds every method file of this package and registers its plugin.

Loaded through the ``llava.reducers`` entry point ``reducers = braco_patch.reducers.llava_plugin`` (setup.py). Adding
a method is adding its file: nothing here or anywhere else lists it.
"""

from __future__ import annotations

from llava.model.reducers import register_reducer_plugin
from llava.plugin_api import ReducerPlugin

from ..discovery import declared_plugins

__all__ = ["PLUGINS", "discover"]


def discover(package: str = __package__) -> tuple[ReducerPlugin, ...]:
    """The ``ReducerPlugin`` of every method file of ``package``, by file name (:func:`braco_patch.discovery.declared_plugins`;
    a package declaring none is a RuntimeError)."""
    return declared_plugins(package, ReducerPlugin)


#: The reducers' plugins, registered.
PLUGINS = tuple(register_reducer_plugin(plugin) for plugin in discover())
