"""``train.py`` with the fastest attention available: flash-attention-2 when ``flash_attn`` is installed,
PyTorch SDPA otherwise (one notice says which); ``--attn_implementation`` (LLaVA-NeXT's flag) chooses instead.
Upstream's and NeXT's scripts launch this file::

    deepspeed llava/train/train_mem.py --deepspeed ./scripts/zero2.json ...
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python llava/train/train_mem.py): import llava from this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import importlib.util
import logging
from collections.abc import Sequence

from transformers import Trainer

from llava.train.arguments import flag_given
from llava.train.train import train
from llava.utils import cli_main, setup_logging

logger = logging.getLogger(__name__)


def attention_implementation() -> str:
    """``"flash_attention_2"`` if the flash-attn package is importable, else ``"sdpa"``."""
    return "flash_attention_2" if importlib.util.find_spec("flash_attn") is not None else "sdpa"


def main(argv: Sequence[str] | None = None) -> Trainer:
    implementation = attention_implementation()
    setup_logging()
    if flag_given(sys.argv[1:] if argv is None else argv, "attn_implementation"):
        pass  # the flag wins (train() applies it)
    elif implementation == "sdpa":
        logger.warning("flash-attn is not installed; training with PyTorch SDPA attention instead of flash_attention_2")
    else:
        logger.info("training with flash_attention_2")
    return train(attn_implementation=implementation, argv=argv)


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
