"""Device and dtype choice: the one rule every command follows (loaders, ``run_llava``, serving, the cost engine).

- ``--device`` defaults to CUDA when a GPU is there, else the CPU; a CUDA device on a machine without one is
  refused in one sentence, never run on the CPU without a word.
- The default dtype is float16 on CUDA (upstream LLaVA's inference dtype) and float32 on every other device.

Imports only torch, so light commands (the cost engine) use it without the model stack.
"""

from __future__ import annotations

import torch

from llava.utils import UserError

#: ``--dtype`` names and what they mean.
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def default_device() -> str:
    """``"cuda"`` when available, else ``"cpu"`` (the ``--device`` default of every command)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | None) -> str:
    """``device`` as given (checked), or :func:`default_device` when ``None``.

    Raises:
        UserError: For a name torch does not know, or a CUDA device on a machine without one.
    """
    if device is None or device == "":
        return default_device()
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise UserError(f"--device {device!r} is not a device name; use cpu, cuda or cuda:N") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(
                f"--device {device} needs a GPU and a CUDA build of PyTorch; this machine has none "
                f"(torch {torch.__version__}); pass --device cpu"
            )
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise UserError(f"--device {device} names GPU {parsed.index}, but this machine has {torch.cuda.device_count()}")
    return device


def default_dtype(device: str | torch.device) -> torch.dtype:
    """float16 on CUDA, float32 elsewhere."""
    return torch.float16 if torch.device(device).type == "cuda" else torch.float32


def resolve_dtype(name: str | None, device: str | torch.device) -> torch.dtype:
    """``--dtype`` by name, or :func:`default_dtype` for ``device`` when ``None``.

    Raises:
        UserError: For a name outside :data:`DTYPES`.
    """
    if name is None:
        return default_dtype(device)
    if name not in DTYPES:
        raise UserError(f"unknown dtype {name!r}; expected one of {list(DTYPES)}")
    return DTYPES[name]


__all__ = ["DTYPES", "default_device", "default_dtype", "resolve_device", "resolve_dtype"]
