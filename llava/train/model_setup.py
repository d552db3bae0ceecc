"""Building the model to train: LLM (optionally quantized / LoRA-wrapped), tokenizer, vision tower and
projector, and which parameters train in each stage.

Upstream's flags: stage 1 (``--tune_mm_mlp_adapter True``) trains only the projector (a compressor included);
stage 2 trains the LLM and the projector; the vision tower is frozen unless ``--unfreeze_mm_vision_tower True``.
LLaVA-NeXT's ``--mm_tunable_parts`` replaces those flags: everything is frozen, then each named part trains
(:func:`set_trainable_parts`).
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

import torch
import torch.nn as nn

from llava.mm_utils import is_anyres, parse_grid_pinpoints
from llava.model.language_model.registry import language_model_for_checkpoint
from llava.model.multimodal_projector.builder import build_vision_projector
from llava.model.multimodal_projector.plugins import owner_of
from llava.model.tokenizer_loading import load_tokenizer as load_tokenizer_any_protobuf

from .arguments import DataArguments, ModelArguments, TrainingArguments
from .next_arguments import trains_vision_tower, tunable_parts

logger = logging.getLogger(__name__)

#: Module-name parts that LoRA never targets (upstream's rule), besides ``lm_head``.
LORA_EXCLUDED = ("mm_projector", "vision_tower", "vision_resampler")


def compute_dtype(training_args: TrainingArguments) -> torch.dtype:
    if training_args.fp16:
        return torch.float16
    if training_args.bf16:
        return torch.bfloat16
    return torch.float32


def _quantization_kwargs(training_args: TrainingArguments) -> dict[str, Any]:
    if training_args.bits == 16:
        return {}
    from transformers import BitsAndBytesConfig

    quantization = BitsAndBytesConfig(
        load_in_4bit=training_args.bits == 4,
        load_in_8bit=training_args.bits == 8,
        llm_int8_skip_modules=["mm_projector"],
        llm_int8_threshold=6.0,
        llm_int8_has_fp16_weight=False,
        bnb_4bit_compute_dtype=compute_dtype(training_args),
        bnb_4bit_use_double_quant=training_args.double_quant,
        bnb_4bit_quant_type=training_args.quant_type,
    )
    return {"quantization_config": quantization, "device_map": {"": training_args.device}, "dtype": compute_dtype(training_args)}


def load_language_model(model_args: ModelArguments, training_args: TrainingArguments, attn_implementation: str | None) -> nn.Module:
    """The LLM as its LLaVA class: a plain LLM (``llama`` → ``LlavaLlamaForCausalLM``, ``qwen2`` →
    ``LlavaQwenForCausalLM``, ``mistral`` → ``LlavaMistralForCausalLM``) or a LLaVA checkpoint, chosen by the
    ``model_type`` in ``--model_name_or_path``'s config through the language-model registry.

    Weights load in float32 (as upstream under transformers 4.x), or quantized with ``--bits 4/8``; mixed
    precision (``--bf16``/``--fp16``) is then the Trainer's or DeepSpeed's job.
    """
    kwargs: dict[str, Any] = {"cache_dir": training_args.cache_dir, "dtype": torch.float32}
    kwargs.update(_quantization_kwargs(training_args))
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    entry = language_model_for_checkpoint(model_args.model_name_or_path, cache_dir=training_args.cache_dir)
    model = entry.causal_lm_class.from_pretrained(model_args.model_name_or_path, **kwargs)
    model.config.use_cache = False
    model.config.architectures = [entry.causal_lm_class.__name__]
    if model_args.freeze_backbone:
        model.model.requires_grad_(False)
    if training_args.bits in (4, 8):
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=bool(_checkpointing(training_args)))
    if _checkpointing(training_args):
        model.enable_input_require_grads()
    return model


def _checkpointing(training_args: TrainingArguments) -> bool:
    return bool(getattr(training_args, "activation_checkpointing", None) or training_args.gradient_checkpointing)


def find_all_linear_names(model: nn.Module) -> list[str]:
    """Leaf names of the LLM's ``nn.Linear`` layers (LoRA targets), outside the projector and tower, minus ``lm_head``."""
    names = {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not any(part in name for part in LORA_EXCLUDED)
    }
    names.discard("lm_head")
    return sorted(names)


def apply_lora(model: nn.Module, training_args: TrainingArguments) -> nn.Module:
    """Wrap ``model`` with PEFT LoRA adapters on every LLM linear layer (``--lora_r/_alpha/_dropout/_bias``)."""
    if importlib.util.find_spec("peft") is None:
        raise ImportError("--lora_enable True needs the peft package; install it with 'pip install peft'")
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=training_args.lora_r,
        lora_alpha=training_args.lora_alpha,
        target_modules=find_all_linear_names(model),
        lora_dropout=training_args.lora_dropout,
        bias=training_args.lora_bias,
        task_type="CAUSAL_LM",
    )
    if training_args.bits == 16 and compute_dtype(training_args) != torch.float32:
        model.to(compute_dtype(training_args))
    logger.info("adding LoRA adapters to %s", ", ".join(config.target_modules))
    return get_peft_model(model, config)


