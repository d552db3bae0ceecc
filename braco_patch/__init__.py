"""Braco: DCT backbone + basis-coordinate embedding + coordinate organisation + spatial residual tokens.

The core imports nothing from ``llava``; :mod:`braco_patch.llava_plugin` is the one seam that registers
Braco projectors into LLaVA's projector registry.
"""

from .coder import BracoCoder
from .config import BRACO_BUDGETS, BracoConfig, allocate_budget
from .schedule import BracoAnnealCallback, scheduled_temperature

__all__ = ["BracoCoder", "BracoConfig", "BRACO_BUDGETS", "allocate_budget", "BracoAnnealCallback", "scheduled_temperature"]
__version__ = "0.1.0"
