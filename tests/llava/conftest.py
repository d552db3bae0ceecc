"""Tokenizers for the template tests, besides the session's sentencepiece LLaMA one (tests/conftest.py).

- ``tiny_qwen_tokenizer_dir``: a Qwen2-style byte-level BPE (NFC, Qwen2's pre-tokenizer split pattern, no BOS)
  with Qwen2's first three special tokens ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos).
- ``tiny_chatml_llama_tokenizer_dir``: the LLaMA tokenizer plus ``<|im_start|>``/``<|im_end|>`` as special tokens,
  like the Nous-Hermes-2-Yi-34B base of LLaVA-1.6-34B (a BOS-adding tokenizer that speaks ChatML).

Both are saved to a directory and loaded with ``AutoTokenizer.from_pretrained``, as released tokenizers are.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

QWEN_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")

# Qwen2's tokenizer.json split pattern: contractions, letter runs (one leading non-letter), single digits,
# punctuation runs, newline runs, other whitespace.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

QWEN_CORPUS = (
    "You are a helpful assistant. You are Qwen, created by Alibaba Cloud.",
    "system\nuser\nassistant\n",
    "What is shown in the image? A red square on a white background.",
    "How many circles are there? There are 3 circles.",
    "A chat between a curious human and an artificial intelligence assistant. Answer the questions.",
)


@pytest.fixture(scope="session")
def tiny_qwen_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=list(QWEN_SPECIAL_TOKENS), show_progress=False,
    )
    tokenizer.train_from_iterator(QWEN_CORPUS, trainer)
    path = tmp_path_factory.mktemp("qwen_tokenizer")
    tokenizer.save(str(path / "tokenizer.json"))
    added = {
        str(tokenizer.token_to_id(token)): {
            "content": token, "special": True, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False,
        }
        for token in QWEN_SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "unk_token": None, "add_prefix_space": False, "errors": "replace", "clean_up_tokenization_spaces": False,
        "model_max_length": 2048, "padding_side": "right", "added_tokens_decoder": added,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return path


@pytest.fixture(scope="session")
def tiny_chatml_llama_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": list(CHATML_TOKENS)})
    path = tmp_path_factory.mktemp("chatml_llama_tokenizer")
    tokenizer.save_pretrained(str(path))
    return path