def load_tokenizer(model_args: ModelArguments, training_args: TrainingArguments) -> Any:
    """The LLM's tokenizer, right-padded, ``model_max_length`` set; pad = unk when it has no pad (upstream)."""
    tokenizer = load_tokenizer_any_protobuf(
        model_args.model_name_or_path,
        cache_dir=training_args.cache_dir,
        model_max_length=training_args.model_max_length,
        padding_side="right",
        use_fast=False,
    )
    if tokenizer.pad_token is None:
        if tokenizer.unk_token is None:
            raise ValueError(f"the tokenizer of {model_args.model_name_or_path!r} has neither a pad nor an unk token to pad with")
        tokenizer.pad_token = tokenizer.unk_token
    return tokenizer


def _projector_settings(config: Any) -> dict[str, Any]:
    """The config keys that a compressor plugin declares or owns, with their values."""
    return {key: value for key, value in vars(config).items() if owner_of(key) is not None}


def setup_vision(model: nn.Module, model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments, tokenizer: Any) -> Any:
    """Attach the vision tower and projector, record upstream's training keys in the config, set what trains.

    A projector that came with the checkpoint (task fine-tuning from a LLaVA model) is rebuilt from the updated
    config when its settings changed (e.g. a new temperature schedule), keeping its weights.

    Returns:
        The vision tower's image processor.
    """
    base = model.get_model()
    config = model.config
    had_projector = getattr(base, "mm_projector", None) is not None
    settings_before = _projector_settings(config)
    stored_type = getattr(config, "mm_projector_type", None)
    if had_projector and model_args.mm_projector_type != stored_type:
        raise ValueError(
            f"--mm_projector_type {model_args.mm_projector_type!r} does not match the projector of "
            f"{model_args.model_name_or_path!r} ({stored_type!r}); pass --mm_projector_type {stored_type}"
        )
    base.initialize_vision_modules(model_args=model_args, fsdp=training_args.fsdp)
    if had_projector and _projector_settings(config) != settings_before:
        rebuild_projector(model)

    tower = model.get_vision_tower()
    # A tower that trains keeps float32 weights (the Trainer's autocast or DeepSpeed give the mixed precision), as
    # the LLM does; a frozen one runs in the compute dtype.
    tower_dtype = torch.float32 if trains_vision_tower(model_args) else compute_dtype(training_args)
    tower.to(dtype=tower_dtype, device=training_args.device)
    config.image_aspect_ratio = data_args.image_aspect_ratio
    if is_anyres(data_args.image_aspect_ratio):
        # Written expanded (NeXT's train.py does the same) so that inference needs no tower side to read it.
        config.image_grid_pinpoints = [list(pair) for pair in parse_grid_pinpoints(data_args.image_grid_pinpoints, tower.image_size)]
    config.tokenizer_padding_side = tokenizer.padding_side
    config.tokenizer_model_max_length = tokenizer.model_max_length
    config.tune_mm_mlp_adapter = model_args.tune_mm_mlp_adapter
    config.freeze_mm_mlp_adapter = training_args.freeze_mm_mlp_adapter
    config.mm_use_im_start_end = model_args.mm_use_im_start_end
    config.mm_projector_lr = training_args.mm_projector_lr
    config.mm_use_im_patch_token = model_args.mm_use_im_patch_token
    write_next_keys(config, model_args, data_args, training_args)

    set_trainable_parts(model, model_args, training_args)
    projector = base.mm_projector
    if training_args.bits in (4, 8):
        projector.to(dtype=compute_dtype(training_args), device=training_args.device)
    model.initialize_vision_tokenizer(model_args, tokenizer=tokenizer)
    return tower.image_processor


