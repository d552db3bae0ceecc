"""``load_pretrained_model``: upstream LLaVA's loader for full, LoRA and projector-only checkpoints.

Which loader runs depends on what the checkpoint folder holds (:func:`checkpoint_kind`, in
:mod:`llava.model.checkpoint_layout`), not on its name as upstream did, so ``outputs/<run>/k9/seed0/stage2`` or
``ckpt`` load like ``llava-v1.5-7b``:

* a LLaVA ``config.json`` with ``adapter_config.json`` and a ``model_base``: base LLM + ``non_lora_trainables`` +
  merged PEFT adapter from ``model_path``;
* a LLaVA ``config.json`` with ``mm_projector.safetensors``/``.bin`` and no model weights, with ``model_base``:
  base LLM + that projector (a stage-1 output);
* a LLaVA ``config.json`` with model weights: a full checkpoint;
* a plain language-model ``config.json``: a plain language model (no image processor), merged with a PEFT adapter
  if a base is given.

Which LLaVA class loads a checkpoint is decided by its ``config.json`` ``model_type`` through the
language-model registry (:mod:`llava.model.language_model.registry`: ``llava_llama``/``llava``,
``llava_qwen``, ``llava_mistral``, and plugins); a ``model_base`` may be a plain ``llama``/``qwen2``/``mistral``
directory of the same family.

Weights: safetensors first; ``.bin`` files only through ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from llava.constants import DEFAULT_IM_END_TOKEN, DEFAULT_IM_START_TOKEN, DEFAULT_IMAGE_PATCH_TOKEN
from llava.devices import default_dtype
from llava.utils import UserError

from .checkpoint_layout import NON_LORA_FILES, PROJECTOR_FILES, checkpoint_kind, find_file
from .checks import (
    check_generation_config,
    check_llava_config,
    check_loaded_weights,
    check_model_path,
    check_tokenizer_files,
    check_weight_files,
    reading_config,
)
from .language_model.registry import LanguageModelEntry, language_model_for_checkpoint
from .reducers import NO_REDUCER, resolve_reducer, set_reducer
from .tokenizer_loading import load_tokenizer
from .weights_io import load_projector_weights, load_weights_file, projector_state_dict

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT_LENGTH = 2048


def load_pretrained_model(
    model_path: str,
    model_base: str | None,
    model_name: str,
    load_8bit: bool = False,
    load_4bit: bool = False,
    device_map: Any = "auto",
    device: str = "cuda",
    use_flash_attn: bool = False,
    torch_dtype: Any = None,
    attn_implementation: str | None = None,
    customized_config: Any = None,
    overwrite_config: Mapping[str, Any] | None = None,
    multimodal: bool = False,
    reducer: str | None = None,
    **kwargs: Any,
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel, Any, int]:
    """Load a LLaVA (or plain LLM) checkpoint with upstream's signature; its files choose the loader.

    Args:
        model_path: Checkpoint directory or hub name.
        model_base: Base LLM for LoRA and projector-only checkpoints, else ``None``.
        model_name: Upstream's model name (the folder's name); the loader is chosen from the folder's files
            (see :func:`checkpoint_kind`), the name only for a hub id whose ``config.json`` cannot be read.
        load_8bit, load_4bit: Quantise the LLM with bitsandbytes (must be installed).
        device_map: Used when ``device == "cuda"``; any other device maps the whole model to it.
        device: ``"cuda"`` (default), ``"cpu"``, ``"cuda:1"``, ...
        use_flash_attn: Use ``flash_attention_2`` (flash-attn must be installed).
        torch_dtype: LLaVA-NeXT's keyword: ``"float16"``, ``"bfloat16"``, ``"float32"``, ``"auto"`` or a
            ``torch.dtype``; ``None`` keeps the default below (NeXT's own default is float16 everywhere).
        attn_implementation: LLaVA-NeXT's keyword, passed to ``from_pretrained`` (``"sdpa"``, ``"eager"``,
            ``"flash_attention_2"``); ``None`` lets transformers choose (NeXT's own default is flash attention).
        customized_config: LLaVA-NeXT's keyword: a config object, or a ``config.json`` path / directory, read in
            place of ``model_path``'s config.
        overwrite_config: LLaVA-NeXT's keyword: ``{key: value}`` set on the config before the model is built
            (e.g. ``{"image_aspect_ratio": "pad"}``, ``{"mm_spatial_pool_stride": 2}``).
        multimodal: LLaVA-NeXT's keyword: load ``model_path`` as a LLaVA checkpoint even when its ``config.json``
            has no LLaVA keys (e.g. they come from ``customized_config`` / ``overwrite_config``); the folder's files
            still choose between full, stage-1 and LoRA.
        reducer: An in-LLM reducer type to run on every prompt with images (``--reducer``;
            :mod:`llava.model.reducers`), whatever the projector; ``None`` or ``"none"``: none.
        **kwargs: ``allow_missing_weights=True`` loads a full checkpoint that lacks some weights (they stay
            randomly initialised; by default that is an error naming them). The rest is passed to ``from_pretrained``;
            ``dtype`` (or ``torch_dtype``) overrides the default, which
            is float16 on CUDA and float32 on every other device (:func:`llava.devices.default_dtype`).

    Returns:
        ``(tokenizer, model, image_processor, context_len)``; ``image_processor`` is ``None`` for a plain LLM,
        ``context_len`` is ``config.max_sequence_length`` or 2048.

    Raises:
        ValueError: For a folder that is not a checkpoint (naming what it holds and what was expected), an
            unsupported model type, a missing projector file, or projector weights that do not match the
            configured projector (the message names the keys).
        ImportError: If quantisation needs bitsandbytes, or LoRA needs peft, and it is not installed.
    """
    check_model_path(model_path)
    if reducer not in (None, NO_REDUCER):
        resolve_reducer(reducer)  # an unknown name is refused before anything loads
    if model_base:
        check_model_path(model_base, "--model-base")
    load_kwargs = dict(kwargs)
    allow_missing_weights = bool(load_kwargs.pop("allow_missing_weights", False))
    if "use_flash_attention_2" in load_kwargs:  # transformers 4's keyword, gone in 5
        load_kwargs.pop("use_flash_attention_2")
        logger.warning("ignoring use_flash_attention_2 (a transformers 4 keyword); pass use_flash_attn=True instead")
    load_kwargs["device_map"], device = resolve_placement(device_map, device)
    if torch_dtype is not None:
        load_kwargs["torch_dtype"] = dtype_from_name(torch_dtype)
    load_kwargs.update(_precision_kwargs(load_8bit, load_4bit, device, load_kwargs))
    if use_flash_attn:
        load_kwargs["attn_implementation"] = "flash_attention_2"
    if attn_implementation is not None:
        load_kwargs["attn_implementation"] = attn_implementation
    changes = ConfigChanges(customized_config, dict(overwrite_config or {}))

    kind = checkpoint_kind(model_path, model_base, model_name, multimodal=multimodal)
    check_generation_config(model_path if kind == "llava_full" or not model_base else model_base)
    logger.info("loading %s as %s (base: %s)", model_path, kind, model_base)
    if kind == "language_model":
        if reducer not in (None, NO_REDUCER):
            raise UserError(f"--reducer {reducer} acts on a LLaVA model's image tokens, but {model_path!r} is a plain language model; drop --reducer")
        tokenizer, model = _load_language_model(model_path, model_base, load_kwargs)
        return tokenizer, model, None, _context_length(model)
    if kind == "llava_lora":
        tokenizer, model = _load_llava_lora(model_path, model_base, load_kwargs, changes)
    elif kind == "llava_projector":
        tokenizer, model = _load_llava_projector(model_path, model_base, load_kwargs, changes)
    else:
        tokenizer, model = _load_llava_full(model_path, load_kwargs, allow_missing_weights, changes)

    image_processor = _prepare_multimodal(tokenizer, model, load_kwargs["device_map"], device,
                                          trained_tower_from=model_path if kind == "llava_full" else None)
    set_reducer(model, reducer)
    return tokenizer, model, image_processor, _context_length(model)


# ---------------------------------------------------------------------------------------------- options


def resolve_placement(device_map: Any, device: str) -> tuple[Any, str]:
    """``(device_map for from_pretrained, the device the vision tower goes to)`` from upstream's two arguments.

    As upstream, a ``device`` other than ``"cuda"`` maps the whole model to it. With ``device="cuda"`` (the
    default) the ``device_map`` decides: ``"auto"`` spreads the LLM over the GPUs (the tower is placed by its
    own ``"auto"`` load); a single device (``"cpu"``, ``"cuda:1"``, ``{"": "cuda:1"}``) takes the LLM and the
    tower alike, so ``device_map="cpu"`` works on a machine without CUDA.
    """
    if device != "cuda":
        return {"": device}, device
    single = device_map.get("") if isinstance(device_map, dict) and set(device_map) == {""} else device_map
    if isinstance(single, (str, torch.device, int)) and str(single) != "auto":
        target = f"cuda:{single}" if isinstance(single, int) else str(single)
        return {"": target}, target
    return device_map, device


def _precision_kwargs(load_8bit: bool, load_4bit: bool, device: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``dtype`` / ``quantization_config`` for ``from_pretrained``; pops ``torch_dtype`` from ``kwargs``."""
    dtype = kwargs.pop("dtype", None)
    legacy_dtype = kwargs.pop("torch_dtype", None)
    dtype = dtype if dtype is not None else legacy_dtype
    if load_8bit or load_4bit:
        if importlib.util.find_spec("bitsandbytes") is None:
            flag = "load_8bit" if load_8bit else "load_4bit"
            raise ImportError(f"{flag} needs the bitsandbytes package; install it with 'pip install bitsandbytes'")
        from transformers import BitsAndBytesConfig

        if load_8bit:
            return {"quantization_config": BitsAndBytesConfig(load_in_8bit=True), "dtype": dtype or torch.float16}
        quantization = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_compute_dtype=torch.float16,
            bnb_4bit_use_double_quant=True,
            bnb_4bit_quant_type="nf4",
        )
        return {"quantization_config": quantization, "dtype": dtype or torch.float16}
    return {"dtype": default_dtype(device) if dtype is None else dtype}


