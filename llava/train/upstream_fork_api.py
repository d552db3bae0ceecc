"""The rest of upstream LLaVA's ``llava/train/train.py`` names that research forks import, with upstream's signatures.

:mod:`llava.train.upstream_api` holds the public helpers; these are the ones forks reach for when they patch the
data path: the per-style ``preprocess_v1`` / ``preprocess_llama_2`` / ``preprocess_mpt`` / ``preprocess_plain``,
the low-level ``_tokenize_fn``, ``_mask_targets`` and ``_add_speaker_and_signal``, and the dataset and collator
built as upstream builds them (``LazySupervisedDataset(data_path=, tokenizer=, data_args=)``,
``DataCollatorForSupervisedDataset(tokenizer=)``). ``llava.train.train`` re-exports them with ``conversation_lib``
(this package's :mod:`llava.conversation`) and ``local_rank``.

Each ``preprocess_*`` renders with ``llava.conversation.default_conversation`` (read at call time, as upstream reads
its global) through :mod:`llava.train.preprocess`, whose masks are checked against an independent tokenisation;
like :func:`llava.train.upstream_api.preprocess`, they return lists of 1-D tensors. A default conversation of
another style than the function renders is one sentence (upstream asserted).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, MutableSequence, Sequence
from typing import Any

import torch

from llava import conversation
from llava.constants import IGNORE_INDEX

from . import supervised_data
from .upstream_api import dataset_options, preprocess_with, read_records

#: Upstream's legacy (v0) text: each sentence is "### <role>: <text>\n".
_BEGIN_SIGNAL, _END_SIGNAL = "### ", "\n"


def _default_of_style(function: str, style: conversation.SeparatorStyle) -> conversation.Conversation:
    conv = conversation.default_conversation
    if conv.sep_style is not style:
        raise ValueError(
            f"{function} renders {style.name} templates, but llava.conversation.default_conversation is a "
            f"{conv.sep_style.name} one (version {conv.version!r}); set it to the template of your --version, as upstream's "
            "train() does, or call preprocess(), which follows it"
        )
    return conv


def preprocess_v1(sources: Sequence[Sequence[Mapping[str, Any]]], tokenizer: Any, has_image: bool = False) -> dict[str, list[torch.Tensor]]:
    """Vicuna v1 (``TWO`` style) ids and labels: instructions ignored, each answer and its ``</s>`` supervised."""
    return preprocess_with(sources, tokenizer, _default_of_style("preprocess_v1", conversation.SeparatorStyle.TWO))


def preprocess_llama_2(sources: Sequence[Sequence[Mapping[str, Any]]], tokenizer: Any, has_image: bool = False) -> dict[str, list[torch.Tensor]]:
    """LLaMA-2 chat (``[INST] ... [/INST]``) ids and labels."""
    return preprocess_with(sources, tokenizer, _default_of_style("preprocess_llama_2", conversation.SeparatorStyle.LLAMA_2))


def preprocess_mpt(sources: Sequence[Sequence[Mapping[str, Any]]], tokenizer: Any, has_image: bool = False) -> dict[str, list[torch.Tensor]]:
    """MPT / ChatML (``<|im_start|>``) ids and labels."""
    return preprocess_with(sources, tokenizer, _default_of_style("preprocess_mpt", conversation.SeparatorStyle.MPT))


def preprocess_plain(sources: Sequence[Sequence[Mapping[str, Any]]], tokenizer: Any) -> dict[str, list[torch.Tensor]]:
    """Stage 1's ``"<image>" + caption + sep``: the image ignored, the caption and ``sep`` supervised. As upstream,
    ``sep`` is the default conversation's, whatever its style."""
    plain = dataclasses.replace(conversation.conv_templates["plain"], sep=conversation.default_conversation.sep)
    return preprocess_with(sources, tokenizer, plain)


def _tokenize_fn(strings: Sequence[str], tokenizer: Any) -> dict[str, list[Any]]:
    """Each string's ids (truncated to ``tokenizer.model_max_length``) and its count of non-pad tokens; ``labels`` is
    the same list as ``input_ids``, ``labels_lens`` as ``input_ids_lens``, as upstream returns them."""
    ids = [
        tokenizer(text, return_tensors="pt", padding="longest", max_length=tokenizer.model_max_length, truncation=True).input_ids[0]
        for text in strings
    ]
    pad = tokenizer.pad_token_id
    lengths = [len(item) if pad is None else int(item.ne(pad).sum()) for item in ids]
    return {"input_ids": ids, "labels": ids, "input_ids_lens": lengths, "labels_lens": lengths}


def _mask_targets(target: torch.Tensor, tokenized_lens: Sequence[int], speakers: Sequence[str]) -> None:
    """Ignore, in place, the header (``tokenized_lens[0]`` tokens) and each human sentence except its first two
    tokens (upstream's v0 rule: the sentences follow the header, one length each)."""
    start = tokenized_lens[0]
    target[:start] = IGNORE_INDEX
    for length, speaker in zip(tokenized_lens[1:], speakers):
        if speaker == "human":
            target[start + 2:start + length] = IGNORE_INDEX
        start += length


def _add_speaker_and_signal(header: str, source: Sequence[MutableSequence[Any] | dict[str, Any]], get_conversation: bool = True) -> str:
    """Upstream's v0 text: every sentence's ``value`` becomes ``"### <role>: <value>\\n"`` in place (``human`` and
    ``gpt`` mapped to the default conversation's roles, anything else to ``unknown``); returns ``header``, the
    sentences (with ``get_conversation``) and a final ``"### "``."""
    roles = {"human": conversation.default_conversation.roles[0], "gpt": conversation.default_conversation.roles[1]}
    text = header
    for sentence in source:
        role = roles.get(str(sentence["from"]).lower(), "unknown")
        sentence["value"] = f"{_BEGIN_SIGNAL}{role}: {sentence['value']}{_END_SIGNAL}"
        if get_conversation:
            text += sentence["value"]
    return text + _BEGIN_SIGNAL


class LazySupervisedDataset(supervised_data.LazySupervisedDataset):
    """Upstream's constructor, ``LazySupervisedDataset(data_path, tokenizer, data_args)``: the records of
    ``data_path`` (checked first, one sentence per bad record), rendered in the default conversation, with the image
    settings upstream's ``train()`` puts on ``data_args`` (``image_folder``, ``image_aspect_ratio``,
    ``image_processor``, ``mm_use_im_start_end``)."""

    def __init__(self, data_path: str, tokenizer: Any, data_args: Any) -> None:
        conv = conversation.default_conversation
        super().__init__(read_records(data_path, data_args, conv), tokenizer, conv, **dataset_options(data_args))
        self.data_args = data_args


class DataCollatorForSupervisedDataset(supervised_data.DataCollatorForSupervisedDataset):
    """Upstream's constructor, ``DataCollatorForSupervisedDataset(tokenizer)``: pads with the tokenizer's pad id and
    truncates to its ``model_max_length``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        super().__init__(tokenizer.pad_token_id, tokenizer.model_max_length)


__all__ = [
    "DataCollatorForSupervisedDataset",
    "LazySupervisedDataset",
    "_add_speaker_and_signal",
    "_mask_targets",
    "_tokenize_fn",
    "preprocess_llama_2",
    "preprocess_mpt",
    "preprocess_plain",
    "preprocess_v1",
]
