"""Braco: DCT backbone + basis-coordinate embedding + coordinate organisation + spatial residual tokens.

The core imports nothing from ``llava``. :mod:`braco_patch.llava_plugin` is the seam: Braco's compressor plugin
declaration for LLaVA's registry (projector types, settings, training schedule and callback); its demo picture,
:mod:`braco_patch.view`, draws with LLaVA's panel helpers and is imported only when the demo asks for it.
"""

from .coder import BracoCoder
from .config import BRACO_BUDGETS, BracoConfig, allocate_budget
from .schedule import BracoAnnealCallback, scheduled_temperature

__all__ = ["BracoCoder", "BracoConfig", "BRACO_BUDGETS", "allocate_budget", "BracoAnnealCallback", "scheduled_temperature"]
__version__ = "0.1.0"
