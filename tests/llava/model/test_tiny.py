"""The tiny builders write directories the standard loaders read, in upstream's layout."""

from __future__ import annotations

import json

import sentencepiece as spm
from transformers import AutoTokenizer, CLIPVisionConfig


def test_tokenizer_is_a_vicuna_style_sentencepiece_tokenizer(tiny_tokenizer_dir) -> None:
    assert {path.name for path in tiny_tokenizer_dir.iterdir()} == {
        "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"
    }
    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir, use_fast=False)
    assert (tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert tokenizer.pad_token == "<unk>" and tokenizer.padding_side == "right"
    text = "USER: What is shown?\nASSISTANT: 42 red squares"
    processor = spm.SentencePieceProcessor(model_file=str(tiny_tokenizer_dir / "tokenizer.model"))
    assert tokenizer(text).input_ids == [1, *processor.encode(text)]  # one BOS, then sentencepiece's own ids
    assert tokenizer.decode(tokenizer(text).input_ids, skip_special_tokens=True) == text


def test_tower_grid_is_configurable(tiny_tower_dir) -> None:
    config = CLIPVisionConfig.from_pretrained(tiny_tower_dir)
    assert (config.image_size, config.patch_size, config.hidden_size) == (48, 8, 32)
    processor = json.loads((tiny_tower_dir / "preprocessor_config.json").read_text())
    assert processor["crop_size"] == {"height": 48, "width": 48} and processor["size"] == {"shortest_edge": 48}
