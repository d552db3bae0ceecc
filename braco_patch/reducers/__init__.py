"""The in-LLM token reducers, one file per method (FastV, PyramidDrop, ...), each written against the plugin API
alone (:mod:`llava.plugin_api`): its selection, its steps, its per-layer token count, its view and ``PLUGIN``.

Nothing here lists the methods: :mod:`.llava_plugin` finds the method files and registers their plugins
(docs/PLUGINS.md, "The reducer kind"; docs/BASELINES.md for each method's parity with its release).
"""

from __future__ import annotations

from typing import Any

from .. import discovery


def method_modules(path: Any = None) -> list[str]:
    """The method files of this package (or of the package at ``path``), by name (:func:`braco_patch.discovery.method_modules`)."""
    return discovery.method_modules(__path__ if path is None else path)
