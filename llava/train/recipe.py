"""Run-dependent defaults: the training stage, the planned optimizer steps, and the plugin settings that a
compressor plugin fills from them.

A plugin may declare ``run_defaults(RunInfo) -> {key: value}`` (e.g. a schedule per training stage whose length
is the whole run). :func:`resolve_run_defaults` asks the plugin of ``--mm_projector_type`` and fills the
settings the command line left unset; the values go to ``config.json`` with the other projector keys, so a
checkpoint rebuilds the same projector.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from llava.model.multimodal_projector.plugins import RunInfo, plugin_for

from .next_arguments import projector_only


def training_stage(model_args: Any) -> str:
    """``"pretrain"`` when only the projector trains (``--tune_mm_mlp_adapter True`` or LLaVA-NeXT's
    ``--mm_tunable_parts mm_mlp_adapter``), else ``"finetune"``."""
    return "pretrain" if projector_only(model_args) else "finetune"


def data_seed(training_args: Any) -> int:
    """The seed of data choices (the sampler's order, ``random:N`` mixture draws): ``--data_seed``, else ``--seed``."""
    return training_args.data_seed if training_args.data_seed is not None else training_args.seed


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


def resolve_run_defaults(model_args: Any, total_steps: int) -> tuple[Any, list[str]]:
    """Fill the unset settings of the projector's plugin with its run defaults.

    Returns:
        ``(model_args with those settings filled in, names of the settings that took a default)``; unchanged
        when the projector has no plugin or the plugin has no run defaults.
    """
    plugin = plugin_for(model_args.mm_projector_type)
    if plugin is None or plugin.run_defaults is None:
        return model_args, []
    run = RunInfo(stage=training_stage(model_args), total_steps=total_steps, projector_type=model_args.mm_projector_type)
    defaults = plugin.run_defaults(run)
    filled = {key: value for key, value in defaults.items() if getattr(model_args, key, None) is None}
    return replace(model_args, **filled), sorted(filled)


__all__ = ["data_seed", "planned_optimizer_steps", "resolve_run_defaults", "training_stage"]
