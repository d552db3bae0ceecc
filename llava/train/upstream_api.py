"""Upstream LLaVA's public helpers of ``llava/train/train.py``, with upstream's names and signatures.

Research forks import these from ``llava.train.train`` (which re-exports them); each delegates to the module
that owns the rule here:

- ``maybe_zero_3``, ``get_peft_state_maybe_zero_3``, ``get_peft_state_non_lora_maybe_zero_3``,
  ``get_mm_adapter_state_maybe_zero_3``: CPU copies of parameters, gathered first under DeepSpeed ZeRO-3
  (:func:`llava.train.saving.full_tensor`);
- ``safe_save_model_for_hf_trainer``: upstream's saving rule (projector only when only the adapter trains);
- ``preprocess_multimodal`` and ``preprocess``: upstream's ``sources`` (lists of ``{"from", "value"}`` turns)
  through :mod:`llava.train.preprocess`, with the template of ``llava.conversation.default_conversation`` read at
  call time, as upstream reads its global;
- ``make_supervised_data_module``: ``{"train_dataset", "eval_dataset", "data_collator"}`` from ``data_args``
  (``data_path``, ``image_folder``, ``image_aspect_ratio``, LLaVA-NeXT's video flags and, set by the caller as
  upstream's ``train()`` does, ``image_processor`` and ``mm_use_im_start_end``);
- ``smart_tokenizer_and_embedding_resize``, ``rank0_print``; ``find_all_linear_names`` lives in
  :mod:`llava.train.model_setup`.

Differences, all deliberate: ``preprocess`` returns lists of 1-D tensors (upstream stacked equal-length ones;
``result["input_ids"][0]`` reads the same), and an ``<image>`` marker always becomes the image token, whatever
``has_image`` says; ``get_peft_state_maybe_zero_3(..., "lora_only")`` keeps the biases of the LoRA-wrapped layers
(upstream's loop over a dict's keys never did).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from llava import conversation
from llava.outputs import atomic_output

from .next_arguments import projector_only
from .preprocess import preprocess as preprocess_turns
from .preprocess import preprocess_multimodal as preprocess_multimodal_turns
from .saving import full_tensor, gather, save_projector
from .supervised_data import (
    DataCollatorForSupervisedDataset,
    LazySupervisedDataset,
    VideoSettings,
    load_training_records,
    record_turns,
)

NamedParams = Iterable[tuple[str, torch.Tensor]]


def rank0_print(*args: Any) -> None:
    """``print`` on the main process only (``LOCAL_RANK`` unset or 0)."""
    if int(os.environ.get("LOCAL_RANK", "0") or 0) in (0, -1):
        print(*args)


def maybe_zero_3(param: torch.Tensor, ignore_status: bool = False, name: str | None = None) -> torch.Tensor:
    """A detached CPU copy of ``param``, gathered first when ZeRO-3 has partitioned it (``ignore_status`` and
    ``name`` are accepted for upstream's signature; the gathered value is the same either way)."""
    return full_tensor(param)


def get_peft_state_maybe_zero_3(named_params: NamedParams, bias: str) -> dict[str, torch.Tensor]:
    """The LoRA weights (``bias``: ``"none"``; ``"all"``: with every bias; ``"lora_only"``: with the biases of
    the LoRA-wrapped layers), as CPU tensors."""
    params = dict(named_params)
    if bias not in ("none", "all", "lora_only"):
        raise ValueError(f"bias must be 'none', 'all' or 'lora_only', got {bias!r}")
    chosen = {name for name in params if "lora_" in name}
    if bias == "all":
        chosen |= {name for name in params if "bias" in name}
    elif bias == "lora_only":
        wrapped = {name.split("lora_")[0] + "bias" for name in chosen}
        chosen |= {name for name in params if name in wrapped}
    return gather((name, params[name]) for name in params if name in chosen)


def get_peft_state_non_lora_maybe_zero_3(named_params: NamedParams, require_grad_only: bool = True) -> dict[str, torch.Tensor]:
    """Every non-LoRA parameter (only the trainable ones by default), as CPU tensors."""
    return gather(
        (name, param) for name, param in named_params
        if "lora_" not in name and (param.requires_grad or not require_grad_only)
    )


def get_mm_adapter_state_maybe_zero_3(named_params: NamedParams, keys_to_match: Sequence[str]) -> dict[str, torch.Tensor]:
    """The parameters whose name contains one of ``keys_to_match`` (e.g. ``["mm_projector"]``), as CPU tensors."""
    return gather((name, param) for name, param in named_params if any(key in name for key in keys_to_match))


def safe_save_model_for_hf_trainer(trainer: Any, output_dir: str) -> None:
    """Save ``trainer``'s model by upstream's rule.

    A :class:`~llava.train.llava_trainer.LLaVATrainer` saves by its mode. For another trainer whose arguments say
    only the adapter trains (``tune_mm_mlp_adapter``, or LLaVA-NeXT's ``mm_tunable_parts`` ``mm_mlp_adapter``):
    ``config.json`` and ``mm_projector.bin`` (plus the embeddings with ``use_im_start_end``); for a folder named
    ``checkpoint-*``, upstream's ``<parent>/mm_projector/checkpoint-N.bin``. Otherwise ``trainer.save_model``.
    """
    from .llava_trainer import LLaVATrainer

    if isinstance(trainer, LLaVATrainer):
        trainer.save_model(output_dir)
        return
    args = trainer.args
    if not (getattr(args, "tune_mm_mlp_adapter", False) or projector_only(args)):
        trainer.save_model(output_dir)
        return
    include_embeddings = bool(getattr(args, "use_im_start_end", False))
    folder = os.path.basename(os.path.normpath(output_dir))
    if not folder.startswith("checkpoint-"):
        save_projector(trainer.model, output_dir, should_save=args.should_save, include_embeddings=include_embeddings)
        return
    keys = ["mm_projector"] + (["embed_tokens", "embed_in"] if include_embeddings else [])
    weights = get_mm_adapter_state_maybe_zero_3(trainer.model.named_parameters(), keys)
    if args.should_save:
        trainer.model.config.save_pretrained(output_dir)
        target = os.path.join(os.path.dirname(os.path.normpath(output_dir)), "mm_projector", f"{folder}.bin")
        with atomic_output(target, "wb") as handle:
            torch.save(weights, handle)


def smart_tokenizer_and_embedding_resize(special_tokens_dict: Mapping[str, Any], tokenizer: Any, model: Any) -> None:
    """Add special tokens and grow the embeddings; the new input and output rows start at the old rows' mean."""
    added = tokenizer.add_special_tokens(dict(special_tokens_dict))
    model.resize_token_embeddings(len(tokenizer))
    if added > 0:
        with torch.no_grad():
            for weights in (model.get_input_embeddings().weight, model.get_output_embeddings().weight):
                weights[-added:] = weights[:-added].mean(dim=0, keepdim=True)


def _turns(source: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    return record_turns({"conversations": list(source)})


def preprocess_multimodal(sources: Sequence[Sequence[Mapping[str, Any]]], data_args: Any) -> list[list[dict[str, Any]]]:
    """Upstream's image-marker normalisation of each source (``<image>`` first in its turn; wrapped by
    ``mm_use_im_start_end`` or an ``mmtag`` template); unchanged unless ``data_args.is_multimodal``."""
    if not getattr(data_args, "is_multimodal", False):
        return [list(source) for source in sources]
    mmtag = "mmtag" in conversation.default_conversation.version
    start_end = bool(getattr(data_args, "mm_use_im_start_end", False))
    result = []
    for source in sources:
        turns = preprocess_multimodal_turns(_turns(source), mm_use_im_start_end=start_end, mmtag=mmtag)
        result.append([{**turn, "value": text} for turn, (_, text) in zip(source, turns)])
    return result


def preprocess(sources: Sequence[Sequence[Mapping[str, Any]]], tokenizer: Any, has_image: bool = False) -> dict[str, list[torch.Tensor]]:
    """``{"input_ids": [...], "labels": [...]}``, one 1-D tensor each per source, in the training template
    ``llava.conversation.default_conversation`` (set it as upstream's ``train()`` does). ``has_image`` is
    accepted for upstream's signature (see the module docstring)."""
    return preprocess_with(sources, tokenizer, conversation.default_conversation)


def preprocess_with(sources: Sequence[Sequence[Mapping[str, Any]]], tokenizer: Any, conv: Any) -> dict[str, list[torch.Tensor]]:
    """:func:`preprocess` in the template ``conv``."""
    samples = [preprocess_turns(_turns(source), tokenizer, conv) for source in sources]
    return {"input_ids": [sample["input_ids"] for sample in samples], "labels": [sample["labels"] for sample in samples]}


def make_supervised_data_module(tokenizer: Any, data_args: Any, *, conv: Any = None, records: Any = None) -> dict[str, Any]:
    """Upstream's ``{"train_dataset", "eval_dataset": None, "data_collator"}``.

    Args:
        tokenizer: The LLM's tokenizer (right padding; ``model_max_length`` set).
        data_args: ``DataArguments`` plus what upstream's ``train()`` sets on it: ``image_processor`` (``None``
            for text-only training) and ``mm_use_im_start_end``; ``image_grid_pinpoints`` as stored in config.json
            for AnyRes; ``questions`` (the compressor's :class:`~llava.model.compressor_text.QuestionEncoder` when it
            reads each sample's question, ``True`` for the LLM's tokenizer, else ``None``).
        conv: The training template; default ``llava.conversation.default_conversation``.
        records: Records already read and checked (:func:`load_training_records`); read from ``data_path`` if None.
    """
    conv = conv if conv is not None else conversation.default_conversation
    if records is None:
        records = read_records(data_args.data_path, data_args, conv)
    dataset = LazySupervisedDataset(records, tokenizer, conv, **dataset_options(data_args))
    collator = DataCollatorForSupervisedDataset(tokenizer.pad_token_id, tokenizer.model_max_length)
    return {"train_dataset": dataset, "eval_dataset": None, "data_collator": collator}


def read_records(data_path: Any, data_args: Any, conv: Any) -> list[dict[str, Any]]:
    """The checked training records of ``data_path`` (a JSON file or a mixture YAML) in the template ``conv``, with
    ``data_args``' image folder, processor (``None``: text-only), ``skip_bad_samples`` and video folder."""
    records, _ = load_training_records(
        data_path, data_args.image_folder, multimodal=getattr(data_args, "image_processor", None) is not None, conv=conv,
        skip_bad=bool(getattr(data_args, "skip_bad_samples", False)), video_folder=VideoSettings.from_args(data_args).video_folder,
    )
    return records


def dataset_options(data_args: Any) -> dict[str, Any]:
    """The keyword arguments of :class:`~llava.train.supervised_data.LazySupervisedDataset` that ``data_args`` sets
    (upstream's ``train()`` adds ``image_processor`` and ``mm_use_im_start_end`` to it)."""
    return {
        "image_folder": data_args.image_folder, "image_processor": getattr(data_args, "image_processor", None),
        "image_aspect_ratio": data_args.image_aspect_ratio,
        "image_grid_pinpoints": getattr(data_args, "image_grid_pinpoints", None),
        "mm_use_im_start_end": bool(getattr(data_args, "mm_use_im_start_end", False)),
        "skip_bad_images": bool(getattr(data_args, "skip_bad_samples", False)), "video": VideoSettings.from_args(data_args),
        "questions": getattr(data_args, "questions", None),  # a QuestionEncoder is passed on as it is, not as True
    }


__all__ = [
    "get_mm_adapter_state_maybe_zero_3",
    "get_peft_state_maybe_zero_3",
    "get_peft_state_non_lora_maybe_zero_3",
    "make_supervised_data_module",
    "maybe_zero_3",
    "preprocess",
    "preprocess_multimodal",
    "preprocess_with",
    "rank0_print",
    "safe_save_model_for_hf_trainer",
    "smart_tokenizer_and_embedding_resize",
]
