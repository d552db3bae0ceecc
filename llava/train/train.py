"""Train LLaVA with upstream's command line (both stages, LoRA, DeepSpeed) on transformers 5.

Stage 1 (projector pre-training)::

    deepspeed llava/train/train_mem.py --deepspeed ./scripts/zero2.json \\
        --model_name_or_path lmsys/vicuna-7b-v1.5 --version plain \\
        --data_path ./playground/data/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json \\
        --image_folder ./playground/data/LLaVA-Pretrain/images \\
        --vision_tower openai/clip-vit-large-patch14-336 --mm_projector_type mlp2x_gelu \\
        --tune_mm_mlp_adapter True --mm_vision_select_layer -2 ... --output_dir ./checkpoints/llava-v1.5-7b-pretrain

Stage 2 loads the stage-1 ``mm_projector.bin`` with ``--pretrain_mm_mlp_adapter`` and trains the LLM too
(``--version v1``). See docs/TRAINING.md for the flags and what each stage writes.

LLaVA-NeXT's scripts run too: ``--mm_tunable_parts``, ``--mm_vision_tower_lr``, ``--attn_implementation``, a YAML
``--data_path`` mixture and the video/pooling keys (:mod:`llava.train.next_arguments`,
:mod:`llava.train.data_mixture`).

Order of work: arguments, then ``--output_dir`` is checked (not one of the inputs, writable, and empty or ours),
then every training record is checked (so bad data fails before a model is loaded), the projector plugin's run
defaults are filled in (:mod:`llava.train.recipe`), the model is built (:mod:`llava.train.model_setup`), callbacks
that the model's projector registered are added (:mod:`llava.train.train_callbacks`), and training runs, resuming
from the newest complete ``checkpoint-*`` in ``--output_dir`` when its recorded settings match this run's
(:mod:`llava.train.resume`). A disk that fills up (or turns read-only) while checkpoints are written is one
sentence; the newest complete checkpoint stays.

Upstream's public helpers (``make_supervised_data_module``, ``preprocess``, ``safe_save_model_for_hf_trainer``,
``get_mm_adapter_state_maybe_zero_3``, ...) are importable from here, as from upstream's ``train.py``
(:mod:`llava.train.upstream_api`), and so are the names research forks import (``preprocess_v1`` and the other
per-style functions, ``_tokenize_fn``, ``_mask_targets``, ``conversation_lib``, ``local_rank``, and the dataset and
collator with upstream's constructors: :mod:`llava.train.upstream_fork_api`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python llava/train/train.py): import llava from this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import logging
import os
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import torch
from transformers import Trainer, enable_full_determinism, set_seed

from llava import conversation as conversation_lib  # upstream's alias, which forks import from here
from llava.conversation import check_template_fits
from llava.model.checks import check_model_path, check_patch_merge
from llava.model.compressor_text import question_encoder
from llava.outputs import MARKER, check_output_folder, check_outputs, disk_errors, is_ours, write_text
from llava.train.arguments import DataArguments, ModelArguments, TrainingArguments, parse_arguments
from llava.train.data_mixture import source_files
from llava.train.llava_trainer import LengthGroupedSampler, LLaVATrainer
from llava.train.model_setup import (
    apply_lora,
    check_deepspeed_support,
    drop_unused_settings,
    find_all_linear_names,
    load_language_model,
    load_tokenizer,
    setup_vision,
)
from llava.train.next_arguments import projector_only
from llava.train.preprocess import conversation_template
from llava.train.recipe import data_seed, planned_optimizer_steps, resolve_run_defaults
from llava.train.resume import check_output_run, log_finished_run, record_output_run, resume_point, run_settings
from llava.train.saving import llava_config
from llava.train.supervised_data import VideoSettings, load_training_records
from llava.train.train_callbacks import callbacks_for_model
from llava.train.upstream_api import (
    get_mm_adapter_state_maybe_zero_3,
    get_peft_state_maybe_zero_3,
    get_peft_state_non_lora_maybe_zero_3,
    make_supervised_data_module,
    maybe_zero_3,
    preprocess,
    preprocess_multimodal,
    rank0_print,
    safe_save_model_for_hf_trainer,
    smart_tokenizer_and_embedding_resize,
)
from llava.train.upstream_fork_api import (
    DataCollatorForSupervisedDataset,
    LazySupervisedDataset,
    _add_speaker_and_signal,
    _mask_targets,
    _tokenize_fn,
    preprocess_llama_2,
    preprocess_mpt,
    preprocess_plain,
    preprocess_v1,
)
from llava.utils import cli_main, setup_logging

logger = logging.getLogger(__name__)

#: Upstream's module global (its ``train()`` set it from the arguments); forks import it. The rank rule itself is
#: ``rank0_print``'s, which reads ``LOCAL_RANK``.
local_rank: int | None = None


def build_model(
    model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments, attn_implementation: str | None
) -> tuple[Any, Any, Any]:
    """``(model, tokenizer, image processor or None)`` ready to train, seeded from ``--seed`` first so that new
    modules (the projector) start the same in every run, and a resumed run matches an uninterrupted one."""
    if training_args.full_determinism:
        enable_full_determinism(training_args.seed)
    else:
        set_seed(training_args.seed)
    model = load_language_model(model_args, training_args, attn_implementation)
    if training_args.lora_enable:
        model = apply_lora(model, training_args)
    tokenizer = load_tokenizer(model_args, training_args)
    image_processor = None
    if model_args.vision_tower is not None:
        image_processor = setup_vision(model, model_args, data_args, training_args, tokenizer)
    if training_args.deepspeed:
        check_deepspeed_support(model)
    return model, tokenizer, image_processor


def check_output_dir(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> None:
    """The output guard for ``--output_dir``, before any data or model is read: not one of the inputs nor a folder
    holding one, writable, and absent, empty, ours (:data:`~llava.outputs.MARKER`) or holding only ``checkpoint-*``
    folders (see :func:`mark_output_dir`).

    Raises:
        UserError: One sentence naming the flag, the folder and the fix.
    """
    output_dir = training_args.output_dir
    inputs = {
        "--model_name_or_path": model_args.model_name_or_path, "--vision_tower": model_args.vision_tower,
        "--pretrain_mm_mlp_adapter": model_args.pretrain_mm_mlp_adapter, "--image_folder": data_args.image_folder,
        "--video_folder": data_args.video_folder,
        **{f"--data_path ({path})": path for path in source_files(data_args.data_path)},
    }
    check_outputs({flag: path for flag, path in inputs.items() if path and os.path.exists(path)}, {"--output_dir": output_dir})
    check_output_folder(output_dir, "--output_dir", allow=("checkpoint-*",))


def mark_output_dir(training_args: TrainingArguments, settings: dict[str, Any] | None = None) -> None:
    """Mark ``--output_dir`` as ours (the main process, once the data is checked), so a rerun may write there again,
    and record the run's ``settings`` there: only a run with the same settings (or ``--overwrite_output_dir``) may
    write there later (:func:`llava.train.resume.check_output_run`)."""
    if not training_args.should_save:
        return
    if not is_ours(training_args.output_dir):
        write_text(Path(training_args.output_dir) / MARKER, "written by llava.train.train; a rerun of it may write here again\n")
    if settings is not None:
        record_output_run(training_args.output_dir, settings)


def train(attn_implementation: str | None = None, argv: Sequence[str] | None = None) -> Trainer:
    """Run one training stage from command-line arguments (``sys.argv[1:]`` when ``argv`` is None).

    The process group a launcher (``deepspeed``, ``torchrun``) had the arguments start is closed when the stage
    ends, as it succeeds or fails: left to interpreter exit, its communication threads can abort the process
    ("terminate called without an active exception", exit 250) after everything was saved.

    Args:
        attn_implementation: transformers attention backend for the LLM (``"flash_attention_2"``,
            ``"sdpa"``, ``"eager"``) when ``--attn_implementation`` is not given (the flag wins, as in
            LLaVA-NeXT); ``None`` keeps transformers' default.
        argv: The arguments, as on the command line.

    Returns:
        The trainer, after training and saving.
    """
    try:
        return _train(attn_implementation, argv)
    finally:
        _close_process_group()


def _close_process_group() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _train(attn_implementation: str | None, argv: Sequence[str] | None) -> Trainer:
    setup_logging()
    model_args, data_args, training_args = parse_arguments(argv)
    check_output_dir(model_args, data_args, training_args)
    attn_implementation = training_args.attn_implementation or attn_implementation
    if model_args.vision_tower:
        flags = {**vars(model_args), "image_aspect_ratio": data_args.image_aspect_ratio}
        check_patch_merge(SimpleNamespace(**flags), "the flags")
    conv = conversation_template(model_args.version)
    video = VideoSettings.from_args(data_args)  # LLaVA-NeXT's video flags, where the arguments have them
    records, _ = load_training_records(
        data_args.data_path, data_args.image_folder, multimodal=model_args.vision_tower is not None, conv=conv,
        skip_bad=data_args.skip_bad_samples, video_folder=video.video_folder, seed=data_seed(training_args),
    )
    total_steps = planned_optimizer_steps(len(records), training_args)
    model_args, defaulted = resolve_run_defaults(model_args, total_steps)

    check_model_path(model_args.model_name_or_path, "--model_name_or_path")
    if model_args.vision_tower:
        check_model_path(model_args.vision_tower, "--vision_tower")
    settings = run_settings(model_args, data_args, training_args, data_sources=source_files(data_args.data_path))
    check_output_run(training_args.output_dir, settings, overwrite=training_args.overwrite_output_dir)
    mark_output_dir(training_args, settings)
    resume_from = resume_point(
        training_args.output_dir, training_args.resume_from_checkpoint, settings,
        overwrite=training_args.overwrite_output_dir, deepspeed=bool(training_args.deepspeed),
    )

    model, tokenizer, image_processor = build_model(model_args, data_args, training_args, attn_implementation)
    check_template_fits(model_args.version, tokenizer)
    callbacks = callbacks_for_model(model)
    if not callbacks:
        drop_unused_settings(llava_config(model), defaulted)
    logger.info("training %s for %d optimizer steps; callbacks: %s", model_args.model_name_or_path, total_steps,
                ", ".join(type(callback).__name__ for callback in callbacks) or "none")

    # What upstream's train() sets on data_args before building the data module (and whether the compressor
    # reads each sample's question).
    data_view = SimpleNamespace(**{
        **vars(data_args), "image_processor": image_processor, "mm_use_im_start_end": model_args.mm_use_im_start_end,
        "image_grid_pinpoints": getattr(llava_config(model), "image_grid_pinpoints", None),
        "questions": question_encoder(model, tokenizer),
    })
    data_module = make_supervised_data_module(tokenizer, data_view, conv=conv, records=records)
    dataset = data_module["train_dataset"]
    save_mode = "lora" if training_args.lora_enable else "projector" if projector_only(model_args) else "full"
    trainer = LLaVATrainer(
        model=model,
        args=training_args,
        train_dataset=dataset,
        data_collator=data_module["data_collator"],
        processing_class=tokenizer,
        callbacks=callbacks,
        save_mode=save_mode,
        save_embeddings=model_args.mm_use_im_start_end,
        run_settings=settings,
    )
    with disk_errors("--output_dir", training_args.output_dir):
        trainer.train(resume_from_checkpoint=resume_from)
        log_finished_run(resume_from, trainer.state.global_step, trainer.state.max_steps)
        if dataset.skipped_images:
            logger.warning("skipped %d samples whose image could not be decoded (--skip_bad_samples; each was replaced "
                           "by the next usable sample)", dataset.skipped_images)
        trainer.save_state()
        llava_config(model).use_cache = True
        trainer.save_model(training_args.output_dir)
    logger.info("saved the %s model to %s", save_mode, os.path.abspath(training_args.output_dir))
    return trainer


def main(argv: Sequence[str] | None = None) -> Trainer:
    return train(argv=argv)


__all__ = [
    "_add_speaker_and_signal",
    "_mask_targets",
    "_tokenize_fn",
    "conversation_lib",
    "local_rank",
    "preprocess_llama_2",
    "preprocess_mpt",
    "preprocess_plain",
    "preprocess_v1",
    "DataArguments",
    "DataCollatorForSupervisedDataset",
    "LLaVATrainer",
    "LazySupervisedDataset",
    "LengthGroupedSampler",
    "ModelArguments",
    "TrainingArguments",
    "build_model",
    "check_output_dir",
    "find_all_linear_names",
    "get_mm_adapter_state_maybe_zero_3",
    "get_peft_state_maybe_zero_3",
    "get_peft_state_non_lora_maybe_zero_3",
    "main",
    "make_supervised_data_module",
    "mark_output_dir",
    "maybe_zero_3",
    "preprocess",
    "preprocess_multimodal",
    "rank0_print",
    "safe_save_model_for_hf_trainer",
    "smart_tokenizer_and_embedding_resize",
    "train",
]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
