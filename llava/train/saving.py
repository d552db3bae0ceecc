"""What each training mode writes, in upstream's file layout, and how a checkpoint of it is read back.

- projector only (stage 1, ``--tune_mm_mlp_adapter True``): ``config.json`` + ``mm_projector.bin``, a
  ``torch.save`` dict of CPU tensors keyed ``model.mm_projector.*`` (plus the embedding matrix when
  ``--mm_use_im_start_end`` adds tokens), in the training dtype;
- LoRA (``--lora_enable True``): ``config.json`` + the PEFT adapter files + ``non_lora_trainables.bin``
  (every other trainable parameter, i.e. the projector, keyed ``base_model.model.model.mm_projector.*``);
- full (stage 2): the ``save_pretrained`` layout (safetensors), written by the ``Trainer``.

Under DeepSpeed ZeRO-3 parameters are gathered before they are saved.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn as nn

from llava.model.weights_io import load_projector_weights, load_weights_file, projector_state_dict

logger = logging.getLogger(__name__)

PROJECTOR_FILE = "mm_projector.bin"
NON_LORA_FILE = "non_lora_trainables.bin"
PROJECTOR_KEYS = ("mm_projector",)
#: Extra weights a stage-1 file carries when ``mm_use_im_start_end`` added tokens (upstream's rule).
EMBEDDING_KEYS = ("embed_tokens", "embed_in")


def full_tensor(param: torch.Tensor) -> torch.Tensor:
    """A detached CPU copy of ``param``, gathered first when DeepSpeed ZeRO-3 has partitioned it."""
    if hasattr(param, "ds_id"):
        from deepspeed import zero

        with zero.GatheredParameters([param]):
            return param.data.detach().cpu().clone()
    return param.detach().cpu().clone()


def gather(named_params: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {name: full_tensor(param) for name, param in named_params}


def projector_weights(model: nn.Module, *, include_embeddings: bool = False) -> dict[str, torch.Tensor]:
    """The parameters whose name contains ``mm_projector`` (and the embeddings if asked), as CPU tensors."""
    keys = PROJECTOR_KEYS + (EMBEDDING_KEYS if include_embeddings else ())
    return gather((name, param) for name, param in model.named_parameters() if any(key in name for key in keys))


def non_lora_trainables(model: nn.Module) -> dict[str, torch.Tensor]:
    """Trainable parameters that are not LoRA weights (the projector, in upstream's recipe)."""
    return gather((name, param) for name, param in model.named_parameters() if param.requires_grad and "lora_" not in name)


def llava_config(model: nn.Module) -> Any:
    """The LLaVA config of a plain or PEFT-wrapped model (the one PEFT-unwrapping rule; ``None`` without a config)."""
    get_base_model = getattr(model, "get_base_model", None)
    base = get_base_model() if callable(get_base_model) else model
    return getattr(base, "config", None)


def save_projector(model: nn.Module, output_dir: str, *, should_save: bool, include_embeddings: bool = False) -> None:
    """Write ``config.json`` and ``mm_projector.bin`` (every rank gathers; only ``should_save`` writes)."""
    weights = projector_weights(model, include_embeddings=include_embeddings)
    if not should_save:
        return
    os.makedirs(output_dir, exist_ok=True)
    llava_config(model).save_pretrained(output_dir)
    torch.save(weights, os.path.join(output_dir, PROJECTOR_FILE))
    logger.info("saved %d projector tensors to %s", len(weights), os.path.join(output_dir, PROJECTOR_FILE))


def save_lora_extras(model: nn.Module, output_dir: str, *, should_save: bool) -> None:
    """Write ``config.json`` and ``non_lora_trainables.bin`` next to a saved PEFT adapter."""
    weights = non_lora_trainables(model)
    if not should_save:
        return
    os.makedirs(output_dir, exist_ok=True)
    llava_config(model).save_pretrained(output_dir)
    torch.save(weights, os.path.join(output_dir, NON_LORA_FILE))


def load_projector_checkpoint(model: nn.Module, checkpoint_dir: str) -> None:
    """Restore the projector (and start/end-token embedding rows, if saved) from a stage-1 checkpoint."""
    path = os.path.join(checkpoint_dir, PROJECTOR_FILE)
    weights = load_weights_file(path)
    projector = model.get_model().mm_projector
    load_projector_weights(projector, projector_state_dict(weights), repr(path))
    rest = {name: value for name, value in weights.items() if "mm_projector." not in name}
    if rest:
        _load_named(model, rest, path)


def load_non_lora_checkpoint(model: nn.Module, checkpoint_dir: str) -> None:
    """Restore ``non_lora_trainables.bin`` into a PEFT-wrapped model (names as saved)."""
    path = os.path.join(checkpoint_dir, NON_LORA_FILE)
    _load_named(model, load_weights_file(path), path)


def _load_named(model: nn.Module, weights: dict[str, torch.Tensor], source: str) -> None:
    parameters = dict(model.named_parameters())
    unknown = sorted(set(weights) - set(parameters))
    if unknown:
        raise ValueError(f"{source} holds weights this model does not have: {unknown[:5]}")
    with torch.no_grad():
        for name, value in weights.items():
            parameters[name].copy_(value.to(parameters[name].dtype))


__all__ = [
    "NON_LORA_FILE",
    "PROJECTOR_FILE",
    "full_tensor",
    "load_non_lora_checkpoint",
    "load_projector_checkpoint",
    "non_lora_trainables",
    "projector_weights",
    "save_lora_extras",
    "save_projector",
]
