"""Which checkpoint a training run resumes from, and the records that make that choice safe.

Every ``checkpoint-*`` folder the trainer writes ends with two small files, written after everything else:

- ``llava_run.json``: the settings that define the run (model, data file with its size and modification
  time, projector and its settings, hyper-parameters, stage flags; :func:`run_settings`);
- ``checkpoint_complete``: the completion marker. A folder without it was cut short (the run was killed while
  saving) and is never resumed from.

:func:`resume_point` then decides: a fresh start with ``--overwrite_output_dir``; the newest *complete*
checkpoint when the recorded settings equal this run's (naming incomplete ones that were passed over); a
one-sentence refusal when they differ, naming ``--overwrite_output_dir`` or a fresh ``--output_dir``. Under
DeepSpeed, whose checkpoint engine unpickles optimizer files without ``weights_only``, nothing is resumed
automatically: ``--resume_from_checkpoint PATH|True`` must say so.

Before the model loads, the chosen checkpoint's trainer files (RNG, optimizer, scheduler and scaler states) are
opened the way the trainer will open them (``weights_only=True``, mapped, not read), so a damaged or hostile
file is one sentence up front (:func:`check_trainer_files`), never torch's advice to unpickle it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from llava.model.weights_io import load_weights_file
from llava.utils import UserError

logger = logging.getLogger(__name__)

RUN_FILE = "llava_run.json"
COMPLETE_MARKER = "checkpoint_complete"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
#: The files the transformers Trainer unpickles when it resumes (rng_state_<rank>.pth under several processes).
TRAINER_FILES = ("rng_state*.pth", "optimizer.pt", "scheduler.pt", "scaler.pt")

#: TrainingArguments fields that change what a run computes (output, logging and saving fields do not).
TRAINING_KEYS = (
    "learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size", "gradient_accumulation_steps",
    "weight_decay", "warmup_steps", "lr_scheduler_type", "seed", "data_seed", "model_max_length", "optim",
    "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "bf16", "fp16", "bits", "lora_enable", "lora_r",
    "lora_alpha", "lora_dropout", "lora_bias", "mm_projector_lr", "mm_vision_tower_lr", "freeze_mm_mlp_adapter",
    "group_by_modality_length", "train_sampling_strategy",
)


def _file_identity(path: str | None) -> dict[str, Any] | None:
    """Path, size and modification time of a file (``None`` for no file): a changed file is a new run."""
    if not path:
        return None
    info = {"path": os.path.abspath(path)}
    if os.path.isfile(path):
        stat = os.stat(path)
        info.update(size=stat.st_size, mtime_ns=stat.st_mtime_ns)
    return info


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    return str(value)


def run_settings(model_args: Any, data_args: Any, training_args: Any, data_sources: Any = ()) -> dict[str, Any]:
    """The settings that define a run, as JSON-ready values (every model and data field, the training keys;
    ``data_sources``: the files a YAML mixture or file list reads, recorded when there are others than
    ``--data_path`` itself)."""
    settings: dict[str, Any] = {}
    for group in (model_args, data_args):
        settings.update({f.name: _jsonable(getattr(group, f.name)) for f in dataclasses.fields(group)})
    settings.update({key: _jsonable(getattr(training_args, key, None)) for key in TRAINING_KEYS})
    settings["data_path"] = _file_identity(data_args.data_path)
    if list(data_sources) not in ([], [data_args.data_path]):
        settings["data_sources"] = [_file_identity(path) for path in data_sources]
    settings["pretrain_mm_mlp_adapter"] = _file_identity(getattr(model_args, "pretrain_mm_mlp_adapter", None))
    return settings


# ---------------------------------------------------------------------------------------------- writing


def begin_checkpoint(folder: str | os.PathLike[str]) -> None:
    """Drop the marker of a folder about to be (re)written, so that a save cut short never looks complete."""
    marker = Path(folder) / COMPLETE_MARKER
    if marker.exists():
        marker.unlink()


def finish_checkpoint(folder: str | os.PathLike[str], settings: dict[str, Any] | None) -> None:
    """Write the run record, then the completion marker (last, so that its presence means the rest is there)."""
    folder = Path(folder)
    if settings is not None:
        record_output_run(folder, settings)
    (folder / COMPLETE_MARKER).write_text("")


# ---------------------------------------------------------------------------------------------- choosing


def checkpoints(output_dir: str | os.PathLike[str]) -> list[Path]:
    """The ``checkpoint-<step>`` folders of ``output_dir``, newest (highest step) first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(match.group(1)), path) for path in root.iterdir() if path.is_dir() and (match := _CHECKPOINT.match(path.name))]
    return [path for _, path in sorted(found, reverse=True)]


