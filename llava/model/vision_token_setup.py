"""Upstream's image tokens in the vocabulary: ``<im_patch>`` (``mm_use_im_patch_token``) and ``<im_start>`` /
``<im_end>`` (``mm_use_im_start_end``), added to the tokenizer with the embeddings resized to match.

The body of :meth:`llava.model.llava_arch.LlavaMetaForCausalLM.initialize_vision_tokenizer`; the training flags
and the stage-1 file layout (``model.embed_tokens.weight`` beside the projector) are upstream's.
"""

from __future__ import annotations

from typing import Any

import torch

from llava.constants import DEFAULT_IM_END_TOKEN, DEFAULT_IM_START_TOKEN, DEFAULT_IMAGE_PATCH_TOKEN

from .weights_io import load_weights_file

#: The stage-1 adapter entry that holds the input embeddings of the new tokens.
EMBED_TOKENS_KEY = "model.embed_tokens.weight"


def add_vision_tokens(model: Any, model_args: Any, tokenizer: Any) -> None:
    """Add ``<im_patch>`` / ``<im_start>``, ``<im_end>`` tokens as the training flags ask and resize the
    embeddings; new rows start at the mean of the existing ones.

    Args:
        model: The causal LM (``resize_token_embeddings``, ``get_input_embeddings``, ``get_output_embeddings``).
        model_args: Training ``ModelArguments`` (``mm_use_im_patch_token``, ``mm_use_im_start_end``,
            ``tune_mm_mlp_adapter``, ``pretrain_mm_mlp_adapter``).
        tokenizer: The tokenizer to add the tokens to.
    """
    if getattr(model_args, "mm_use_im_patch_token", False):
        tokenizer.add_tokens([DEFAULT_IMAGE_PATCH_TOKEN], special_tokens=True)
        model.resize_token_embeddings(len(tokenizer))
    if getattr(model_args, "mm_use_im_start_end", False):
        added = tokenizer.add_tokens([DEFAULT_IM_START_TOKEN, DEFAULT_IM_END_TOKEN], special_tokens=True)
        model.resize_token_embeddings(len(tokenizer))
        if added > 0:
            for weights in (model.get_input_embeddings().weight.data, model.get_output_embeddings().weight.data):
                weights[-added:] = weights[:-added].mean(dim=0, keepdim=True)
        if getattr(model_args, "tune_mm_mlp_adapter", False):
            model.get_input_embeddings().requires_grad_(True)
            model.get_output_embeddings().requires_grad_(False)
        adapter = getattr(model_args, "pretrain_mm_mlp_adapter", None)
        if adapter and added > 0:
            load_new_token_rows(model.get_input_embeddings().weight, adapter, added)
    elif getattr(model_args, "mm_use_im_patch_token", False) and getattr(model_args, "tune_mm_mlp_adapter", False):
        model.get_input_embeddings().requires_grad_(False)
        model.get_output_embeddings().requires_grad_(False)


@torch.no_grad()
def load_new_token_rows(target: torch.Tensor, adapter: str, added: int) -> None:
    """Copy the ``added`` newest input-embedding rows from a stage-1 adapter file into ``target``.

    Args:
        target: The input embedding matrix ``[vocab, hidden]``, written in place.
        adapter: The stage-1 file; its ``model.embed_tokens.weight`` is ``[vocab, hidden]`` or ``[added, hidden]``.
        added: How many tokens were just added (the last rows of ``target``).

    Raises:
        ValueError: If the file has no embeddings or they have another shape.
    """
    key = EMBED_TOKENS_KEY
    weights = load_weights_file(adapter)
    if key not in weights:
        raise ValueError(f"{adapter!r} has no {key!r}, which mm_use_im_start_end needs to restore the new tokens")
    source = weights[key]
    if source.shape == target.shape:
        target[-added:] = source[-added:].to(target)
    elif source.shape[0] == added:
        target[-added:] = source.to(target)
    else:
        raise ValueError(
            f"{key} in {adapter!r} has shape {tuple(source.shape)}; expected {tuple(target.shape)} "
            f"or ({added}, {target.shape[1]})"
        )


__all__ = ["EMBED_TOKENS_KEY", "add_vision_tokens", "load_new_token_rows"]
