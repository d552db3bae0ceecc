"""Tiny tokenizers trained in-process and saved in upstream's formats (part of :mod:`llava.testing.tiny`).

A LLaMA/Vicuna-style sentencepiece model (``tokenizer.model``, pad = unk) and a Qwen2-style byte-level BPE
(``tokenizer.json`` with ChatML's special tokens), both loadable with ``AutoTokenizer.from_pretrained``.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable
from pathlib import Path

from llava.constants import DEFAULT_IMAGE_TOKEN

PathLike = str | os.PathLike[str]

#: Upstream's special-token layout for LLaMA / Vicuna tokenizers: pad is unk.
UNK, BOS, EOS = "<unk>", "<s>", "</s>"
TOKENIZER_FILES = (
    "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "vocab.json", "merges.txt",
)

DEFAULT_TEXTS = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
    "detailed, and polite answers to the user's questions.",
    "A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, "
    "detailed, and polite answers to the human's questions.",
    "USER: What is shown in the image? ASSISTANT: A red square on a white background.",
    "USER: How many circles are there? ASSISTANT: There are 3 circles.",
    "Human: Describe the picture. ### Assistant: A small blue triangle next to a green circle.",
    "Answer the question using a single word or phrase. Yes No left right top bottom",
    "The quick brown fox jumps over the lazy dog 0 1 2 3 4 5 6 7 8 9.",
)


def prepare_dir(out_dir: PathLike) -> Path:
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def train_tiny_tokenizer(out_dir: PathLike, texts: Iterable[str] | None = None, vocab_size: int = 384) -> Path:
    """Train a LLaMA-style sentencepiece BPE model and save it as a Vicuna-style tokenizer directory.

    The directory holds ``tokenizer.model``, ``tokenizer_config.json`` (``LlamaTokenizer``, BOS added,
    ``legacy`` false) and ``special_tokens_map.json``; ids: ``<unk>`` 0 (also the pad token), ``<s>`` 1,
    ``</s>`` 2; unknown characters fall back to byte tokens.

    Args:
        out_dir: Directory to write (created if needed).
        texts: Training sentences; a few LLaVA-style prompts by default. ``<image>`` never becomes a
            piece: prompts are split around it before tokenisation.
        vocab_size: Target vocabulary size (at least 259 + the corpus's distinct characters, because of the
            byte fallback); a small corpus may end up with fewer pieces.

    Returns:
        ``out_dir`` as a ``Path``.
    """
    import sentencepiece as spm

    corpus = [text.replace(DEFAULT_IMAGE_TOKEN, " ") for text in (texts if texts is not None else DEFAULT_TEXTS)]
    if not corpus:
        raise ValueError("train_tiny_tokenizer needs at least one training text, got none")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        byte_fallback=True,
        split_digits=True,
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        character_coverage=1.0,
        minloglevel=2,
    )
    path = prepare_dir(out_dir)
    (path / "tokenizer.model").write_bytes(model.getvalue())
    tokenizer_config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": UNK,
        "clean_up_tokenization_spaces": False,
        "legacy": False,
        "model_max_length": 2048,
        "padding_side": "right",
        "sp_model_kwargs": {},
        "tokenizer_class": "LlamaTokenizer",
    }
    special_tokens = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": UNK}
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (path / "special_tokens_map.json").write_text(json.dumps(special_tokens, indent=2))
    return path


#: The first three of Qwen2's special tokens (ids right after the regular vocabulary, in this order).
QWEN_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Qwen2's tokenizer.json split pattern: contractions, letter runs (one leading non-letter), single digits,
# punctuation runs, newline runs, other whitespace.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

QWEN_TEXTS = (
    "You are a helpful assistant. You are Qwen, created by Alibaba Cloud.",
    "system\nuser\nassistant\n",
    "What is shown in the image? A red square on a white background.",
    "How many circles are there? There are 3 circles.",
    "A chat between a curious human and an artificial intelligence assistant. Answer the questions.",
    "Describe the image. A square next to a circle, number 0 1 2 3 4 5 6 7 8 9.",
    "Answer the question using a single word or phrase. Yes No left right top bottom",
)


def train_tiny_qwen_tokenizer(out_dir: PathLike, texts: Iterable[str] | None = None, vocab_size: int = 400) -> Path:
    """Train a Qwen2-style byte-level BPE with the ``tokenizers`` library and save a Qwen2 tokenizer directory.

    As Qwen2's: NFC normalisation, Qwen2's split pattern then byte-level mapping, no BOS added, the special
    tokens ``<|endoftext|>`` (pad; also eos of base models), ``<|im_start|>``, ``<|im_end|>`` (eos, as in the
    Instruct models) right after the regular vocabulary, no unk. The directory holds ``tokenizer.json``,
    ``vocab.json``, ``merges.txt`` and ``tokenizer_config.json`` (``Qwen2Tokenizer``, right padding).

    Args:
        out_dir: Directory to write (created if needed).
        texts: Training sentences; ChatML-style prompts by default. ``<image>`` never becomes a token.
        vocab_size: Target size including the 256 byte symbols and the special tokens.

    Returns:
        ``out_dir`` as a ``Path``.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    corpus = [text.replace(DEFAULT_IMAGE_TOKEN, " ") for text in (texts if texts is not None else QWEN_TEXTS)]
    if not corpus:
        raise ValueError("train_tiny_qwen_tokenizer needs at least one training text, got none")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    # Specials are added after training so that, as in Qwen2, they follow the regular vocabulary.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(QWEN_SPECIAL_TOKENS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    tokenizer.add_special_tokens(list(QWEN_SPECIAL_TOKENS))
    path = prepare_dir(out_dir)
    tokenizer.save(str(path / "tokenizer.json"))
    tokenizer.model.save(str(path))  # vocab.json + merges.txt, as released Qwen2 directories have
    added = {
        str(tokenizer.token_to_id(token)): {
            "content": token, "special": True, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False,
        }
        for token in QWEN_SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "unk_token": None, "add_prefix_space": False, "errors": "replace", "clean_up_tokenization_spaces": False,
        "model_max_length": 2048, "padding_side": "right", "split_special_tokens": False, "added_tokens_decoder": added,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return path


#: CLIP's special tokens, right after the byte-level symbols and their end-of-word forms (ids 512 and 513 here,
#: 49406 and 49407 in the released tokenizer): the end token has the highest id, as CLIP's pooling expects.
CLIP_SPECIAL_TOKENS = ("<|startoftext|>", "<|endoftext|>")


def save_tiny_clip_tokenizer(out_dir: PathLike, context: int) -> Path:
    """Save a CLIP tokenizer without merges (every word is spelt byte by byte, the last byte as ``x</w>``).

    CLIP's own normalisation, split pattern and layout (BOS ``<|startoftext|>`` and EOS ``<|endoftext|>``, added
    around every text, with the highest ids); ``model_max_length`` is the text tower's ``context``. Vocabulary:
    514 tokens.

    Returns:
        ``out_dir`` as a ``Path``.
    """
    from transformers import CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    symbols = list(bytes_to_unicode().values())
    vocab = {symbol: index for index, symbol in enumerate(symbols)}
    vocab.update({symbol + "</w>": len(symbols) + index for index, symbol in enumerate(symbols)})
    vocab.update({token: 2 * len(symbols) + index for index, token in enumerate(CLIP_SPECIAL_TOKENS)})
    path = prepare_dir(out_dir)
    CLIPTokenizer(vocab=vocab, merges=[], model_max_length=context).save_pretrained(path)
    return path


__all__ = ["CLIP_SPECIAL_TOKENS", "DEFAULT_TEXTS", "QWEN_SPECIAL_TOKENS", "QWEN_TEXTS", "TOKENIZER_FILES", "PathLike",
           "prepare_dir", "save_tiny_clip_tokenizer", "train_tiny_qwen_tokenizer", "train_tiny_tokenizer"]
