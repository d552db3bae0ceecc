"""The paper's baselines, one file per method: the PyTorch module (which needs nothing of LLaVA to run), its FLOPs,
and, on the plugin API alone (:mod:`llava.plugin_api`), its LLaVA factory, cost, demo view and ``PLUGIN``
declaration. docs/BASELINES.md lists them (names, settings, needs, boundaries, parity with the releases).

Nothing here lists the methods: :mod:`.llava_plugin` finds the method files and registers their plugins, and a
public name of any method file (``from braco_patch.baselines import DivPrune``) is looked up in them on first use.
Shared pieces live in ``_common`` (the modules' maths and checks) and ``_plugin`` (what the declarations share).
"""

from __future__ import annotations

import importlib
from typing import Any

from .. import discovery


def method_modules(path: Any = None) -> list[str]:
    """The method files of this package (or of the package at ``path``), by name (:func:`braco_patch.discovery.method_modules`)."""
    return discovery.method_modules(__path__ if path is None else path)


def __getattr__(name: str) -> Any:
    for module_name in method_modules():
        module = importlib.import_module(f"{__name__}.{module_name}")
        if name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