def _context_length(model: PreTrainedModel) -> int:
    return int(getattr(model.config, "max_sequence_length", None) or DEFAULT_CONTEXT_LENGTH)


def _load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    # Upstream asks for the slow (sentencepiece) tokenizer; transformers 5 converts tokenizer.model into an
    # equivalent tokenizers-backed LlamaTokenizer (needs sentencepiece and protobuf).
    check_tokenizer_files(path)
    return load_tokenizer(path, use_fast=False)


@dataclass(frozen=True)
class ConfigChanges:
    """LLaVA-NeXT's ``customized_config`` (a config object or a path read instead of the checkpoint's) and
    ``overwrite_config`` (``{key: value}`` set on it), applied before the model is built."""

    customized: Any = None
    overwrite: dict[str, Any] = field(default_factory=dict)


def dtype_from_name(value: Any) -> torch.dtype | str:
    """A ``torch.dtype`` for ``torch_dtype`` given as a dtype or a name (``"float16"``, ``"bf16"``...); ``"auto"`` stays.

    Raises:
        UserError: For a name that is not a floating-point torch dtype.
    """
    if isinstance(value, torch.dtype) or value == "auto":
        return value
    names = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32"}
    name = names.get(str(value), str(value)).removeprefix("torch.")
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise UserError(f"torch_dtype {value!r} is not a floating-point dtype; use float16, bfloat16, float32 or auto")
    return dtype


