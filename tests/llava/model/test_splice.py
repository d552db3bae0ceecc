"""The splice's pure steps (:mod:`llava.model.splice`) on hand-built batches, against a direct construction.

The reference builds each output row position by position from the unpadded ids (a text id → its embedding row,
a marker → the next image's rows), so it shares no slicing or padding code with the module.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from llava.constants import IGNORE_INDEX
from llava.constants import IMAGE_TOKEN_INDEX as IMG
from llava.model.splice import (
    check_no_image_markers,
    images_per_sample,
    pad_batch,
    padded_outputs,
    prompts_per_image,
    splice_batch,
    splice_sample,
    unpadded_rows,
)

DIM = 3


@pytest.fixture()
def embed() -> nn.Embedding:
    torch.manual_seed(0)
    return nn.Embedding(50, DIM)


def _direct(ids: list[int], labels: list[int], images: list[torch.Tensor], embed: nn.Embedding):
    """Row-by-row reference: ``([T', D] embeddings, [T'] labels)``."""
    rows, out_labels, queue = [], [], list(images)
    for token, label in zip(ids, labels):
        if token == IMG:
            image = queue.pop(0)
            rows.extend(image)
            out_labels.extend([IGNORE_INDEX] * image.shape[0])
        else:
            rows.append(embed.weight[token])
            out_labels.append(label)
    return torch.stack(rows), torch.tensor(out_labels)


def test_splice_sample_matches_a_direct_construction(embed) -> None:
    ids = [IMG, 4, 5, IMG, 6, IMG]  # markers at both ends and next to each other's text
    labels = [IGNORE_INDEX, IGNORE_INDEX, 5, IGNORE_INDEX, 6, IGNORE_INDEX]
    images = [torch.randn(2, DIM, dtype=torch.float64), torch.randn(3, DIM), torch.randn(1, DIM)]
    with torch.no_grad():
        embeds, out_labels = splice_sample(torch.tensor(ids), torch.tensor(labels), images, embed)
        expected, expected_labels = _direct(ids, labels, [image.float() for image in images], embed)
    assert embeds.dtype == torch.float32  # features take the text embeddings' dtype
    torch.testing.assert_close(embeds, expected, rtol=0, atol=0)
    assert torch.equal(out_labels, expected_labels)


@pytest.mark.parametrize("side", ["left", "right"])
def test_batch_splice_and_padding_match_a_direct_construction(embed, side) -> None:
    # Sample 0: two images, right-padded input; sample 1: text only with upstream's dummy image; sample 2: one image.
    input_ids = torch.tensor([[7, IMG, 8, IMG, 0, 0], [9, 10, 11, 0, 0, 0], [0, 0, 12, 13, IMG, 14]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1]])
    labels = torch.where(mask.bool() & (input_ids > 0), input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    images = [torch.randn(2, DIM), torch.randn(4, DIM), torch.randn(2, DIM), torch.randn(3, DIM)]

    id_rows, label_rows = unpadded_rows(input_ids, mask, labels)
    assert [row.tolist() for row in id_rows] == [[7, IMG, 8, IMG], [9, 10, 11], [12, 13, IMG, 14]]
    markers = [int((row == IMG).sum()) for row in id_rows]
    taken = images_per_sample(markers, len(images))
    assert taken == [2, 1, 1]
    with torch.no_grad():
        sequences, sequence_labels = splice_batch(id_rows, label_rows, images, markers, taken, embed)
        positions, out_mask, embeds, out_labels = padded_outputs(sequences, sequence_labels, side, mask, None, labels)

    direct = [
        _direct([7, IMG, 8, IMG], labels[0, :4].tolist(), images[:2], embed),
        _direct([9, 10, 11], labels[1, :3].tolist(), [], embed),  # the dummy image (images[2]) is dropped
        _direct([12, 13, IMG, 14], labels[2, 2:].tolist(), images[3:], embed),
    ]
    length = max(rows.shape[0] for rows, _ in direct)
    assert embeds.shape == (3, length, DIM) and out_mask.dtype == mask.dtype
    for row, (rows, row_labels) in enumerate(direct):
        size = rows.shape[0]
        start = length - size if side == "left" else 0
        torch.testing.assert_close(embeds[row, start : start + size], rows.detach(), rtol=0, atol=0)
        assert torch.equal(out_labels[row, start : start + size], row_labels)
        assert out_mask[row].tolist() == [int(start <= i < start + size) for i in range(length)]
        outside = [i for i in range(length) if not start <= i < start + size]
        assert (embeds[row, outside] == 0).all() and (out_labels[row, outside] == IGNORE_INDEX).all()
        if side == "left":
            assert positions[row, start:].tolist() == list(range(size)) and (positions[row, :start] == 0).all()
    if side == "right":
        assert positions is None  # none given, right padding: the LLM numbers the positions itself


def test_padded_outputs_follow_the_inputs_given() -> None:
    sequences = [torch.ones(2, DIM), torch.ones(2, DIM)]
    sequence_labels = [torch.zeros(2, dtype=torch.long)] * 2
    positions, mask, _, labels = padded_outputs(sequences, sequence_labels, "right", None, None, None)
    assert positions is None and mask is None and labels is None  # no padding needed, none given
    given_positions = torch.zeros(2, 5, dtype=torch.int32)
    uneven = [torch.ones(2, DIM), torch.ones(3, DIM)]
    uneven_labels = [torch.zeros(2, dtype=torch.long), torch.zeros(3, dtype=torch.long)]
    positions, mask, _, _ = padded_outputs(uneven, uneven_labels, "right", None, given_positions, None)
    assert positions.dtype == torch.int32 and positions.tolist() == [[0, 1, 0], [0, 1, 2]]
    assert mask.dtype == torch.long and mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    with pytest.raises(ValueError, match="unknown padding side 'up'; expected 'left' or 'right'"):
        padded_outputs(sequences, sequence_labels, "up", None, None, None)


def test_pad_batch_direct() -> None:
    sequences = [torch.full((1, 2), 5.0), torch.full((3, 2), 7.0)]
    embeds, labels, mask, positions = pad_batch(sequences, [torch.tensor([1]), torch.tensor([2, 3, 4])], "left")
    assert embeds[:, :, 0].tolist() == [[0.0, 0.0, 5.0], [7.0, 7.0, 7.0]]
    assert labels.tolist() == [[IGNORE_INDEX, IGNORE_INDEX, 1], [2, 3, 4]]
    assert mask.tolist() == [[False, False, True], [True, True, True]]
    assert positions.tolist() == [[0, 0, 0], [0, 1, 2]]


@pytest.mark.parametrize(
    "markers, images, taken",
    [([1, 2], 3, [1, 2]), ([1, 0, 1], 2, [1, 0, 1]), ([1, 0, 1], 3, [1, 1, 1]), ([0, 2, 0], 4, [1, 2, 1])],
)
def test_images_per_sample(markers, images, taken) -> None:
    assert images_per_sample(markers, images) == taken


@pytest.mark.parametrize(
    "markers, images, message",
    [
        ([0, 0], 1, "1 image\\(s\\) were given but no prompt contains an <image> marker"),
        ([2, 1], 2, "the prompts hold 3 <image> markers but only 2 image\\(s\\) were given"),
        ([1, 1], 3, "3 images were given for 2 <image> markers"),
    ],
)
def test_images_per_sample_rejects_a_mismatch(markers, images, message) -> None:
    with pytest.raises(ValueError, match=message):
        images_per_sample(markers, images)


def test_check_no_image_markers() -> None:
    check_no_image_markers(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="the prompts hold 2 <image> markers but no images were given"):
        check_no_image_markers(torch.tensor([[1, IMG], [IMG, 3]]))


def test_prompts_per_image_keep_non_target_text(embed) -> None:
    id_rows = [torch.tensor([3, IMG, 4, 5, 6]), torch.tensor([IMG, 7, IMG, 8])]
    label_rows = [torch.tensor([IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 5, 6]), torch.full((4,), IGNORE_INDEX)]
    with torch.no_grad():
        embeds, ids = prompts_per_image(id_rows, label_rows, [1, 2], embed)
    assert [row.tolist() for row in ids] == [[3, 4], [7, 8], [7, 8]]  # one entry per image: sample 1 has two
    for row, embedded in zip(ids, embeds):
        torch.testing.assert_close(embedded, embed.weight[row], rtol=0, atol=0)
