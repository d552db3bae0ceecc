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

Order of work: arguments, then ``--output_dir`` is checked (writable, not one of the inputs), then every training
record is checked (so bad data fails before a model is loaded), the projector plugin's run defaults are filled in (:mod:`llava.train.recipe`), the model is built
(:mod:`llava.train.model_setup`), callbacks that the model's projector registered are added
(:mod:`llava.train.train_callbacks`), and training runs, resuming from the newest complete ``checkpoint-*``
in ``--output_dir`` when its recorded settings match this run's (:mod:`llava.train.resume`). A disk that fills
up (or turns read-only) while checkpoints are written is one sentence; the newest complete checkpoint stays.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from transformers import Trainer, enable_full_determinism, set_seed

from llava.conversation import check_template_fits
from llava.model.checks import check_model_path, check_patch_merge
from llava.model.compressor_text import text_need
from llava.outputs import check_writable_folder, disk_errors, same_file
from llava.utils import UserError, cli_main, setup_logging

from .arguments import DataArguments, ModelArguments, TrainingArguments, parse_arguments
from .llava_trainer import LLaVATrainer
from .model_setup import (
    apply_lora,
    check_deepspeed_support,
    drop_unused_settings,
    load_language_model,
    load_tokenizer,
    setup_vision,
)
from .preprocess import conversation_template
from .recipe import planned_optimizer_steps, resolve_run_defaults
from .resume import log_finished_run, resume_point, run_settings
from .saving import llava_config
from .supervised_data import DataCollatorForSupervisedDataset, LazySupervisedDataset, VideoSettings, load_training_records
from .train_callbacks import callbacks_for_model

logger = logging.getLogger(__name__)


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
    """Refuse, before any data or model is read, an ``--output_dir`` that cannot be written or that is one of the
    run's inputs (the trainer would write its config.json and weights over the base model's)."""
    output_dir = training_args.output_dir
    inputs = {
        "--model_name_or_path": model_args.model_name_or_path, "--vision_tower": model_args.vision_tower,
        "--pretrain_mm_mlp_adapter": model_args.pretrain_mm_mlp_adapter, "--data_path": data_args.data_path,
        "--image_folder": data_args.image_folder,
    }
    for flag, path in inputs.items():
        if path and os.path.exists(os.path.expanduser(path)) and same_file(path, output_dir):
            raise UserError(f"--output_dir {output_dir!r} is the same folder as {flag}; the run would write over it, so pass another --output_dir")
    check_writable_folder(output_dir, "--output_dir")


def train(attn_implementation: str | None = None, argv: Sequence[str] | None = None) -> Trainer:
    """Run one training stage from command-line arguments (``sys.argv[1:]`` when ``argv`` is None).

    Args:
        attn_implementation: transformers attention backend for the LLM (``"flash_attention_2"``,
            ``"sdpa"``, ``"eager"``); ``None`` keeps transformers' default.
        argv: The arguments, as on the command line.

    Returns:
        The trainer, after training and saving.
    """
    setup_logging()
    model_args, data_args, training_args = parse_arguments(argv)
    check_output_dir(model_args, data_args, training_args)
    if model_args.vision_tower:
        flags = {**vars(model_args), "image_aspect_ratio": data_args.image_aspect_ratio}
        check_patch_merge(SimpleNamespace(**flags), "the flags")
    conv = conversation_template(model_args.version)
    video = VideoSettings.from_args(data_args)  # LLaVA-NeXT's video flags, where the arguments have them
    records, _ = load_training_records(
        data_args.data_path, data_args.image_folder, multimodal=model_args.vision_tower is not None, conv=conv,
        skip_bad=data_args.skip_bad_samples, video_folder=video.video_folder,
    )
    total_steps = planned_optimizer_steps(len(records), training_args)
    model_args, defaulted = resolve_run_defaults(model_args, total_steps)

    check_model_path(model_args.model_name_or_path, "--model_name_or_path")
    if model_args.vision_tower:
        check_model_path(model_args.vision_tower, "--vision_tower")
    settings = run_settings(model_args, data_args, training_args)
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

    dataset = LazySupervisedDataset(
        records, tokenizer, conv, image_folder=data_args.image_folder, image_processor=image_processor,
        image_aspect_ratio=data_args.image_aspect_ratio,
        image_grid_pinpoints=getattr(llava_config(model), "image_grid_pinpoints", None),
        mm_use_im_start_end=model_args.mm_use_im_start_end,
        skip_bad_images=data_args.skip_bad_samples,
        video=video,
        questions=text_need(model) == "question",
    )
    save_mode = "lora" if training_args.lora_enable else "projector" if model_args.tune_mm_mlp_adapter else "full"
    trainer = LLaVATrainer(
        model=model,
        args=training_args,
        train_dataset=dataset,
        data_collator=DataCollatorForSupervisedDataset(tokenizer.pad_token_id, tokenizer.model_max_length),
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


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
