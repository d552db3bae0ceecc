"""The splice: a padded batch of token ids with ``<image>`` markers (``IMAGE_TOKEN_INDEX``, -200) and each image's
visual tokens → ``inputs_embeds``, labels, attention mask and position ids for the LLM.

The steps of :meth:`llava.model.llava_arch.LlavaMetaForCausalLM.prepare_inputs_labels_for_multimodal`: drop the
padding (:func:`unpadded_rows`), match the images to the markers (:func:`images_per_sample`), embed the text and
put the next image's tokens in at each marker (:func:`splice_batch`, :func:`splice_sample`; their labels are
``IGNORE_INDEX``), truncate, and re-pad on the left or right (:func:`pad_batch`, :func:`padded_outputs`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

from llava.constants import IGNORE_INDEX, IMAGE_TOKEN_INDEX

PADDING_SIDES = ("left", "right")


def check_no_image_markers(input_ids: torch.Tensor) -> None:
    """Raise ``ValueError`` if ``input_ids`` holds ``<image>`` markers, for a call that was given no images."""
    if bool((input_ids == IMAGE_TOKEN_INDEX).any()):
        count = int((input_ids == IMAGE_TOKEN_INDEX).sum())
        raise ValueError(
            f"the prompts hold {count} <image> markers but no images were given; pass images= or "
            "remove '<image>' from the prompt"
        )


def unpadded_rows(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, labels: torch.Tensor | None
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each sample's ids ``[T_i]`` and labels ``[T_i]`` without padding (``attention_mask`` 0, on either side).

    ``labels`` ``None`` gives rows of ``IGNORE_INDEX``; ``attention_mask`` ``None`` keeps every position.
    """
    keep = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    all_labels = labels if labels is not None else torch.full_like(input_ids, IGNORE_INDEX)
    id_rows = [ids[mask] for ids, mask in zip(input_ids, keep)]
    label_rows = [row[mask] for row, mask in zip(all_labels, keep)]
    return id_rows, label_rows


def images_per_sample(markers: Sequence[int], num_images: int) -> list[int]:
    """How many of the images each sample consumes, in batch order.

    One image per ``<image>`` marker. Upstream training also gives every text-only sample of a mixed batch a
    dummy image, which that sample consumes and drops; that layout is accepted too.

    Raises:
        ValueError: If the images cannot be matched to the markers.
    """
    total = sum(markers)
    if total == 0:
        raise ValueError(
            f"{num_images} image(s) were given but no prompt contains an <image> marker (token id "
            f"{IMAGE_TOKEN_INDEX}); put '<image>' in the prompt or pass images=None"
        )
    if num_images == total:
        return list(markers)
    text_only = sum(1 for count in markers if count == 0)
    if text_only and num_images == total + text_only:
        return [count if count else 1 for count in markers]
    if num_images < total:
        raise ValueError(
            f"the prompts hold {total} <image> markers but only {num_images} image(s) were given; "
            "give one image per <image> marker"
        )
    raise ValueError(
        f"{num_images} images were given for {total} <image> markers; give one image per <image> marker"
    )


