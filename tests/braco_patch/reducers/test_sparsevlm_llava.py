"""SparseVLM through the real seam on a tiny LLaVA checkpoint loaded the way users load it (the ``tiny`` fixture of
conftest.py): cached decoding equals full re-forwards, each layer's key/value cache holds the per-layer counts the
schedule gives, a padded batch equals each prompt alone, and the reducer changes what the LLM computes."""

from __future__ import annotations

import pytest

from braco_patch.reducers.sparsevlm import visual_tokens_per_layer

from .seam import IMAGE_TOKENS, LAYERS, ReducerSeamChecks, cached_image_tokens, refusal

NAME = "sparsevlm_k64_l0_1_2"  # the release's schedule for 64, sparsifying after layers 0, 1, 2


class TestSeam(ReducerSeamChecks):
    """The checks every reducer passes through the seam, on this module's type."""

    NAME = NAME


def test_each_layers_cache_holds_the_schedules_count(tiny):
    # 36 in: stage 0 keeps 35 + 1 recycled, stage 1 keeps 30 + 1, stage 2 keeps 17 + 1 (by hand from the schedule).
    assert cached_image_tokens(tiny, NAME) == [36, 36, 31, 18]
    assert visual_tokens_per_layer(64, LAYERS, IMAGE_TOKENS, (0, 1, 2)) == (36, 36, 31, 18)


@pytest.mark.parametrize(
    "name, message",
    [
        ("sparsevlm_k100", "schedules are K = [64, 96, 128, 192]"),
        ("sparsevlm_k64_l1_0_2", "three increasing layers"),
        ("sparsevlm_k64", "the LLM has layers 0..3"),
    ],
)
def test_impossible_names_are_one_sentence(tiny, name, message):
    said = refusal(tiny[1], name)
    assert message in said and "\n" not in said
