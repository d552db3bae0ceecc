"""Training callbacks: the sparsemax temperature schedule driven by the Hugging Face ``Trainer``.

:class:`BracoAnnealCallback` sets every annealed coder's temperature on train begin and after every optimiser
step, for ``state.global_step``: step ``t + 1`` trains with ``τ(t)``, all gradient-accumulation micro-batches share
one ``τ``, and a resumed run continues where it stopped. This module imports transformers; the schedule itself
(:mod:`braco_patch.schedule`) does not.
"""

from __future__ import annotations

from transformers import TrainerCallback

from .schedule import annealed_coders

__all__ = ["BracoAnnealCallback"]


class BracoAnnealCallback(TrainerCallback):
    """Set every annealed coder's temperature from ``state.global_step``."""

    def _apply(self, state, model) -> None:
        if model is None:
            return
        for coder in annealed_coders(model):
            coder.set_step(state.global_step, state.max_steps)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._apply(state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self._apply(state, model)
