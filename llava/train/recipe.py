"""The paper's two-stage recipe defaults that depend on the run: the sparsemax temperature schedule.

Braco anneals its residual-selection temperature (paper App. J.2; braco-official §4–5): cosine from 2.0 to 1.2
over stage 1 (``--tune_mm_mlp_adapter True``) and from 1.2 to 0.8 over stage 2. Unless given on the command
line, ``--mm_fourier_temp_start/_end/_schedule`` take these values and ``--mm_fourier_temp_steps`` is the
run's total number of optimizer steps, computed exactly as the transformers ``Trainer`` computes it. The
values go to ``config.json`` with the other projector keys, so a checkpoint rebuilds the same projector.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

#: Stage → (temperature at step 0, temperature at the end of the schedule).
STAGE_TEMPERATURES: dict[str, tuple[float, float]] = {"pretrain": (2.0, 1.2), "finetune": (1.2, 0.8)}
DEFAULT_TEMP_SCHEDULE = "cosine"
SCHEDULE_KEYS = ("mm_fourier_temp_start", "mm_fourier_temp_end", "mm_fourier_temp_steps", "mm_fourier_temp_schedule")


def training_stage(model_args: Any) -> str:
    """``"pretrain"`` when only the projector trains (``tune_mm_mlp_adapter``), else ``"finetune"``."""
    return "pretrain" if model_args.tune_mm_mlp_adapter else "finetune"


def planned_optimizer_steps(num_samples: int, training_args: Any) -> int:
    """Total optimizer steps of a run over ``num_samples`` samples, as the transformers ``Trainer`` counts them.

    ``--max_steps`` when positive; else ``ceil(epochs x updates per epoch)`` where an epoch is
    ``ceil(batches per process / gradient_accumulation_steps)`` updates and a process gets
    ``ceil(num_samples / (per_device_batch x world_size))`` batches (floor with ``--dataloader_drop_last``).
    """
    if training_args.max_steps > 0:
        return int(training_args.max_steps)
    global_batch = training_args.per_device_train_batch_size * max(training_args.world_size, 1)
    if training_args.dataloader_drop_last:
        batches = num_samples // global_batch
    else:
        batches = math.ceil(num_samples / global_batch)
    updates_per_epoch = max(math.ceil(batches / training_args.gradient_accumulation_steps), 1)
    return math.ceil(training_args.num_train_epochs * updates_per_epoch)


def resolve_temperature_schedule(model_args: Any, total_steps: int) -> tuple[Any, list[str]]:
    """Fill the unset ``mm_fourier_temp_*`` arguments with the stage's defaults.

    Returns:
        ``(model_args with the schedule filled in, names of the arguments that took a default)``.
    """
    start, end = STAGE_TEMPERATURES[training_stage(model_args)]
    defaults = {
        "mm_fourier_temp_start": start,
        "mm_fourier_temp_end": end,
        "mm_fourier_temp_steps": total_steps,
        "mm_fourier_temp_schedule": DEFAULT_TEMP_SCHEDULE,
    }
    filled = {key: value for key, value in defaults.items() if getattr(model_args, key) is None}
    return replace(model_args, **filled), sorted(filled)


__all__ = [
    "DEFAULT_TEMP_SCHEDULE",
    "SCHEDULE_KEYS",
    "STAGE_TEMPERATURES",
    "planned_optimizer_steps",
    "resolve_temperature_schedule",
    "training_stage",
]