def is_complete(folder: Path) -> bool:
    return (folder / COMPLETE_MARKER).is_file()


def settings_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Names of the settings whose recorded and current values differ (either side missing counts)."""
    return sorted(key for key in set(recorded) | set(current) if recorded.get(key) != current.get(key))


def _check_settings(folder: Path, current: dict[str, Any], what: str = "") -> None:
    """Refuse ``folder`` unless its :data:`RUN_FILE` records ``current`` (``what`` names the folder's content)."""
    run_file = folder / RUN_FILE
    try:
        recorded = json.loads(run_file.read_text())
        if not isinstance(recorded, dict):
            raise ValueError(recorded)
    except (OSError, ValueError):
        raise UserError(
            f"{folder} has no readable record of the settings it was trained with ({RUN_FILE}); pass "
            "--overwrite_output_dir to start afresh, or use a new --output_dir"
        ) from None
    changed = settings_differences(recorded, current)
    if changed:
        verb = "differs" if len(changed) == 1 else "differ"
        raise UserError(
            f"{folder}{what} was trained with other settings ({', '.join(changed[:8])} {verb}); pass "
            "--overwrite_output_dir to start afresh, or use a new --output_dir"
        )


def check_output_run(output_dir: str | os.PathLike[str], settings: dict[str, Any], *, overwrite: bool = False) -> None:
    """A training ``--output_dir`` belongs to one run: refuse it to a run with other settings (issue 31, T01).

    The folder's own :data:`RUN_FILE` (written by :func:`record_output_run` when a run starts there) records the
    settings, as each ``checkpoint-*`` does: a later run with other settings would rewrite that run's
    ``config.json`` and weights with its own (a finished run keeps no ``checkpoint-*`` with ``--save_strategy no``
    or after ``save_total_limit`` pruning), so it is refused, naming the settings that differ, unless
    ``--overwrite_output_dir`` says to replace it (transformers' meaning: overwrite the folder's content). A
    folder without the record (empty, or written before runs were recorded) is left to the checkpoints' records.

    Raises:
        UserError: Naming the folder, the differing settings and the two ways out.
    """
    folder = Path(output_dir)
    if overwrite or not (folder / RUN_FILE).exists():
        return
    _check_settings(folder, settings, " holds a run that")


def record_output_run(output_dir: str | os.PathLike[str], settings: dict[str, Any]) -> None:
    """Write ``settings`` as ``output_dir``'s :data:`RUN_FILE`, atomically: the run that owns an output folder
    (:func:`check_output_run`), or that saved a checkpoint (:func:`finish_checkpoint`)."""
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / (RUN_FILE + ".tmp")
    temporary.write_text(json.dumps(settings, indent=1, sort_keys=True))
    os.replace(temporary, folder / RUN_FILE)


def _newest_complete(output_dir: str) -> Path:
    found = checkpoints(output_dir)
    incomplete = [path.name for path in found if not is_complete(path)]
    complete = [path for path in found if is_complete(path)]
    if not complete:
        raise UserError(
            f"{output_dir} holds only incomplete checkpoints ({', '.join(incomplete)}, cut short while saving); "
            "delete them, or pass --overwrite_output_dir to start afresh"
        )
    skipped = [name for name in incomplete if int(name.split("-")[1]) > int(complete[0].name.split("-")[1])]
    if skipped:
        logger.warning("skipping incomplete checkpoints (cut short while saving): %s", ", ".join(skipped))
    return complete[0]


def resume_point(
    output_dir: str, requested: str | bool | None, settings: dict[str, Any], *, overwrite: bool = False, deepspeed: bool = False
) -> str | None:
    """The checkpoint folder to resume from, or ``None`` for a fresh start.

    Args:
        output_dir: ``--output_dir``.
        requested: ``--resume_from_checkpoint``: a folder, ``"True"``/``True`` for the newest complete one in
            ``output_dir``, or ``None`` (automatic, as upstream, except under DeepSpeed).
        settings: This run's :func:`run_settings`; a checkpoint recorded with other settings is refused.
        overwrite: ``--overwrite_output_dir``: ignore existing checkpoints.
        deepspeed: Whether DeepSpeed runs the training (then resuming must be requested).

    Raises:
        UserError: On a settings mismatch, an incomplete requested checkpoint, or (DeepSpeed) checkpoints
            present but no explicit request.
    """
    if overwrite:
        if checkpoints(output_dir):
            logger.warning("--overwrite_output_dir: ignoring the checkpoints in %s and training from the start", output_dir)
        return None
    if isinstance(requested, str) and requested.lower() in ("true", "false"):
        requested = requested.lower() == "true"
    if isinstance(requested, str):
        folder = Path(requested)
        if not folder.is_dir():
            raise UserError(f"--resume_from_checkpoint {requested!r} is not a folder")
        if not is_complete(folder):
            raise UserError(
                f"--resume_from_checkpoint {requested!r} is incomplete (no {COMPLETE_MARKER} marker: it was cut short "
                "while saving); pass an earlier checkpoint-* folder"
            )
    elif requested or checkpoints(output_dir):
        if not requested and deepspeed:
            raise UserError(
                f"{output_dir} holds checkpoint folders, and under DeepSpeed resuming is never automatic (its checkpoint "
                "files are unpickled); pass --resume_from_checkpoint True (or a folder) to resume, or "
                "--overwrite_output_dir to start afresh"
            )
        folder = _newest_complete(output_dir)
    else:
        return None
    _check_settings(folder, settings)
    check_trainer_files(folder)
    logger.warning("RESUMING from %s (same settings); pass --overwrite_output_dir to train from the start instead", folder)
    return str(folder)


def check_trainer_files(folder: str | os.PathLike[str]) -> None:
    """Open every trainer state file of a checkpoint as the trainer will (``weights_only=True``; tensors mapped,
    not read, so a large optimizer file costs little).

    Raises:
        UserError: Naming the file when it is damaged or holds pickled objects other than tensors (refused:
            unpickling them could run code), before any model is loaded.
    """
    for pattern in TRAINER_FILES:
        for path in sorted(Path(folder).glob(pattern)):
            load_weights_file(path, numpy_state=True, mmap=True)


def checkpoint_step(folder: str | os.PathLike[str]) -> int:
    """The optimizer step a ``checkpoint-<step>`` folder was saved at (its ``trainer_state.json`` for other names)."""
    match = _CHECKPOINT.match(Path(folder).name)
    if match:
        return int(match.group(1))
    try:
        return int(json.loads((Path(folder) / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def log_finished_run(folder: str | None, global_step: int, max_steps: int) -> None:
    """Say what a resumed run did: nothing, when its checkpoint had finished already, or which steps it trained."""
    if folder is None:
        return
    start = checkpoint_step(folder)
    if start >= max_steps:
        logger.warning(
            "%s had already finished all %d steps: nothing was trained, the saved model is that run's; pass "
            "--overwrite_output_dir to train again", folder, max_steps,
        )
    else:
        logger.warning(
            "resumed from %s at step %d and trained steps %d-%d (%d steps) of %d", folder, start, start + 1, global_step,
            global_step - start, max_steps,
        )


__all__ = [
    "COMPLETE_MARKER",
    "check_output_run",
    "record_output_run",
    "RUN_FILE",
    "TRAINER_FILES",
    "begin_checkpoint",
    "check_trainer_files",
    "checkpoint_step",
    "checkpoints",
    "finish_checkpoint",
    "is_complete",
    "log_finished_run",
    "resume_point",
    "run_settings",
    "settings_differences",
]
