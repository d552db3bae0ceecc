"""Tiny, randomly initialised LLaVA pieces saved in upstream's on-disk formats, for tests and CPU demos.

Nothing is downloaded: the tokenizer is a sentencepiece model trained in-process on a few sentences, the
vision tower a random CLIP or SigLIP model, the LLM a random LLaMA, Qwen2 (with a byte-level BPE tokenizer trained
in-process with ``tokenizers``) or Mistral. Every builder writes a directory that
the normal loaders read (``load_pretrained_model``, ``CLIPVisionModel.from_pretrained``,
``AutoTokenizer.from_pretrained``), so code under test takes the same path as with released weights.

Typical use::

    tokenizer = train_tiny_tokenizer(root / "tokenizer")
    tower = build_tiny_clip_tower(root / "clip", image_size=48, patch_size=8)  # 6x6 patch grid
    ckpt = build_tiny_llava_checkpoint(root / "llava-tiny", tower, tokenizer, projector_type="mlp2x_gelu")

Tokenizers: :mod:`llava.testing.tiny_tokenizers`; towers: :mod:`llava.testing.tiny_towers`; LLMs and LLaVA
checkpoints: here.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

# The tokenizer and tower builders live in their own modules; every name stays importable from here.
from .tiny_tokenizers import (
    QWEN_SPECIAL_TOKENS,
    TOKENIZER_FILES,
    PathLike,
    prepare_dir,
    train_tiny_qwen_tokenizer,
    train_tiny_tokenizer,
)
from .tiny_towers import (
    TINY_TOWER_BUILDERS,
    build_tiny_clip_tower,
    build_tiny_siglip2_tower,
    build_tiny_siglip_tower,
    build_tiny_vision_tower,
    save_tiny_model,
)


def _load_tokenizer(tokenizer_dir: PathLike) -> Any:
    from llava.model.tokenizer_loading import load_tokenizer  # works under any protobuf version

    return load_tokenizer(os.fspath(tokenizer_dir))


def _copy_tokenizer(tokenizer_dir: PathLike, out_dir: Path) -> None:
    for name in TOKENIZER_FILES:
        source = Path(tokenizer_dir) / name
        if source.is_file():
            shutil.copyfile(source, out_dir / name)


def _qwen_config_keys(tokenizer: Any, layers: int, heads: int) -> dict[str, Any]:
    """Qwen2.5-3B-style settings: tied embeddings, GQA, rope θ 1e6 (tf5 ``rope_parameters``), ids by token."""
    endoftext, im_end = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    return {
        # Like Qwen's 151936 rows for 151665 tokens: spare rows, rounded up to a multiple of 64.
        "vocab_size": -(-len(tokenizer) // 64) * 64 + 64,
        "num_key_value_heads": max(1, heads // 2),
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0},
        "rms_norm_eps": 1e-6,
        "use_sliding_window": False,
        "max_window_layers": layers,
        "bos_token_id": endoftext,
        "eos_token_id": im_end,
        "pad_token_id": endoftext,
    }


def _mistral_config_keys(tokenizer: Any, layers: int, heads: int) -> dict[str, Any]:
    """Mistral-7B-Instruct-v0.2-style settings: GQA, no sliding window, rope θ 1e6; LLaMA's token ids."""
    return {
        "vocab_size": len(tokenizer),
        "num_key_value_heads": max(1, heads // 2),
        "sliding_window": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0},
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def _llama_config_keys(tokenizer: Any, layers: int, heads: int) -> dict[str, Any]:
    return {"vocab_size": len(tokenizer), "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


#: Tiny LLM families by plain ``model_type``: the config keys that make each look like its released model.
TINY_LLM_CONFIG_KEYS: dict[str, Any] = {
    "llama": _llama_config_keys,
    "qwen2": _qwen_config_keys,
    "mistral": _mistral_config_keys,
}


#: Tiny tokenizer trainers by plain LLM ``model_type``: ``train(out_dir, texts=..., vocab_size=...) -> dir``.
TINY_TOKENIZER_BUILDERS: dict[str, Any] = {
    "llama": train_tiny_tokenizer,
    "qwen2": train_tiny_qwen_tokenizer,
    "mistral": train_tiny_tokenizer,  # Mistral-7B-Instruct uses LLaMA's sentencepiece layout
}


def train_tiny_tokenizer_for(llm: str, out_dir: PathLike, texts: Iterable[str] | None = None, vocab_size: int = 400) -> Path:
    """Train the tokenizer that family ``llm`` (a key of :data:`TINY_TOKENIZER_BUILDERS`) uses; see its trainer."""
    if llm not in TINY_TOKENIZER_BUILDERS:
        raise ValueError(f"unknown tiny llm {llm!r}; expected one of {', '.join(TINY_TOKENIZER_BUILDERS)}")
    return TINY_TOKENIZER_BUILDERS[llm](out_dir, texts=texts, vocab_size=vocab_size)


def _check_llm(llm: str) -> None:
    if llm not in TINY_LLM_CONFIG_KEYS:
        raise ValueError(f"unknown tiny llm {llm!r}; expected one of {', '.join(TINY_LLM_CONFIG_KEYS)}")


def _llm_config_kwargs(
    tokenizer_dir: PathLike,
    hidden: int,
    layers: int,
    heads: int,
    intermediate: int | None,
    max_position: int,
    llm: str = "llama",
) -> dict[str, Any]:
    _check_llm(llm)
    keys = {
        "hidden_size": hidden,
        "intermediate_size": intermediate or 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "max_position_embeddings": max_position,
    }
    keys.update(TINY_LLM_CONFIG_KEYS[llm](_load_tokenizer(tokenizer_dir), layers, heads))
    return keys


def _multimodal_keys(tower_dir: PathLike, projector_type: str, extra_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Upstream's ``mm_*`` keys (as in the released LLaVA-1.5 config.json) for a tower directory."""
    from llava.model.multimodal_encoder.builder import tower_model_type
    from llava.model.multimodal_encoder.registry import resolve_vision_tower

    name = os.fspath(tower_dir)
    tower = resolve_vision_tower(tower_model_type(name), source=name).config_class.from_pretrained(name)
    keys: dict[str, Any] = {
        "mm_vision_tower": os.fspath(tower_dir),
        "mm_hidden_size": tower.hidden_size,
        "mm_projector_type": projector_type,
        "mm_vision_select_layer": -2,
        "mm_vision_select_feature": "patch",
        "mm_patch_merge_type": "flat",
        "use_mm_proj": True,
        "mm_use_im_start_end": False,
        "mm_use_im_patch_token": False,
        "image_aspect_ratio": "pad",
        "tune_mm_mlp_adapter": False,
        "freeze_mm_mlp_adapter": False,
        "unfreeze_mm_vision_tower": False,
    }
    keys.update(extra_config or {})
    return keys


def _next_keys(tower_dir: PathLike, max_position: int) -> dict[str, Any]:
    """The keys LLaVA-NeXT's ``train()`` adds to a ``llava_qwen`` config.json (OneVision values, tiny sizes)."""
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(os.fspath(tower_dir))
    size = processor.size
    side = int(size.get("height") or size.get("shortest_edge"))
    return {
        "vision_tower_pretrained": None,
        # LLaVA-1.6's five canvases, (width, height), in units of the tower's side.
        "image_grid_pinpoints": [[side, 2 * side], [2 * side, side], [2 * side, 2 * side], [3 * side, side], [side, 3 * side]],
        "mm_newline_position": "grid",
        "mm_spatial_pool_mode": "bilinear",
        "mm_spatial_pool_stride": 2,
        "mm_tunable_parts": "mm_vision_tower,mm_mlp_adapter,mm_language_model",
        "mm_vision_tower_lr": 2e-6,
        "tokenizer_model_max_length": max_position,
        "tokenizer_padding_side": "right",
    }


def build_tiny_llm(
    out_dir: PathLike,
    tokenizer_dir: PathLike,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    intermediate: int | None = None,
    max_position: int = 1024,
    seed: int = 0,
    llm: str = "llama",
) -> Path:
    """Save a random plain causal LM of family ``llm`` with the tokenizer files: a base directory for
    ``model_base`` and for ``--model_name_or_path`` in training.

    Args:
        llm: ``"llama"`` (a stand-in for Vicuna, tokenizer from :func:`train_tiny_tokenizer`), ``"qwen2"``
            (Qwen2.5-3B-Instruct-style: tied embeddings, spare vocabulary rows, tokenizer from
            :func:`train_tiny_qwen_tokenizer`) or ``"mistral"`` (Mistral-7B-Instruct-v0.2-style, LLaMA's
            sentencepiece tokenizer); the ``model_type`` written is ``llm``.

    Returns:
        ``out_dir`` as a ``Path``.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(llm, **_llm_config_kwargs(tokenizer_dir, hidden, layers, heads, intermediate, max_position, llm))
    path = prepare_dir(out_dir)
    save_tiny_model(lambda: AutoModelForCausalLM.from_config(config), path, seed)
    _copy_tokenizer(tokenizer_dir, path)
    return path


def _llava_entry(llm: str, model_type: str | None) -> Any:
    """The registry entry for ``llm`` and the ``model_type`` to write (its own, or one of its aliases)."""
    from llava.model.language_model.registry import resolve_language_model

    _check_llm(llm)
    entry = resolve_language_model(llm)
    accepted = (entry.model_type, *entry.aliases)
    if model_type is not None and model_type not in accepted:
        raise ValueError(f"unknown model_type {model_type!r} for llm {llm!r}; expected one of {', '.join(map(repr, accepted))}")
    return entry


def build_tiny_llava_checkpoint(
    out_dir: PathLike,
    tower_dir: PathLike,
    tokenizer_dir: PathLike,
    projector_type: str = "mlp2x_gelu",
    model_type: str | None = None,
    extra_config: Mapping[str, Any] | None = None,
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    intermediate: int | None = None,
    max_position: int = 1024,
    llm: str = "llama",
) -> Path:
    """Save a random full (stage-2 style) LLaVA checkpoint in the format released checkpoints of ``llm`` use.

    ``config.json`` has the registered LLaVA ``architectures``/``model_type`` for ``llm`` (``llama`` →
    ``LlavaLlamaForCausalLM``/``llava_llama``, or ``llava`` as in the released LLaVA-1.5 files; ``qwen2`` →
    ``LlavaQwenForCausalLM``/``llava_qwen`` with LLaVA-NeXT's extra keys; ``mistral`` →
    ``LlavaMistralForCausalLM``/``llava_mistral``), the LLM dims and upstream's ``mm_*`` keys naming
    ``tower_dir`` as ``mm_vision_tower`` (plus whatever keys the projector records, e.g. a compressor plugin's
    settings); ``model.safetensors`` holds ``model.embed_tokens``, ``model.layers.*``, ``model.norm``,
    ``lm_head`` (not when tied, as Qwen2.5-3B) and ``model.mm_projector.*`` (no tower weights); the tokenizer
    files are copied from ``tokenizer_dir``.

    Args:
        out_dir: Directory to write; name it ``llava-...`` so ``load_pretrained_model``'s name rules apply.
        tower_dir: From :func:`build_tiny_vision_tower` (any registered tower kind).
        tokenizer_dir: From :func:`train_tiny_tokenizer` (llama, mistral) or :func:`train_tiny_qwen_tokenizer`.
        projector_type: Any registered ``mm_projector_type``.
        model_type: The LLaVA model_type or one of its aliases; ``None``: the registered one for ``llm``.
        extra_config: More config keys (e.g. a compressor plugin's settings, or ``tie_word_embeddings``); they
            override the defaults.
        seed: Seed for the random weights.
        hidden, layers, heads, intermediate, max_position: LLM dims.
        llm: ``"llama"`` (default), ``"qwen2"`` or ``"mistral"``.

    Returns:
        ``out_dir`` as a ``Path``.
    """
    entry = _llava_entry(llm, model_type)
    keys = _llm_config_kwargs(tokenizer_dir, hidden, layers, heads, intermediate, max_position, llm)
    if llm == "qwen2":
        keys.update(_next_keys(tower_dir, max_position))
    # extra_config may override LLM keys too (e.g. tie_word_embeddings False, as Qwen2.5-7B).
    config = entry.config_class(**{**keys, **_multimodal_keys(tower_dir, projector_type, extra_config)})
    config.architectures = [entry.causal_lm_class.__name__]
    path = prepare_dir(out_dir)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = entry.causal_lm_class(config)
    model.save_pretrained(path)
    if model_type is not None and model_type != entry.model_type:
        config_file = path / "config.json"
        saved = json.loads(config_file.read_text())
        saved["model_type"] = model_type
        config_file.write_text(json.dumps(saved, indent=2, sort_keys=True))
    _copy_tokenizer(tokenizer_dir, path)
    return path


def build_tiny_projector_checkpoint(
    out_dir: PathLike,
    base_dir: PathLike,
    tower_dir: PathLike,
    projector_type: str = "mlp2x_gelu",
    extra_config: Mapping[str, Any] | None = None,
    seed: int = 0,
    file_format: str = "bin",
) -> Path:
    """Save a stage-1 (projector-only) output: ``config.json`` + ``mm_projector.bin`` (or ``.safetensors``).

    The config is the base LLM's (:func:`build_tiny_llm`, any family) with the LLaVA ``model_type`` registered
    for it (``llava_llama``, ``llava_qwen``, ``llava_mistral``), upstream's ``mm_*`` keys and
    ``tune_mm_mlp_adapter: true``; the weights file maps ``model.mm_projector.<i>.*`` to tensors, as upstream's
    trainer writes it. Load it with ``load_pretrained_model(out_dir, base_dir, ...)``.

    Returns:
        ``out_dir`` as a ``Path``.
    """
    from llava.model.language_model.registry import language_model_for_checkpoint
    from llava.model.multimodal_projector.builder import build_vision_projector

    if file_format not in ("bin", "safetensors"):
        raise ValueError(f"unknown file_format {file_format!r}; expected 'bin' or 'safetensors'")
    entry = language_model_for_checkpoint(base_dir)
    base = entry.config_class.from_pretrained(os.fspath(base_dir)).to_dict()
    for key in ("model_type", "architectures", "transformers_version"):
        base.pop(key, None)
    keys = {**_multimodal_keys(tower_dir, projector_type, extra_config), "tune_mm_mlp_adapter": True}
    config = entry.config_class(**{**base, **keys})
    config.architectures = [entry.causal_lm_class.__name__]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        projector = build_vision_projector(config)
    weights = {f"model.mm_projector.{name}": tensor.detach().clone() for name, tensor in projector.state_dict().items()}
    path = prepare_dir(out_dir)
    config.save_pretrained(path)
    if file_format == "bin":
        torch.save(weights, path / "mm_projector.bin")
    else:
        from safetensors.torch import save_file

        save_file({key: value.contiguous() for key, value in weights.items()}, str(path / "mm_projector.safetensors"))
    return path


__all__ = [
    "QWEN_SPECIAL_TOKENS",
    "TINY_LLM_CONFIG_KEYS",
    "TINY_TOKENIZER_BUILDERS",
    "TINY_TOWER_BUILDERS",
    "build_tiny_clip_tower",
    "build_tiny_llava_checkpoint",
    "build_tiny_llm",
    "build_tiny_projector_checkpoint",
    "build_tiny_siglip2_tower",
    "build_tiny_siglip_tower",
    "build_tiny_vision_tower",
    "train_tiny_qwen_tokenizer",
    "train_tiny_tokenizer",
    "train_tiny_tokenizer_for",
]
