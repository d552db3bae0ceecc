"""Tokenizers for the template tests, besides the session's sentencepiece LLaMA one (tests/conftest.py).

- ``tiny_qwen_tokenizer_dir``: ``llava.model.tiny.train_tiny_qwen_tokenizer``'s Qwen2-style byte-level BPE (NFC,
  Qwen2's pre-tokenizer split pattern, no BOS) with Qwen2's first three special tokens ``<|endoftext|>`` (pad),
  ``<|im_start|>``, ``<|im_end|>`` (eos).
- ``tiny_chatml_llama_tokenizer_dir``: the LLaMA tokenizer plus ``<|im_start|>``/``<|im_end|>`` as special tokens,
  like the Nous-Hermes-2-Yi-34B base of LLaVA-1.6-34B (a BOS-adding tokenizer that speaks ChatML).

Both are saved to a directory and loaded with ``AutoTokenizer.from_pretrained``, as released tokenizers are.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")


@pytest.fixture(scope="session")
def tiny_qwen_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from llava.model.tiny import train_tiny_qwen_tokenizer

    return train_tiny_qwen_tokenizer(tmp_path_factory.mktemp("qwen_tokenizer"))


@pytest.fixture(scope="session")
def tiny_chatml_llama_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": list(CHATML_TOKENS)})
    path = tmp_path_factory.mktemp("chatml_llama_tokenizer")
    tokenizer.save_pretrained(str(path))
    return path
