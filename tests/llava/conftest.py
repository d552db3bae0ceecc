"""Tokenizers for the template tests, besides the session's sentencepiece LLaMA one (tests/conftest.py).

- ``tiny_qwen_tokenizer_dir``: ``llava.testing.tiny.train_tiny_qwen_tokenizer``'s Qwen2-style byte-level BPE (NFC,
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
    from llava.testing.tiny import train_tiny_qwen_tokenizer

    return train_tiny_qwen_tokenizer(tmp_path_factory.mktemp("qwen_tokenizer"))


@pytest.fixture(scope="session")
def tiny_chatml_llama_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": list(CHATML_TOKENS)})
    path = tmp_path_factory.mktemp("chatml_llama_tokenizer")
    tokenizer.save_pretrained(str(path))
    return path


#: The Qwen2 × SigLIP pair's tower: a 27×27-style odd grid (54 px, patch 6 → 9×9, no CLS token).
SIGLIP_IMAGE_SIZE, SIGLIP_PATCH_SIZE = 54, 6


@pytest.fixture(scope="session")
def tiny_qwen_siglip_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_qwen_tokenizer_dir: Path):
    """``factory(projector_type="mlp2x_gelu") -> dir``: a full ``llava_qwen`` checkpoint (LLaVA-NeXT's format) on a
    tiny SigLIP tower, built once per projector type; its name holds ``qwen`` so that the one model-name rule
    (``template_for_model``) picks ``qwen_1_5`` for it. The LM head is untied (as in Qwen2.5-7B): a random *tied*
    Qwen2 repeats the prompt's last token, ChatML's newline, so every greedy answer would be empty."""
    from llava.testing.tiny import build_tiny_llava_checkpoint, build_tiny_vision_tower

    root = tmp_path_factory.mktemp("qwen_siglip")
    tower = build_tiny_vision_tower("siglip_vision_model", root / "siglip-tiny", image_size=SIGLIP_IMAGE_SIZE,
                                    patch_size=SIGLIP_PATCH_SIZE)
    built: dict[str, Path] = {}

    def factory(projector_type: str = "mlp2x_gelu") -> Path:
        if projector_type not in built:
            built[projector_type] = build_tiny_llava_checkpoint(
                root / f"llava-qwen2-siglip-{projector_type}", tower, tiny_qwen_tokenizer_dir,
                projector_type=projector_type, llm="qwen2", extra_config={"tie_word_embeddings": False},
            )
        return built[projector_type]

    return factory
