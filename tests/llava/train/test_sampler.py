"""``group_by_modality_length``: image and text-only samples in separate batches; deterministic per seed/epoch."""

from __future__ import annotations

import pytest

from llava.train.llava_trainer import LengthGroupedSampler, split_evenly

BATCH, WORLD = 4, 2  # megabatch of 8


def _lengths(images: int, texts: int) -> list[int]:
    return [10 + (i * 7) % 23 for i in range(images)] + [-(5 + (i * 5) % 11) for i in range(texts)]


def test_every_index_once():
    lengths = _lengths(37, 13)
    order = list(LengthGroupedSampler(BATCH, WORLD, lengths, group_by_modality=True, seed=3))
    assert sorted(order) == list(range(len(lengths)))


def test_megabatches_do_not_mix_modalities_except_the_last():
    lengths = _lengths(37, 13)
    order = list(LengthGroupedSampler(BATCH, WORLD, lengths, group_by_modality=True, seed=3))
    megabatches = [order[i : i + BATCH * WORLD] for i in range(0, len(order), BATCH * WORLD)]
    mixed = [index for index, mb in enumerate(megabatches) if len({lengths[i] > 0 for i in mb}) > 1]
    assert set(mixed) <= {0, len(megabatches) - 1}  # only the leftovers of both modalities mix


def test_each_megabatch_is_sorted_longest_first_before_splitting():
    lengths = _lengths(32, 0)
    order = list(LengthGroupedSampler(BATCH, WORLD, lengths, seed=1))
    for start in range(0, len(order), BATCH * WORLD):
        chunk = order[start : start + BATCH * WORLD]
        groups = [chunk[:BATCH], chunk[BATCH:]]
        # the two per-process batches have similar total length and each holds BATCH samples
        totals = [sum(lengths[i] for i in group) for group in groups]
        assert max(totals) - min(totals) <= max(lengths)


def test_order_depends_only_on_seed_and_epoch():
    lengths = _lengths(20, 20)
    first = LengthGroupedSampler(BATCH, WORLD, lengths, group_by_modality=True, seed=5)
    again = LengthGroupedSampler(BATCH, WORLD, lengths, group_by_modality=True, seed=5)
    assert list(first) == list(again)
    again.set_epoch(1)
    assert list(first) != list(again)


def test_zero_length_is_refused():
    with pytest.raises(ValueError, match="non-zero length"):
        LengthGroupedSampler(BATCH, WORLD, [3, 0, -2])


def test_split_evenly_balances_totals_and_counts():
    lengths = [9, 8, 7, 6, 5, 4, 3, 2]
    groups = split_evenly(list(range(8)), lengths, 2)
    assert [len(g) for g in groups] == [4, 4]
    assert sorted(i for g in groups for i in g) == list(range(8))
    totals = [sum(lengths[i] for i in g) for g in groups]
    assert abs(totals[0] - totals[1]) <= 2
    assert split_evenly([0, 1, 2], lengths, 2) == [[0, 2], [1]]  # not divisible: round robin
