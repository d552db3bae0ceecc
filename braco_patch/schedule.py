"""Sparsemax temperature annealing (paper App. J.2; official ``set_step`` semantics).

``scheduled_temperature`` is the schedule as a pure function (a core unit: it imports nothing but the standard
library). :class:`braco_patch.callbacks.BracoAnnealCallback` drives it from the Hugging Face ``Trainer``.
"""

from __future__ import annotations

import math

__all__ = [
    "DEFAULT_SCHEDULE", "SCHEDULES", "STAGE_TEMPERATURES", "TEMPERATURE_FLOOR", "scheduled_temperature", "annealed_coders",
]

SCHEDULES = ("cosine", "linear", "exp")
DEFAULT_SCHEDULE = "cosine"
TEMPERATURE_FLOOR = 1e-6
#: The paper's two-stage recipe (App. J.2; braco-official §4–5), training stage → (τ at step 0, τ at the end):
#: stage 1 (only the projector trains) anneals 2.0 → 1.2, stage 2 anneals 1.2 → 0.8, each over its whole run.
STAGE_TEMPERATURES: dict[str, tuple[float, float]] = {"pretrain": (2.0, 1.2), "finetune": (1.2, 0.8)}


def scheduled_temperature(
    step: int,
    *,
    temperature: float,
    start: float | None,
    end: float | None,
    steps: int,
    schedule: str = "cosine",
) -> float:
    """Temperature at optimiser step ``step``.

    - ``start`` or ``end`` unset, or ``steps ≤ 0``: the constant ``temperature``.
    - otherwise ``p = clamp(step, 0, steps) / steps`` and
      ``cosine``: ``end + ½(start - end)(1 + cos πp)``; ``linear``: ``start + (end - start)p``;
      ``exp``: ``end + (start - end)·0.01^p`` (approaches but never reaches ``end``, as the official code).
      Any other schedule name falls back to cosine, matching the official code; configs validate names.

    The result is floored at 1e-6.
    """
    if start is None or end is None or steps <= 0:
        return max(float(temperature), TEMPERATURE_FLOOR)
    p = min(max(step, 0), steps) / steps
    if schedule == "linear":
        tau = start + (end - start) * p
    elif schedule == "exp":
        tau = end + (start - end) * 0.01**p
    else:
        tau = end + 0.5 * (start - end) * (1.0 + math.cos(math.pi * p))
    return max(tau, TEMPERATURE_FLOOR)


def annealed_coders(model) -> list:
    """Every module of ``model`` with a temperature schedule (``set_step`` and ``is_annealed``)."""
    return [m for m in model.modules() if getattr(m, "is_annealed", False) and hasattr(m, "set_step")]
