"""``load_pretrained_model``'s ``context_len``: upstream LLaVA's rule (``max_sequence_length`` or 2048) for upstream
calls on LLaVA-1.5-style checkpoints, LLaVA-NeXT's (``max_sequence_length``, ``max_position_embeddings``,
``tokenizer_model_max_length``, 2048) when a NeXT keyword is passed or the checkpoint is a NeXT-only family.

Expected values are the config values written by hand below, chosen by each project's rule as its builder states it
(llava-interface.md, llava-next-interface.md / NeXT's builder.py)."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from llava.model.builder import context_length

from ._support import load


@pytest.mark.parametrize(
    "keys, upstream, next_",
    [
        ({}, 2048, 2048),
        ({"max_position_embeddings": 4096}, 2048, 4096),
        ({"max_position_embeddings": 32768, "tokenizer_model_max_length": 8192}, 2048, 32768),
        ({"tokenizer_model_max_length": 8192}, 2048, 8192),
        ({"max_sequence_length": 1000, "max_position_embeddings": 4096}, 1000, 1000),
        ({"max_sequence_length": None, "max_position_embeddings": 4096}, 2048, 4096),
    ],
)
def test_each_project_reads_its_own_keys(keys, upstream, next_):
    config = SimpleNamespace(**keys)
    assert context_length(config) == upstream
    assert context_length(config, next_rule=True) == next_


def test_llava15_checkpoint_keeps_upstreams_2048_unless_a_next_keyword_is_used(tiny_llava_checkpoint):
    path = tiny_llava_checkpoint("mlp2x_gelu")
    assert json.loads((path / "config.json").read_text())["max_position_embeddings"] == 1024
    assert load(path)[3] == 2048
    assert load(path, attn_implementation="eager")[3] == 1024  # NeXT's keyword: NeXT's rule
    assert load(path, torch_dtype="float32")[3] == 1024


def test_onevision_qwen_checkpoint_gets_its_position_limit(ov_checkpoint, tmp_path):
    source, _ = ov_checkpoint
    path = tmp_path / "llava-onevision-qwen2-ov"
    shutil.copytree(source, path)
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = 32768  # Qwen2's, as in lmms-lab/llava-onevision-qwen2-7b-ov
    (path / "config.json").write_text(json.dumps(config))
    assert load(path)[3] == 32768  # a NeXT-only family: NeXT's rule without any keyword
