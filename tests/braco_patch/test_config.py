"""BracoConfig: presets, budget allocation, validation and config.json keys."""

import pytest

from braco_patch import BRACO_BUDGETS, BracoConfig, allocate_budget
from braco_patch.config import MM_KEYS, fields_from_mm_keys, to_mm_keys


def test_paper_table_allocations():
    # Paper App. "Main Braco configurations": 4 -> c1s3, 9 -> c2s5, 16 -> c3s7, 25 -> c4s9 (idct only at 25).
    expected = {4: (1, 3, "coef"), 9: (2, 5, "coef"), 16: (3, 7, "coef"), 25: (4, 9, "idct")}
    for k, (c, s, mode) in expected.items():
        cfg = BracoConfig.from_budget(k)
        assert (cfg.cutoff, cfg.residual_tokens, cfg.resolved_coordinates) == (c, s, mode)
        assert cfg.output_tokens == k
    assert set(BRACO_BUDGETS) == set(expected)


@pytest.mark.parametrize("k, c, s", [(1, 1, 0), (2, 1, 1), (10, 2, 6), (36, 5, 11), (64, 7, 15)])
def test_allocation_rule_for_other_budgets(k, c, s):
    assert allocate_budget(k) == (c, s)
    assert c * c + s == k


def test_defaults_are_the_paper_main_configuration():
    cfg = BracoConfig()
    assert (cfg.cutoff, cfg.residual_tokens, cfg.embedding, cfg.num_freqs, cfg.include_raw) == (3, 7, "polar", 8, False)
    assert (cfg.prior, cfg.selection, cfg.scorer_hidden_mult, cfg.temperature, cfg.post_concat_norm) == ("grad", "sparsemax", 1, 0.8, False)
    assert cfg.resolved_coordinates == "coef"


@pytest.mark.parametrize(
    "name, fields",
    [
        ("c3s7", (3, 7, "auto")),
        ("braco_c4s9", (4, 9, "auto")),
        ("c4s9_coef", (4, 9, "coef")),
        ("c2s5_vanilla", (2, 5, "coef")),
        ("c2s5_randrot", (2, 5, "randrot")),
        ("k25", (4, 9, "idct")),
        ("braco_k10", (2, 6, "auto")),
    ],
)
def test_from_name(name, fields):
    cfg = BracoConfig.from_name(name)
    assert (cfg.cutoff, cfg.residual_tokens, cfg.coordinates) == fields


def test_mm_keys_round_trip_and_official_names():
    cfg = BracoConfig.from_name("c4s9", prior_weight_init=0.3, temp_start=2.0, temp_end=1.2, temp_steps=2180)
    keys = to_mm_keys(cfg)
    assert keys["mm_fourier_C"] == 4 and keys["mm_fourier_spatial_keep"] == 9
    assert keys["mm_fourier_low_idct"] is True and keys["mm_fourier_use_polar_pe"] is True
    assert keys["mm_fourier_K_high"] == 0 and keys["mm_fourier_spatial_method"] == "learned"
    assert BracoConfig(**fields_from_mm_keys(keys)) == cfg
    assert all(k.startswith(("mm_fourier_", "mm_braco_")) for k in keys)
    assert set(MM_KEYS.values()) == set(BracoConfig.__dataclass_fields__)


def test_official_keys_without_our_own():
    official = {"mm_fourier_C": 4, "mm_fourier_spatial_keep": 9, "mm_fourier_low_idct": True, "mm_fourier_use_polar_pe": False}
    cfg = BracoConfig(**fields_from_mm_keys(official))
    assert cfg.resolved_coordinates == "idct" and cfg.embedding == "none"
    with pytest.raises(ValueError, match="mm_fourier_K_high must be 0"):
        fields_from_mm_keys({"mm_fourier_K_high": 4})
    with pytest.raises(ValueError, match="mm_fourier_spatial_method must be 'learned'"):
        fields_from_mm_keys({"mm_fourier_spatial_method": "random"})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cutoff": -1}, "cutoff C must be >= 0"),
        ({"cutoff": 2.5}, "cutoff must be an integer"),
        ({"embedding": "rope"}, "unknown embedding 'rope'"),
        ({"prior": "edges"}, "unknown spatial prior 'edges'"),
        ({"temp_schedule": "step"}, "unknown temperature schedule 'step'"),
        ({"temp_start": float("inf")}, "temp_start must be a finite number > 0"),
        ({"temperature": 0}, "temperature must be a finite number > 0"),
        ({"num_freqs": 0}, "num_freqs must be >= 1"),
    ],
)
def test_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BracoConfig(**kwargs)
