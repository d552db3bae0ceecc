"""``LLaVATrainer``: the HF ``Trainer`` with upstream LLaVA's sampler, optimizer groups and saving rules.

- ``--group_by_modality_length True``: batches of image samples and batches of text-only samples, each
  grouped by length (:class:`LengthGroupedSampler`); ``--group_by_length`` (transformers' length grouping)
  uses the dataset's own length estimates instead of tokenizing every sample;
- ``--mm_projector_lr`` (upstream) and ``--mm_vision_tower_lr`` (LLaVA-NeXT): the projector's and the vision
  tower's parameters get their own learning rates;
- saving follows the mode (:mod:`llava.train.saving`): projector only in stage 1, adapter + non-LoRA
  trainables with LoRA, the full model otherwise. Checkpoints also hold the optimizer, scheduler and
  trainer state, so every mode resumes (upstream's stage-1 checkpoints held only the projector).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Sampler
from transformers import Trainer
from transformers.trainer import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from .recipe import data_seed
from .resume import begin_checkpoint, finish_checkpoint
from .saving import load_non_lora_checkpoint, load_projector_checkpoint, save_lora_extras, save_projector

logger = logging.getLogger(__name__)

SAVE_MODES = ("full", "projector", "lora")


# ---------------------------------------------------------------------------------------------- sampling


def _chunks(items: Sequence[int], size: int) -> list[list[int]]:
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def split_evenly(indices: Sequence[int], lengths: Sequence[int], parts: int) -> list[list[int]]:
    """Deal ``indices`` (longest first) into ``parts`` equal-count groups of similar total length.

    When the count does not divide evenly, indices are dealt round-robin instead.
    """
    if len(indices) % parts:
        return [list(indices[start::parts]) for start in range(parts)]
    capacity = len(indices) // parts
    groups: list[list[int]] = [[] for _ in range(parts)]
    totals = [0.0] * parts
    for index in indices:
        target = min(range(parts), key=lambda part: totals[part])
        groups[target].append(index)
        totals[target] += lengths[index]
        if len(groups[target]) == capacity:
            totals[target] = float("inf")
    return groups


def length_grouped_indices(lengths: Sequence[int], batch_size: int, world_size: int, generator: torch.Generator) -> list[int]:
    """A random order in which each run of ``world_size x batch_size`` indices is sorted longest first and
    split into ``world_size`` batches of similar total length."""
    order = torch.randperm(len(lengths), generator=generator).tolist()
    result: list[int] = []
    for megabatch in _chunks(order, world_size * batch_size):
        megabatch.sort(key=lambda index: lengths[index], reverse=True)
        for group in split_evenly(megabatch, lengths, world_size):
            result.extend(group)
    return result


def modality_grouped_indices(lengths: Sequence[int], batch_size: int, world_size: int, generator: torch.Generator) -> list[int]:
    """Like :func:`length_grouped_indices`, but image samples (length > 0) and text-only samples (length < 0)
    never share a megabatch, except in the single final megabatch made of both leftovers."""
    image = [index for index, length in enumerate(lengths) if length > 0]
    text = [index for index, length in enumerate(lengths) if length < 0]
    if not image or not text:
        return length_grouped_indices([abs(length) for length in lengths], batch_size, world_size, generator)
    size = world_size * batch_size
    megabatches: list[list[int]] = []
    leftovers: list[int] = []
    for members in (image, text):
        member_lengths = [abs(lengths[index]) for index in members]
        ordered = [members[i] for i in length_grouped_indices(member_lengths, batch_size, world_size, generator)]
        chunks = _chunks(ordered, size)
        megabatches.extend(chunks[:-1])
        leftovers.extend(chunks[-1])
    megabatches = [megabatches[i] for i in torch.randperm(len(megabatches), generator=generator).tolist()]
    if len(leftovers) >= size:
        megabatches.insert(0, leftovers[:size])
        leftovers = leftovers[size:]
    if leftovers:
        megabatches.append(leftovers)
    return [index for megabatch in megabatches for index in megabatch]


class LengthGroupedSampler(Sampler[int]):
    """Upstream's length-grouped sampler; the order depends only on ``seed`` and the epoch, so every process
    (and a resumed run) draws the same order.

    Args:
        batch_size: Per-device batch size.
        world_size: Processes x gradient-accumulation steps (the samples of one optimizer step).
        lengths: Length estimate per sample; with ``group_by_modality``, negative for text-only samples.
        group_by_modality: Keep image and text-only samples in separate batches.
        seed: Base seed; epoch ``e`` uses ``seed + e``.
    """

    def __init__(self, batch_size: int, world_size: int, lengths: Sequence[int], *, group_by_modality: bool = False, seed: int = 0) -> None:
        if any(length == 0 for length in lengths):
            raise ValueError("every sample needs a non-zero length estimate for length grouping")
        self.batch_size, self.world_size = batch_size, world_size
        self.lengths = list(lengths)
        self.group_by_modality = group_by_modality
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        group = modality_grouped_indices if self.group_by_modality else length_grouped_indices
        lengths = self.lengths if self.group_by_modality else [abs(length) for length in self.lengths]
        return iter(group(lengths, self.batch_size, self.world_size, generator))


# ---------------------------------------------------------------------------------------------- trainer


class LLaVATrainer(Trainer):
    """The ``Trainer`` with LLaVA's sampler, projector learning rate and saving modes.

    Args:
        save_mode: ``"projector"`` (stage 1), ``"lora"`` or ``"full"``.
        save_embeddings: With ``save_mode="projector"``, also save the embedding matrix (new start/end tokens).
        *args, **kwargs: As ``transformers.Trainer``.
    """

    def __init__(
        self, *args: Any, save_mode: str = "full", save_embeddings: bool = False, run_settings: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if save_mode not in SAVE_MODES:
            raise ValueError(f"unknown save_mode {save_mode!r}; expected one of {SAVE_MODES}")
        super().__init__(*args, **kwargs)
        self.save_mode = save_mode
        self.save_embeddings = save_embeddings
        self.run_settings = run_settings

    # -- sampling ------------------------------------------------------------------------------------
    def _get_train_sampler(self, train_dataset: Any = None) -> Sampler | None:
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        seed = data_seed(self.args)
        group_size = self.args.world_size * self.args.gradient_accumulation_steps
        if getattr(self.args, "group_by_modality_length", False):
            return LengthGroupedSampler(
                self.args.train_batch_size, group_size, dataset.modality_lengths, group_by_modality=True, seed=seed
            )
        if self.args.train_sampling_strategy == "group_by_length" and hasattr(dataset, "lengths"):
            return LengthGroupedSampler(self.args.train_batch_size, group_size, dataset.lengths, seed=seed)
        return super()._get_train_sampler(train_dataset)

    # -- optimizer -----------------------------------------------------------------------------------
    def module_learning_rates(self) -> dict[str, float]:
        """Name part -> learning rate for the parameters whose name contains it (LLaVA-NeXT's rule)."""
        rates = {"mm_projector": getattr(self.args, "mm_projector_lr", None),
                 "vision_tower": getattr(self.args, "mm_vision_tower_lr", None)}
        return {part: rate for part, rate in rates.items() if rate is not None}

    def create_optimizer(self, model: Any = None) -> torch.optim.Optimizer:
        """Upstream's and NeXT's groups when a module has its own learning rate: (decay, no decay) x (each module
        with its own rate, the rest at ``--learning_rate``)."""
        rates = self.module_learning_rates()
        if not rates or self.optimizer is not None:
            return super().create_optimizer(model)
        opt_model = self.model if model is None else model
        decay = set(self.get_decay_parameter_names(opt_model))
        groups: dict[tuple[bool, str | None], list[torch.nn.Parameter]] = {}
        for name, param in opt_model.named_parameters():
            if param.requires_grad:
                module = next((part for part in rates if part in name), None)
                groups.setdefault((name in decay, module), []).append(param)
        param_groups = []
        for (decays, module), params in groups.items():
            group: dict[str, Any] = {"params": params, "weight_decay": self.args.weight_decay if decays else 0.0}
            if module is not None:
                group["lr"] = rates[module]
            param_groups.append(group)
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)
        self.optimizer = optimizer_cls(param_groups, **optimizer_kwargs)
        return self.optimizer

    # -- saving and resuming -------------------------------------------------------------------------
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if self.save_mode == "projector":
            save_projector(self.model, output_dir, should_save=self.args.should_save, include_embeddings=self.save_embeddings)
            return
        super().save_model(output_dir, _internal_call)
        if self.save_mode == "lora":
            save_lora_extras(self.model, output_dir, should_save=self.args.should_save)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """Save as the ``Trainer`` does, then mark the folder complete (:mod:`llava.train.resume`).

        Old checkpoints are rotated out only after the new one is marked, so a kill while saving always leaves
        a complete checkpoint behind.
        """
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        if self.args.should_save:
            begin_checkpoint(folder)
        limit = self.args.save_total_limit
        self.args.save_total_limit = None
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        if self.args.should_save:
            finish_checkpoint(folder, self.run_settings)
            rotate_checkpoints(
                output_dir=self._get_output_dir(trial=trial), save_total_limit=limit,
                best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True,
            )

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        target = self.model if model is None else model
        if self.save_mode == "projector":
            load_projector_checkpoint(target, resume_from_checkpoint)
            logger.info("restored the projector from %s", resume_from_checkpoint)
            return
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        if self.save_mode == "lora":
            load_non_lora_checkpoint(target, resume_from_checkpoint)


__all__ = [
    "LLaVATrainer",
    "LengthGroupedSampler",
    "length_grouped_indices",
    "modality_grouped_indices",
    "split_evenly",
]
