"""What a checkpoint folder holds, and so which loader :func:`llava.model.builder.load_pretrained_model` runs.

Upstream LLaVA decides from the folder's *name* (``"llava" in name``, ``"lora" in name``), so a compressor
release's ``outputs/<method>/k9/seed0/stage2`` or a folder called ``ckpt`` loads as a plain language model and
then fails on the missing image processor. Here the files decide (:func:`checkpoint_kind`):

- ``config.json`` says whether it is a LLaVA model: a registered LLaVA ``model_type`` (``llava``, ``llava_llama``,
  ``llava_qwen``, ...) or LLaVA's own keys (``mm_vision_tower``, ``mm_projector_type``); otherwise a causal LM
  ``model_type`` is a plain language model;
- among LLaVA folders, ``adapter_config.json`` marks a LoRA output (with ``non_lora_trainables.bin``), an
  ``mm_projector.bin`` / ``.safetensors`` without model weights a stage-1 output, and model weights
  (``model*.safetensors``, ``pytorch_model*.bin``) a full checkpoint;
- a folder without ``config.json`` is a plain PEFT adapter when it has ``adapter_config.json`` (merged into
  ``model_base``, as upstream's non-LLaVA path), and otherwise not a checkpoint: one sentence says so.

Upstream's name rule is kept only where nothing can be read: a hub id whose ``config.json`` cannot be fetched.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from llava.utils import UserError

from .checks import check_llava_key_types

logger = logging.getLogger(__name__)

CheckpointKind = Literal["llava_lora", "llava_projector", "llava_full", "language_model"]

CONFIG_FILE = "config.json"
ADAPTER_FILE = "adapter_config.json"
PROJECTOR_FILES = ("mm_projector.safetensors", "mm_projector.bin")
NON_LORA_FILES = ("non_lora_trainables.safetensors", "non_lora_trainables.bin")
#: Weight files of a ``save_pretrained`` folder (single file, shards and their index).
WEIGHT_PATTERNS = ("model*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
#: Keys only a LLaVA config has (upstream's names; LLaVA-NeXT writes the same).
LLAVA_KEYS = ("mm_vision_tower", "mm_projector_type")

EXPECTED = (
    "expected a LLaVA checkpoint folder (config.json naming mm_vision_tower, plus model weights), a stage-1 folder "
    "(config.json + mm_projector.bin) or a LoRA folder (config.json + adapter_config.json + non_lora_trainables.bin)"
)


def find_file(model_path: str, filenames: tuple[str, ...]) -> str | None:
    """The first of ``filenames`` found in a local folder or a hub repo (``None`` when absent or unreachable)."""
    for filename in filenames:
        if os.path.isdir(model_path):
            candidate = os.path.join(model_path, filename)
            if os.path.isfile(candidate):
                return candidate
            continue
        from transformers.utils import cached_file

        try:
            resolved = cached_file(
                model_path, filename, _raise_exceptions_for_missing_entries=False,
                _raise_exceptions_for_connection_errors=False,
            )
        except OSError:  # not a hub id at all, or a gated/unknown repo: nothing can be read there
            resolved = None
        if resolved is not None:
            return resolved
    return None


def read_config_file(path: str | os.PathLike[str], what: str = CONFIG_FILE) -> dict[str, Any]:
    """The JSON object in ``path``.

    Raises:
        UserError: Naming the file when it is not valid JSON or not a JSON object.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
    except UnicodeDecodeError:
        raise UserError(f"{os.fspath(path)} is not a text file, so not a valid {what}; restore it from the original checkpoint") from None
    except json.JSONDecodeError as error:
        raise UserError(
            f"{os.fspath(path)} is not valid JSON ({error}); restore it from the original checkpoint"
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{os.fspath(path)} holds a JSON {type(data).__name__}, but {what} must be a JSON object")
    return data


@dataclass(frozen=True)
class CheckpointFiles:
    """What :func:`inspect_checkpoint` found (``None``: could not be told, a hub repo that cannot be listed).

    Attributes:
        path: The folder or hub id.
        config: ``config.json`` as a dict, or ``None`` when there is none (or it cannot be fetched).
        adapter: ``adapter_config.json`` is there (a PEFT LoRA adapter).
        projector: ``mm_projector.safetensors`` / ``.bin`` is there (a stage-1 output).
        weights: Model weights are there; ``None`` for a hub repo (not listed, to download nothing).
        local: ``path`` is a local folder.
    """

    path: str
    config: dict[str, Any] | None
    adapter: bool
    projector: bool
    weights: bool | None
    local: bool


def inspect_checkpoint(model_path: str) -> CheckpointFiles:
    """Read ``config.json`` and note which of the files that decide the loader are present.

    Raises:
        UserError: If ``config.json`` is there but not a JSON object.
    """
    local = os.path.isdir(model_path)
    config_file = find_file(model_path, (CONFIG_FILE,))
    config = read_config_file(config_file) if config_file else None
    weights: bool | None = None
    if local:
        folder = Path(model_path)
        weights = any(any(folder.glob(pattern)) for pattern in WEIGHT_PATTERNS)
    return CheckpointFiles(
        path=model_path, config=config, adapter=find_file(model_path, (ADAPTER_FILE,)) is not None,
        projector=find_file(model_path, PROJECTOR_FILES) is not None, weights=weights, local=local,
    )


def _llava_model_types() -> set[str]:
    """Every LLaVA ``model_type`` the language-model registry accepts (own names and aliases, not base types)."""
    from .language_model.registry import list_language_models, resolve_language_model

    types: set[str] = set()
    for name in list_language_models():
        entry = resolve_language_model(name)
        types.update((entry.model_type, *entry.aliases))
    return types


def is_llava_config(config: dict[str, Any]) -> bool:
    """Whether a ``config.json`` describes a LLaVA model (its ``model_type`` or LLaVA's own keys)."""
    return config.get("model_type") in _llava_model_types() or any(config.get(key) is not None for key in LLAVA_KEYS)


def _is_causal_lm(config: dict[str, Any]) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = config.get("model_type")
    return isinstance(model_type, str) and (model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or "auto_map" in config)


def kind_from_name(model_name: str, model_base: str | None) -> CheckpointKind:
    """Upstream's name rule (``"llava"``, ``"lora"`` in the name), for a checkpoint whose files cannot be read."""
    name = model_name.lower()
    if "llava" not in name:
        return "language_model"
    if model_base is None:
        return "llava_full"
    return "llava_lora" if "lora" in name else "llava_projector"


def checkpoint_kind(
    model_path: str, model_base: str | None, model_name: str | None = None, *, multimodal: bool = False
) -> CheckpointKind:
    """Which loader ``model_path`` needs, from its files (see the module docstring).

    Args:
        model_path: A checkpoint folder or hub id.
        model_base: The base LLM given with it (``--model-base``), or ``None``.
        model_name: Upstream's ``model_name`` (the folder's name); read only when no ``config.json`` can be read
            from a hub id.
        multimodal: LLaVA-NeXT's ``multimodal=True``: a LLaVA checkpoint even if its ``config.json`` does not say
            so (the LLaVA keys come from elsewhere); the files still tell full, stage-1 and LoRA apart.

    Raises:
        UserError: One sentence when the folder is not a checkpoint this loader can use, naming what it holds
            and what was expected (e.g. a stage-1 or LoRA folder without ``model_base``).
    """
    files = inspect_checkpoint(model_path)
    if files.config is None:
        if multimodal and model_name and "llava" not in model_name.lower():
            model_name = f"llava-{model_name}"
        return _kind_without_config(files, model_base, model_name)
    _refuse_transformers_format(files)
    if not multimodal and not is_llava_config(files.config):
        return _plain_kind(files, model_base, model_name)
    check_llava_key_types(os.path.join(model_path, CONFIG_FILE), files.config)
    return _llava_kind(files, model_base)


def require_multimodal(model_path: str, model_base: str | None) -> None:
    """Refuse, before any weights load, a checkpoint that cannot read images: a plain language model.

    For the commands that send an image (``run_llava``, ``llava.serve.cli``, ``examples/infer.py``, the
    ``model_vqa*`` loaders when a question has one):
    :func:`checkpoint_kind` loads such a folder as a language model without an image processor, also when it is
    named ``llava-...``, and the first image would then fail deep inside preprocessing.

    Raises:
        UserError: Naming the folder and what its ``config.json`` lacks (also every error of :func:`checkpoint_kind`).
    """
    if checkpoint_kind(model_path, model_base) == "language_model":  # no name: its "named like LLaVA" warning would be a 2nd line
        raise UserError(
            f"{model_path!r} is a plain language model (its config.json names no mm_vision_tower), so it cannot read "
            "images; pass a LLaVA checkpoint (a stage-2 folder, or a stage-1 or LoRA folder with --model-base)"
        )


def _kind_without_config(files: CheckpointFiles, model_base: str | None, model_name: str | None) -> CheckpointKind:
    if files.adapter:
        if model_base:
            return "language_model"  # a PEFT adapter of a plain LLM, merged into model_base (upstream's path)
        raise UserError(
            f"{files.path!r} holds a PEFT adapter (adapter_config.json) but no config.json; pass the LLM it was "
            "trained on as --model-base to merge it"
        )
    if not files.local:
        kind = kind_from_name(model_name or os.path.basename(files.path.rstrip("/")), model_base)
        logger.warning("could not read %s/config.json; choosing the loader from the name (%s)", files.path, kind)
        return kind
    raise UserError(f"{files.path!r} has no config.json, so it is not a model checkpoint; {EXPECTED}")


def _refuse_transformers_format(files: CheckpointFiles) -> None:
    """transformers' own LLaVA classes (``llava-hf/*``) nest the LLM and tower configs; upstream's layout is flat."""
    config = files.config or {}
    if "text_config" in config and "vision_config" in config and not any(config.get(key) for key in LLAVA_KEYS):
        raise UserError(
            f"{files.path!r} is a transformers-format vision-language checkpoint (model_type {config.get('model_type')!r} "
            "with text_config/vision_config, e.g. llava-hf/*), not the original LLaVA layout this loader reads; "
            f"{EXPECTED}"
        )


def _plain_kind(files: CheckpointFiles, model_base: str | None, model_name: str | None) -> CheckpointKind:
    config = files.config or {}
    model_type = config.get("model_type")
    if files.adapter and model_base:
        return "language_model"
    if not _is_causal_lm(config):
        raise UserError(
            f"{files.path}/config.json describes a {model_type!r} model, which is neither a LLaVA checkpoint (no "
            f"mm_vision_tower or mm_projector_type) nor a causal language model; {EXPECTED}"
        )
    if model_name and "llava" in model_name.lower():
        logger.warning(
            "%s is named like a LLaVA checkpoint, but its config.json is a plain %s language model (no mm_vision_tower): "
            "loading it as a language model, without an image processor", files.path, model_type,
        )
    return "language_model"


def _llava_kind(files: CheckpointFiles, model_base: str | None) -> CheckpointKind:
    path = files.path
    if files.adapter:
        if model_base:
            return "llava_lora"
        if files.weights:
            logger.warning("%s holds full weights and an adapter_config.json; loading the full weights, adapter ignored", path)
            return "llava_full"
        raise UserError(
            f"{path!r} is a LLaVA LoRA checkpoint (adapter_config.json, no model weights); pass the LLM it was "
            "trained on as --model-base (e.g. lmsys/vicuna-7b-v1.5) to merge it"
        )
    if files.projector and not files.weights:
        if model_base:
            return "llava_projector"
        raise UserError(
            f"{path!r} is a stage-1 checkpoint (config.json + mm_projector weights, no LLM weights); pass the LLM it "
            "was trained on as --model-base (e.g. lmsys/vicuna-7b-v1.5)"
        )
    if model_base:
        if files.projector:
            return "llava_projector"
        if files.weights:
            logger.warning("%s is a full LLaVA checkpoint; ignoring model_base %s", path, model_base)
            return "llava_full"
        return "llava_projector"  # a hub repo that cannot be listed: upstream's rule for "llava" + base
    if files.weights is False:
        raise UserError(f"{path!r} has a LLaVA config.json but no model weights (model*.safetensors or pytorch_model*.bin); {EXPECTED}")
    return "llava_full"


__all__ = [
    "ADAPTER_FILE",
    "CONFIG_FILE",
    "CheckpointFiles",
    "CheckpointKind",
    "NON_LORA_FILES",
    "PROJECTOR_FILES",
    "checkpoint_kind",
    "find_file",
    "inspect_checkpoint",
    "is_llava_config",
    "kind_from_name",
    "read_config_file",
    "require_multimodal",
]
