"""Weight files and the projector's state dict: reading ``.safetensors``/``.bin`` files, picking the projector's
entries out of a full, stage-1 or LoRA checkpoint, loading them with a missing/unexpected key check, and listing
the non-persistent buffers that ``from_pretrained`` leaves uninitialised.

Used by :mod:`llava.model.llava_arch` (``pretrain_mm_mlp_adapter``), :mod:`llava.model.builder` and
:mod:`llava.train.saving`; the names stay importable from ``llava.model.llava_arch``, where upstream has them.
"""

from __future__ import annotations

import contextlib
import os
import re
import zipfile
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.nn as nn

from llava.utils import UserError

#: The projector's attribute name, and the marker of its entries in every checkpoint layout.
PROJECTOR_KEY = "mm_projector"


def load_weights_file(path: str | os.PathLike[str], *, numpy_state: bool = False, mmap: bool = False) -> dict[str, Any]:
    """Read a state dict from ``.safetensors`` or, otherwise, a ``torch.save`` file (``weights_only=True``).

    The one place the project reads a ``torch.save`` file: ``weights_only=True`` refuses any pickled object that
    is not a tensor or a plain container, so a hostile file cannot run code, and the error never repeats torch's
    advice to retry with ``weights_only=False``.

    Args:
        path: The file.
        numpy_state: Also accept numpy arrays and dtypes (a trainer's ``rng_state.pth`` holds numpy's RNG state;
            the same allowlist transformers uses when it resumes).
        mmap: Map the tensors' storage instead of reading it (a cheap check of a large file; zip-format files).

    Raises:
        ValueError: If the file does not exist; ``UserError`` if it cannot be read or is refused.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"weights file {path!r} does not exist")
    try:
        if path.endswith(".safetensors"):
            from safetensors.torch import load_file

            return load_file(path, device="cpu")
        with _numpy_globals() if numpy_state else contextlib.nullcontext():
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap and zipfile.is_zipfile(path))
    except Exception as error:  # unpickling, zip and header errors alike: the file is unusable
        # Never pass on torch's advice to retry with weights_only=False: the file may be hostile.
        raise weights_file_error(path, error) from None


def weights_file_error(path: str, error: BaseException) -> UserError:
    """The one sentence for a weights file that cannot be read (the library's own advice is left out)."""
    import pickle

    refused = re.search(r"Unsupported global: GLOBAL (\S+)", str(error))
    if isinstance(error, pickle.UnpicklingError) and refused:
        return UserError(
            f"weights file {path!r} holds pickled Python objects that are not tensors ({refused.group(1)}), so it was not "
            "loaded (unpickling them could run arbitrary code); use a copy you trust, saved with torch.save of tensors "
            "only or as safetensors"
        )
    kind = type(error).__name__
    return UserError(
        f"weights file {path!r} is not a readable weights file ({kind}: it is corrupt, truncated or not a checkpoint); "
        "download or save it again"
    )


def _numpy_globals() -> Any:
    """``torch.serialization.safe_globals`` for numpy's array reconstruction (arrays and dtypes, nothing else)."""
    import numpy as np

    core = np._core if hasattr(np, "_core") else np.core
    return torch.serialization.safe_globals([core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))])


def projector_state_dict(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keep the entries whose name contains ``mm_projector`` and strip the name through ``mm_projector.``.

    ``model.mm_projector.0.weight`` (a full or stage-1 checkpoint) and
    ``base_model.model.model.mm_projector.0.weight`` (LoRA ``non_lora_trainables``) both become ``0.weight``.
    """
    marker = PROJECTOR_KEY + "."
    return {name.split(marker, 1)[1]: value for name, value in weights.items() if marker in name}


def load_projector_weights(projector: nn.Module, weights: Mapping[str, torch.Tensor], source: str) -> None:
    """Strictly load projector-relative ``weights`` (see :func:`projector_state_dict`) into ``projector``.

    Args:
        projector: The model's ``mm_projector``.
        weights: ``{"0.weight": ..., ...}``.
        source: Where the weights came from, for the error message.

    Raises:
        ValueError: If a key is missing or unexpected (the message names them all).
    """
    expected = set(projector.state_dict())
    given = set(weights)
    missing, unexpected = sorted(expected - given), sorted(given - expected)
    if missing or unexpected:
        raise ValueError(
            f"projector weights in {source} do not match the {type(projector).__name__} built for "
            f"mm_projector_type; missing keys: {missing or 'none'}; unexpected keys: {unexpected or 'none'}"
        )
    projector.load_state_dict(dict(weights), strict=True)


def non_persistent_buffers(module: nn.Module) -> Iterator[str]:
    """Dotted names of ``module``'s non-persistent buffers that are set (never saved, so never loaded)."""
    for prefix, child in module.named_modules():
        for name in child._non_persistent_buffers_set:
            if child._buffers.get(name) is not None:
                yield f"{prefix}.{name}" if prefix else name


__all__ = [
    "PROJECTOR_KEY", "load_projector_weights", "load_weights_file", "non_persistent_buffers", "projector_state_dict",
]
