"""The GPU run (``pytest -m gpu tests/gpu``, ``make gpu-check``, scripts/gpu/check.sh): deselected by default.

``LLAVA_GPU_TEST_DEVICE`` (default ``cuda``) picks the device. ``cpu`` exists only to check the tests' own wiring
on a machine without a GPU (``LLAVA_GPU_TEST_DEVICE=cpu pytest -m gpu tests/gpu``); the half-precision checks
then run in bfloat16 only, and the CUDA-only ones (CUDA graphs, bitsandbytes, NCCL) are skipped with a reason.
"""

from __future__ import annotations

import os

import pytest
import torch

# The training fixtures (tiny data, flags) are shared with tests/llava/train.
from ..llava.train.conftest import train_data  # noqa: F401

DEVICE = os.environ.get("LLAVA_GPU_TEST_DEVICE", "cuda")


@pytest.fixture(scope="session")
def device() -> torch.device:
    if DEVICE.startswith("cuda") and not torch.cuda.is_available():
        pytest.fail("the GPU tests need CUDA; LLAVA_GPU_TEST_DEVICE=cpu only checks their wiring")
    return torch.device(DEVICE)


def half_dtypes() -> list[torch.dtype]:
    """float16 and bfloat16 on CUDA; bfloat16 alone for the CPU wiring check."""
    return [torch.float16, torch.bfloat16] if DEVICE.startswith("cuda") else [torch.bfloat16]


def needs_cuda(what: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not DEVICE.startswith("cuda"), reason=f"{what} needs CUDA (CPU wiring check)")