def prompts_per_image(
    id_rows: Sequence[torch.Tensor], label_rows: Sequence[torch.Tensor], taken: Sequence[int], embed_tokens: nn.Module
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each image's prompt: its sample's ids that are not training targets, image markers removed, embedded.

    Args:
        id_rows: Unpadded ids ``[T_i]`` per sample.
        label_rows: Their labels ``[T_i]``.
        taken: Images each sample consumes (:func:`images_per_sample`).
        embed_tokens: The LLM's input embedding.

    Returns:
        ``(embeds [L_i, hidden] per image, ids [L_i] per image)``, in image order.
    """
    embeds: list[torch.Tensor] = []
    ids: list[torch.Tensor] = []
    for row, row_labels, take in zip(id_rows, label_rows, taken):
        text = row[(row != IMAGE_TOKEN_INDEX) & (row_labels == IGNORE_INDEX)]
        embedded = embed_tokens(text)
        embeds.extend([embedded] * take)
        ids.extend([text] * take)
    return embeds, ids


def splice_batch(
    id_rows: Sequence[torch.Tensor],
    label_rows: Sequence[torch.Tensor],
    features: Sequence[torch.Tensor],
    markers: Sequence[int],
    taken: Sequence[int],
    embed_tokens: nn.Module,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Splice every sample: sample i uses ``markers[i]`` of the next ``taken[i]`` images (a dummy image is dropped).

    Returns:
        ``([T'_i, D] embeddings, [T'_i] labels)`` per sample (see :func:`splice_sample`).
    """
    sequences: list[torch.Tensor] = []
    sequence_labels: list[torch.Tensor] = []
    cursor = 0
    for ids, row_labels, count, take in zip(id_rows, label_rows, markers, taken):
        sample_features = features[cursor : cursor + count]
        cursor += take
        embeds, spliced_labels = splice_sample(ids, row_labels, sample_features, embed_tokens)
        sequences.append(embeds)
        sequence_labels.append(spliced_labels)
    return sequences, sequence_labels


def splice_sample(
    ids: torch.Tensor, labels: torch.Tensor, features: Sequence[torch.Tensor], embed_tokens: nn.Module
) -> tuple[torch.Tensor, torch.Tensor]:
    """One unpadded sample: ``[T]`` ids with len(features) markers → ``[T - markers + ΣK, D]`` and labels.

    The text between markers is embedded in one call; each image's ``[K, D]`` features are cast to the text
    embeddings' device and dtype and labelled ``IGNORE_INDEX``.
    """
    positions = torch.nonzero(ids == IMAGE_TOKEN_INDEX).flatten().tolist()
    bounds = [-1, *positions, ids.shape[0]]
    text_ids = [ids[start + 1 : end] for start, end in zip(bounds[:-1], bounds[1:])]
    text_labels = [labels[start + 1 : end] for start, end in zip(bounds[:-1], bounds[1:])]
    text_embeds = embed_tokens(torch.cat(text_ids)).split([chunk.shape[0] for chunk in text_ids])
    pieces: list[torch.Tensor] = []
    piece_labels: list[torch.Tensor] = []
    for index, (chunk, chunk_labels) in enumerate(zip(text_embeds, text_labels)):
        pieces.append(chunk)
        piece_labels.append(chunk_labels)
        if index < len(positions):
            visual = features[index].to(device=chunk.device, dtype=chunk.dtype)
            pieces.append(visual)
            piece_labels.append(torch.full((visual.shape[0],), IGNORE_INDEX, dtype=labels.dtype, device=labels.device))
    return torch.cat(pieces), torch.cat(piece_labels)


def visual_flags(
    id_rows: Sequence[torch.Tensor], features: Sequence[torch.Tensor], markers: Sequence[int], taken: Sequence[int],
    max_length: int | None, side: str,
) -> torch.Tensor:
    """``[B, T]`` bool, True at the visual tokens of the batch :func:`splice_batch` and :func:`pad_batch` make of the
    same rows (truncated to ``max_length``, padded on ``side``): the roles an in-LLM reducer reads."""
    rows: list[torch.Tensor] = []
    cursor = 0
    for ids, count, take in zip(id_rows, markers, taken):
        flags = torch.zeros(ids.shape[0] - count + sum(f.shape[0] for f in features[cursor : cursor + count]), dtype=torch.bool)
        offset = 0
        for index, position in enumerate(torch.nonzero(ids == IMAGE_TOKEN_INDEX).flatten().tolist()):
            start = position - index + offset
            size = features[cursor + index].shape[0]
            flags[start : start + size] = True
            offset += size
        rows.append(flags[:max_length] if max_length is not None else flags)
        cursor += take
    length = max(row.shape[0] for row in rows)
    out = torch.zeros((len(rows), length), dtype=torch.bool)
    for index, row in enumerate(rows):
        span = slice(length - row.shape[0], length) if side == "left" else slice(0, row.shape[0])
        out[index, span] = row
    return out.to(id_rows[0].device)


def pad_batch(
    sequences: Sequence[torch.Tensor], labels: Sequence[torch.Tensor], side: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad ``[T_i, D]`` sequences to ``[B, T, D]`` with zeros on ``side``.

    Returns:
        ``(embeds [B, T, D], labels [B, T] (IGNORE_INDEX on padding), mask [B, T] bool,
        positions [B, T] (0..T_i-1 on tokens, 0 on padding))``.
    """
    batch = len(sequences)
    length = max(seq.shape[0] for seq in sequences)
    first = sequences[0]
    embeds = first.new_zeros((batch, length, first.shape[-1]))
    out_labels = torch.full((batch, length), IGNORE_INDEX, dtype=labels[0].dtype, device=labels[0].device)
    mask = torch.zeros((batch, length), dtype=torch.bool, device=first.device)
    positions = torch.zeros((batch, length), dtype=torch.long, device=first.device)
    for row, (seq, seq_labels) in enumerate(zip(sequences, labels)):
        size = seq.shape[0]
        span = slice(length - size, length) if side == "left" else slice(0, size)
        embeds[row, span] = seq
        out_labels[row, span] = seq_labels
        mask[row, span] = True
        positions[row, span] = torch.arange(size, device=first.device)
    return embeds, out_labels, mask, positions


def padded_outputs(
    sequences: Sequence[torch.Tensor],
    sequence_labels: Sequence[torch.Tensor],
    side: str,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    labels: torch.Tensor | None,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """Pad the spliced samples and shape the outputs like the inputs the caller gave.

    Args:
        sequences, sequence_labels: ``[T_i, D]`` and ``[T_i]`` per sample.
        side: ``"left"`` or ``"right"``.
        attention_mask, position_ids, labels: The caller's inputs, to decide which outputs exist and their dtypes.

    Returns:
        ``(position_ids, attention_mask, inputs_embeds [B, T, D], labels)``. ``labels`` is ``None`` if it was;
        ``position_ids`` is ``None`` if it was and the padding is on the right; ``attention_mask`` is ``None`` if
        it was and no padding was needed.

    Raises:
        ValueError: If ``side`` is not ``left`` or ``right``.
    """
    if side not in PADDING_SIDES:
        raise ValueError(f"unknown padding side {side!r}; expected 'left' or 'right'")
    embeds, new_labels, new_mask, new_positions = pad_batch(sequences, sequence_labels, side)
    padded = bool((~new_mask).any())
    if attention_mask is not None:
        out_mask = new_mask.to(attention_mask.dtype)
    else:
        out_mask = new_mask.long() if padded else None
    out_positions = new_positions if position_ids is not None or side == "left" else None
    if out_positions is not None and position_ids is not None:
        out_positions = out_positions.to(position_ids.dtype)
    return out_positions, out_mask, embeds, new_labels if labels is not None else None


__all__ = [
    "PADDING_SIDES", "check_no_image_markers", "images_per_sample", "pad_batch", "padded_outputs", "prompts_per_image",
    "splice_batch", "splice_sample", "unpadded_rows", "visual_flags",
]