def _llava_config(model_path: str, changes: ConfigChanges | None = None) -> tuple[LanguageModelEntry, Any]:
    """The registry entry chosen by ``model_path``'s ``model_type`` and its config, read by that entry's class
    (from ``changes.customized`` when given, then ``changes.overwrite`` applied)."""
    entry = language_model_for_checkpoint(model_path)
    customized = changes.customized if changes is not None else None
    source = os.fspath(customized) if isinstance(customized, (str, os.PathLike)) else model_path
    if customized is None or isinstance(customized, (str, os.PathLike)):
        with reading_config(source):
            config = entry.config_class.from_pretrained(source)
    else:
        config = customized
    for key, value in (changes.overwrite if changes is not None else {}).items():
        logger.info("overwriting config %s = %r", key, value)
        setattr(config, key, value)
    check_llava_config(model_path, config)
    return entry, config


def _check_base(entry: LanguageModelEntry, model_path: str, model_base: str) -> None:
    """Refuse a ``model_base`` of another LLM family than the checkpoint's (its weights would not fit)."""
    base_entry = language_model_for_checkpoint(model_base)
    if base_entry.model_type != entry.model_type:
        raise ValueError(
            f"model_base {model_base!r} is a {base_entry.base_model_type} model but {model_path!r} is a "
            f"{entry.model_type} checkpoint; pass a {entry.base_model_type} (or {entry.model_type}) directory as model_base"
        )