def write_next_keys(config: Any, model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> None:
    """The keys LLaVA-NeXT's ``train()`` writes to ``config.json``, under its names (the video and pooling keys
    are read by the model's video path; the rest record how the run trained)."""
    config.mm_newline_position = model_args.mm_newline_position
    config.mm_spatial_pool_stride = model_args.mm_spatial_pool_stride
    config.mm_spatial_pool_mode = model_args.mm_spatial_pool_mode
    config.add_time_instruction = data_args.add_time_instruction
    config.force_sample = data_args.force_sample
    config.mm_vision_tower_lr = training_args.mm_vision_tower_lr
    if model_args.mm_tunable_parts is not None:
        config.mm_tunable_parts = model_args.mm_tunable_parts
    else:
        config.unfreeze_mm_vision_tower = model_args.unfreeze_mm_vision_tower


def set_trainable_parts(model: nn.Module, model_args: ModelArguments, training_args: TrainingArguments) -> None:
    """Set ``requires_grad`` on the model's parts.

    With ``--mm_tunable_parts`` (LLaVA-NeXT's rule): freeze everything, then train ``mm_mlp_adapter`` (the
    projector), ``mm_vision_tower`` (every parameter named ``*vision_tower*``) and ``mm_language_model`` (every
    parameter outside the tower and the projector, ``image_newline`` included; with LoRA only the adapters). LoRA
    adapters always train when ``--lora_enable`` is on. Without it, upstream's flags: ``--tune_mm_mlp_adapter``
    trains the projector alone, ``--freeze_mm_mlp_adapter`` freezes it, ``--unfreeze_mm_vision_tower`` trains the tower.
    """
    projector = model.get_model().mm_projector
    tower = model.get_vision_tower()
    parts = tunable_parts(model_args)
    if parts is None:
        if model_args.tune_mm_mlp_adapter:
            model.requires_grad_(False)
            projector.requires_grad_(True)
        if training_args.freeze_mm_mlp_adapter:
            projector.requires_grad_(False)
        tower.requires_grad_(bool(model_args.unfreeze_mm_vision_tower))
        return
    model.requires_grad_(False)
    if "mm_mlp_adapter" in parts:
        projector.requires_grad_(True)
    for name, param in model.named_parameters():
        if "vision_tower" in name:
            param.requires_grad_("mm_vision_tower" in parts)
        elif "lora_" in name:
            param.requires_grad_(bool(training_args.lora_enable))
        elif "mm_language_model" in parts and not training_args.lora_enable and not any(part in name for part in LORA_EXCLUDED):
            param.requires_grad_(True)
    if training_args.lora_enable and "mm_language_model" not in parts:
        logger.warning("--lora_enable True: the LoRA adapters train although --mm_tunable_parts has no mm_language_model")
    counts: dict[str, int] = {}
    for name, param in model.named_parameters():
        if param.requires_grad:
            group = next((part for part in LORA_EXCLUDED if part in name), "lora" if "lora_" in name else "language_model")
            counts[group] = counts.get(group, 0) + param.numel()
    logger.info("trainable parameters (--mm_tunable_parts %s): %s", model_args.mm_tunable_parts,
                ", ".join(f"{group} {count:,}" for group, count in sorted(counts.items())) or "none")


def rebuild_projector(model: nn.Module) -> None:
    """Replace ``mm_projector`` by one built from the current config, with the same weights."""
    base = model.get_model()
    old = base.mm_projector
    reference = next(old.parameters(), None)
    new = build_vision_projector(model.config, vision_tower=model.get_vision_tower())
    new.load_state_dict(old.state_dict(), strict=True)
    if reference is not None:
        new.to(device=reference.device, dtype=reference.dtype)
    base.mm_projector = new
    logger.info("rebuilt the checkpoint's projector with the new projector settings")


def drop_unused_settings(config: Any, keys: list[str]) -> None:
    """Remove config keys that were only defaults for a projector feature the model does not have."""
    for key in keys:
        if hasattr(config, key):
            delattr(config, key)


def check_deepspeed_support(model: nn.Module) -> None:
    """Fail early, with the fix, where the installed DeepSpeed cannot initialise ``model``.

    DeepSpeed 0.19.8 broadcasts every parameter as a byte view at engine start (ZeRO-1/2/3), which raises for
    0-dimensional parameters, which compressors may have (learned scalar gates and scales). Earlier releases
    (e.g. 0.19.7) broadcast the tensors themselves.
    """
    scalars = [name for name, param in model.named_parameters() if param.dim() == 0]
    if not scalars or not _deepspeed_broadcasts_byte_views():
        return
    import deepspeed

    raise RuntimeError(
        f"DeepSpeed {deepspeed.__version__} cannot start on a model with 0-dimensional parameters (here "
        f"{', '.join(scalars[:3])}{', ...' if len(scalars) > 3 else ''}): it broadcasts parameters as byte views; "
        "install another release, e.g. 'pip install deepspeed==0.19.7'"
    )


def _deepspeed_broadcasts_byte_views() -> bool:
    import inspect

    from deepspeed.runtime.engine import DeepSpeedEngine

    try:
        source = inspect.getsource(DeepSpeedEngine._broadcast_model)
    except (OSError, TypeError):
        return False
    return "view(torch.uint8)" in source


__all__ = [
    "apply_lora",
    "check_deepspeed_support",
    "compute_dtype",
    "drop_unused_settings",
    "find_all_linear_names",
    "load_language_model",
    "load_tokenizer",
    "rebuild_projector",
    "set_trainable_parts",
    "setup_vision",
    "write_next_keys",
]
