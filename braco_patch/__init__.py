"""Braco: DCT backbone + basis-coordinate embedding + coordinate organisation + spatial residual tokens.

The core imports nothing from ``llava`` and nothing but torch, numpy and entmax. :mod:`braco_patch.llava_plugin` is
the seam: Braco as a LLaVA method, one file on the plugin API (projector types, settings, training schedule and
callback, cost model, demo panel); its pictures (:mod:`braco_patch.view`) and per-step FLOPs
(:mod:`braco_patch.cost.coder_flops`) are shared with ``braco``'s own commands. The paper's baselines are
:mod:`braco_patch.baselines`, one file per method.

The names below are imported on first use, so ``import braco_patch`` (and ``braco --help``) stays light:
``from braco_patch import BracoCoder`` imports torch, ``BracoAnnealCallback`` transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BracoCoder": "coder", "BracoConfig": "config", "BRACO_BUDGETS": "config", "allocate_budget": "config",
    "scheduled_temperature": "schedule", "BracoAnnealCallback": "callbacks",
}

__all__ = ["BracoCoder", "BracoConfig", "BRACO_BUDGETS", "allocate_budget", "BracoAnnealCallback", "scheduled_temperature"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