def _require(package: str, purpose: str) -> None:
    if importlib.util.find_spec(package) is None:
        raise ImportError(f"{purpose} needs the {package} package; install it with 'pip install {package}'")


# ---------------------------------------------------------------------------------------------- loaders


def _load_llava_full(
    model_path: str, load_kwargs: dict[str, Any], allow_missing_weights: bool = False, changes: ConfigChanges | None = None
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    entry, config = _llava_config(model_path, changes)
    check_weight_files(model_path)
    tokenizer = _load_tokenizer(model_path)
    model, info = entry.causal_lm_class.from_pretrained(
        model_path, config=config, output_loading_info=True, **load_kwargs
    )
    _check_projector_keys(info, model_path)
    check_loaded_weights(
        _loading_field(info, "missing_keys"), model_path, unexpected_keys=_loading_field(info, "unexpected_keys"),
        allow_missing=allow_missing_weights,
    )
    return tokenizer, model


def _check_projector_keys(info: Any, source: str) -> None:
    """Raise if the checkpoint lacks projector weights the config asks for, or has extra ones."""

    def projector_keys(keys: Any) -> list[str]:
        return sorted(key for key in keys if "mm_projector." in key or key.endswith("image_newline"))

    missing = projector_keys(_loading_field(info, "missing_keys"))
    unexpected = projector_keys(_loading_field(info, "unexpected_keys"))
    if missing or unexpected:
        raise ValueError(
            f"projector weights in {source!r} do not match the projector its config.json describes; "
            f"missing keys: {missing or 'none'}; unexpected keys: {unexpected or 'none'}"
        )


def _loading_field(info: Any, name: str) -> Any:
    return info[name] if isinstance(info, dict) else getattr(info, name)


def _load_llava_projector(
    model_path: str, model_base: str, load_kwargs: dict[str, Any], changes: ConfigChanges | None = None
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    entry, config = _llava_config(model_path, changes)
    _check_base(entry, model_path, model_base)
    tokenizer = _load_tokenizer(model_base)
    weights_file = find_file(model_path, PROJECTOR_FILES)
    if weights_file is None:
        raise ValueError(
            f"{model_path!r} has no {' or '.join(PROJECTOR_FILES)}; a projector-only checkpoint needs one "
            "(or drop model_base to load a full checkpoint)"
        )
    model = entry.causal_lm_class.from_pretrained(model_base, config=config, **load_kwargs)
    weights = projector_state_dict(load_weights_file(weights_file))
    load_projector_weights(model.get_model().mm_projector, weights, repr(weights_file))
    return tokenizer, model


def _load_llava_lora(
    model_path: str, model_base: str, load_kwargs: dict[str, Any], changes: ConfigChanges | None = None
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    _require("peft", "loading a LoRA checkpoint")
    from peft import PeftModel

    entry, config = _llava_config(model_path, changes)
    _check_base(entry, model_path, model_base)
    tokenizer = _load_tokenizer(model_base)
    model = entry.causal_lm_class.from_pretrained(model_base, config=config, **load_kwargs)
    trainables_file = find_file(model_path, NON_LORA_FILES)
    if trainables_file is None:
        raise ValueError(f"{model_path!r} has no {' or '.join(NON_LORA_FILES)}, which a LLaVA LoRA checkpoint needs")
    trainables = _strip_lora_prefixes(load_weights_file(trainables_file))
    projector = projector_state_dict(trainables)
    load_projector_weights(model.get_model().mm_projector, projector, repr(trainables_file))
    rest = {key: value for key, value in trainables.items() if "mm_projector." not in key}
    if rest:
        result = model.load_state_dict(rest, strict=False)
        if result.unexpected_keys:
            raise ValueError(f"{trainables_file!r} holds weights the model does not have: {sorted(result.unexpected_keys)}")
    model = PeftModel.from_pretrained(model, model_path)
    model = model.merge_and_unload()
    logger.info("merged the LoRA adapter from %s", model_path)
    return tokenizer, model


def _strip_lora_prefixes(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``base_model.model.model.x`` → ``model.x`` (PEFT wraps the model twice)."""
    weights = {key.removeprefix("base_model."): value for key, value in weights.items()}
    if any(key.startswith("model.model.") for key in weights):
        weights = {key.removeprefix("model."): value for key, value in weights.items()}
    return weights


def _load_language_model(
    model_path: str, model_base: str | None, load_kwargs: dict[str, Any]
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    if model_base is not None:
        _require("peft", "merging an adapter into a base model")
    weights_path = model_path if model_base is None else model_base
    # The config is read before the tokenizer (which reads it too), so that a bad value is named.
    with reading_config(weights_path):
        config = AutoConfig.from_pretrained(weights_path)
    tokenizer = _load_tokenizer(weights_path)
    model = AutoModelForCausalLM.from_pretrained(weights_path, config=config, **load_kwargs)
    if model_base is None:
        return tokenizer, model
    from peft import PeftModel

    return tokenizer, PeftModel.from_pretrained(model, model_path).merge_and_unload()


# ---------------------------------------------------------------------------------------------- vision


#: Where a full checkpoint keeps the vision tower's weights.
TOWER_WEIGHTS_PREFIX = "model.vision_tower.vision_tower."


def restore_trained_tower(model: PreTrainedModel, model_path: str) -> None:
    """Put a tower that trained with the model back from the checkpoint's own weights.

    ``load_model`` reads the tower from ``mm_vision_tower`` (its original weights). When the config says the tower
    trained (LLaVA-NeXT's ``mm_tunable_parts`` naming ``mm_vision_tower``, or ``unfreeze_mm_vision_tower``), the
    checkpoint's ``model.vision_tower.vision_tower.*`` entries under the tower's own parameter names (as this
    project's trainer saves them) replace them. Copies under transformers-4 names (``vision_model.*``) are left
    alone, as before.
    """
    config = model.config
    if "mm_vision_tower" not in str(getattr(config, "mm_tunable_parts", None) or "") and not getattr(
        config, "unfreeze_mm_vision_tower", False
    ):
        return
    if not os.path.isdir(model_path):
        return
    from safetensors import safe_open

    tower = model.get_vision_tower().vision_tower
    names = set(tower.state_dict())
    weights: dict[str, torch.Tensor] = {}
    for file_name in sorted(os.listdir(model_path)):
        if file_name.endswith(".safetensors"):
            with safe_open(os.path.join(model_path, file_name), framework="pt") as handle:
                for key in handle.keys():
                    name = key.removeprefix(TOWER_WEIGHTS_PREFIX)
                    if key.startswith(TOWER_WEIGHTS_PREFIX) and name in names:
                        weights[name] = handle.get_tensor(key)
    if weights:
        tower.load_state_dict(weights, strict=False)
        logger.info("restored the trained vision tower from %s (%d of %d tensors)", model_path, len(weights), len(names))


def _prepare_multimodal(
    tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel, device_map: Any, device: str,
    trained_tower_from: str | None = None,
) -> Any:
    """Add the image tokens the config asks for, grow the embeddings if needed, load the vision tower.

    ``mm_use_im_patch_token`` defaults to True when absent, as upstream. The embeddings only ever grow: Qwen2
    checkpoints carry more rows (151936) than their tokenizer has tokens (151665); shrinking them to
    ``len(tokenizer)`` (as LLaVA-NeXT's loader does) would drop rows of the checkpoint for no gain.
    """
    config = model.config
    if getattr(config, "mm_use_im_patch_token", True):
        tokenizer.add_tokens([DEFAULT_IMAGE_PATCH_TOKEN], special_tokens=True)
    if getattr(config, "mm_use_im_start_end", False):
        tokenizer.add_tokens([DEFAULT_IM_START_TOKEN, DEFAULT_IM_END_TOKEN], special_tokens=True)
    if model.get_input_embeddings().weight.shape[0] < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))

    vision_tower = model.get_vision_tower()
    if vision_tower is None:
        raise ValueError(
            f"the model config names no vision tower (mm_vision_tower); {type(model).__name__} needs one to take images"
        )
    vision_tower.load_model(device_map=device_map)
    if trained_tower_from is not None:
        restore_trained_tower(model, trained_tower_from)
    if device_map != "auto":
        tower_dtype = torch.float16 if getattr(model, "is_quantized", False) else model.dtype
        vision_tower.to(device=device, dtype=tower_dtype)
    return vision_tower.image_processor
