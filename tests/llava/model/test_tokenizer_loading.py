"""A sentencepiece ``tokenizer.model`` loads whatever protobuf is installed (issue 14, lmms-eval section).

Under protobuf < 7 the schema sentencepiece ships does not import; these tests force that situation by naming
a schema module that cannot import, so that the fallback runs here too (its result must equal the normal
path), and check the one-sentence error when no schema imports at all. ``tests/lmms_eval`` runs the real
protobuf-6 environment.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import sentencepiece as spm

from llava.model.tokenizer_loading import SCHEMA_MODULES, compatible_schema, load_tokenizer
from llava.utils import UserError

TEXT = [
    "a photo of a red square next to a blue circle",
    "what is shown in the image? two circles and a square",
    "the quick brown fox jumps over the lazy dog",
    "USER: describe the picture ASSISTANT: a cat on a mat",
] * 20
BROKEN = "llava_tests_no_such_schema_pb2"
#: The preferred schema "fails to import"; the fallback takes the first of the usual ones that works here.
FORCED_FALLBACK = (BROKEN,) + SCHEMA_MODULES


@pytest.fixture(scope="module")
def spm_folder(tmp_path_factory) -> Path:
    """A LLaMA-style tokenizer folder holding only ``tokenizer.model`` (sentencepiece BPE) and its config."""
    folder = tmp_path_factory.mktemp("spm_tokenizer")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(TEXT))
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "tokenizer"), vocab_size=120, model_type="bpe",
        character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
    )
    corpus.unlink()
    (folder / "tokenizer.vocab").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False, "legacy": False,
    }))
    return folder


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text).input_ids


def test_fallback_schema_gives_the_same_tokenizer(spm_folder: Path):
    normal = load_tokenizer(str(spm_folder), use_fast=False)
    fallback = load_tokenizer(str(spm_folder), use_fast=False, schema_candidates=FORCED_FALLBACK)
    processor = spm.SentencePieceProcessor(model_file=str(spm_folder / "tokenizer.model"))
    for text in ("a red circle next to the dog", "USER: what is shown? ASSISTANT: two squares"):
        assert _ids(fallback, text) == _ids(normal, text)
        # An independent tokenisation: sentencepiece itself, plus the BOS token the config asks for.
        assert _ids(fallback, text) == [1] + processor.encode(text)
    assert fallback.decode(_ids(fallback, "the lazy fox"), skip_special_tokens=True) == "the lazy fox"


def test_the_library_function_is_restored_after_a_fallback_load(spm_folder: Path):
    convert_slow_tokenizer = importlib.import_module("transformers.convert_slow_tokenizer")
    before = convert_slow_tokenizer.import_protobuf
    load_tokenizer(str(spm_folder), use_fast=False, schema_candidates=FORCED_FALLBACK)
    assert convert_slow_tokenizer.import_protobuf is before


def test_no_usable_schema_is_one_sentence(spm_folder: Path):
    with pytest.raises(UserError, match=r"cannot read the sentencepiece tokenizer\.model .* install protobuf>=7"):
        load_tokenizer(str(spm_folder), use_fast=False, schema_candidates=(BROKEN, BROKEN + "_2"))


def test_compatible_schema_skips_modules_that_do_not_import():
    assert compatible_schema((BROKEN,)) is None
    schema = compatible_schema(FORCED_FALLBACK)
    assert schema is not None and schema.__name__ in SCHEMA_MODULES
    assert schema.ModelProto.FromString(b"") is not None
