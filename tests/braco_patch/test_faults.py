"""Bad Braco settings and inputs (issue 14, items 6, 7 and 12): one sentence or a correct result, never a raw
torch error or a silently wrong token count."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch

from braco_patch.coder import BracoCoder
from braco_patch.config import BracoConfig, fields_from_mm_keys
from braco_patch.cost.cli import main as cost_main
from braco_patch.demo import main as demo_main
from braco_patch.llava_plugin import braco_config_from_model_config
from braco_patch.residual import select

# ---------------------------------------------------------------------------------------------- config values


@pytest.mark.parametrize("changes, message", [
    ({"post_concat_norm_eps": -1e-5}, r"post_concat_norm_eps must be a finite number > 0, got -1e-05"),
    ({"post_concat_norm_eps": 0.0}, r"post_concat_norm_eps must be a finite number > 0"),
    ({"post_concat_norm_eps": "1e-5"}, r"post_concat_norm_eps must be a finite number > 0, got '1e-5'"),
    ({"temperature": "0.8"}, r"temperature must be a finite number > 0, got '0.8'"),
    ({"detach_dct": "false"}, r"detach_dct must be a boolean \(True or False\), got 'false'"),
    ({"residual_norm": 0}, r"residual_norm must be a boolean"),
    ({"pe_scale_init": True}, r"pe_scale_init must be a finite number, got True"),
    ({"residual_scale_init": math.inf}, r"residual_scale_init must be a finite number, got inf"),
    ({"scorer_hidden_mult": math.nan}, r"scorer_hidden_mult must be a finite number, got nan"),
    ({"rotation_seed": -1}, r"rotation_seed must be >= 0, got -1"),
])
def test_bad_values_are_one_sentence(changes, message):
    with pytest.raises(ValueError, match=message):
        BracoConfig(**changes)


@pytest.mark.parametrize("stored, field, expected", [
    ("false", "detach_dct", False), ("no", "detach_dct", False), ("True", "detach_dct", True),
    ("0", "post_concat_norm", False), ("yes", "residual_norm", True), ("off", "include_raw", False),
])
def test_string_booleans_in_config_json_read_as_booleans(stored, field, expected):
    # the plugin parses config.json's words by the project's one rule before the core sees them
    key = {"detach_dct": "mm_fourier_detach_dct", "post_concat_norm": "mm_fourier_post_concat_norm",
           "residual_norm": "mm_fourier_spatial_use_norm", "include_raw": "mm_fourier_polar_include_raw"}[field]
    assert getattr(braco_config_from_model_config(SimpleNamespace(**{key: stored}), "braco_c2s3"), field) is expected


@pytest.mark.parametrize("key, stored, field, expected", [
    ("mm_fourier_use_polar_pe", "false", "embedding", "none"),
    ("mm_fourier_use_polar_pe", "true", "embedding", "polar"),
    ("mm_fourier_low_idct", "false", "coordinates", "coef"),
    ("mm_fourier_low_idct", "no", "coordinates", "coef"),
    ("mm_fourier_low_idct", "y", "coordinates", "idct"),
])
def test_official_switches_read_string_booleans(key, stored, field, expected):
    cfg = braco_config_from_model_config(SimpleNamespace(mm_fourier_C=2, mm_fourier_spatial_keep=3, **{key: stored}), "fourier_mlp2x_gelu")
    assert getattr(cfg, field) == expected


def test_a_non_boolean_switch_is_named():
    with pytest.raises(ValueError, match=r"mm_fourier_low_idct must be a boolean .*got 'maybe'"):
        braco_config_from_model_config(SimpleNamespace(mm_fourier_low_idct="maybe"), "fourier_mlp2x_gelu")


@pytest.mark.parametrize("stored", ["false", 0, 1.0])
def test_the_core_takes_only_real_booleans(stored):
    # a word reaching the core unparsed is a bug at the boundary: refused, never read as true
    with pytest.raises(ValueError, match=r"mm_fourier_detach_dct must be a boolean \(True or False\)"):
        fields_from_mm_keys({"mm_fourier_detach_dct": stored})


# ---------------------------------------------------------------------------------------------- budgets and grids


@pytest.mark.parametrize("cutoff, residual, grid, most", [(3, 99, 4, 7), (2, 13, 4, 12), (1, 9, 3, 8), (4, 1, 4, 0)])
def test_budget_larger_than_the_grid_is_refused(cutoff, residual, grid, most):
    coder = BracoCoder(dim=8, cutoff=cutoff, residual_tokens=residual)
    with pytest.raises(ValueError, match=rf"outputs C²\+S = {cutoff**2 + residual} tokens but the {grid}x{grid} grid has only "
                                         rf"{grid * grid}; with C={cutoff}, S must be at most {most}"):
        coder(torch.randn(1, grid * grid, 8))
    with pytest.raises(ValueError, match="S must be at most"):
        BracoCoder(dim=8, cutoff=cutoff, residual_tokens=residual, grid=(grid, grid))


def test_a_budget_equal_to_the_grid_still_runs():
    assert BracoCoder(dim=8, cutoff=3, residual_tokens=7)(torch.randn(2, 16, 8)).shape == (2, 16, 8)


# ---------------------------------------------------------------------------------------------- inputs


@pytest.fixture
def coder() -> BracoCoder:
    torch.manual_seed(0)
    return BracoCoder(dim=8, cutoff=2, residual_tokens=3).eval()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_tokens_propagate_as_nan_instead_of_an_index_error(coder, bad):
    x = torch.randn(3, 16, 8)
    x[1, 5, 2] = bad
    y = coder(x)
    assert y.shape == (3, 7, 8)
    assert torch.isnan(y[1, 4:]).all()  # residual tokens of the bad image
    assert torch.isfinite(y[[0, 2]]).all()  # the other images are unaffected
    torch.testing.assert_close(y[[0, 2]], coder(x[[0, 2]]))


def test_non_finite_scorer_weights_propagate_as_nan(coder):
    with torch.no_grad():
        linear = next(m for m in coder.spatial_scorer if isinstance(m, torch.nn.Linear))
        linear.weight[0, 0] = math.nan
    y = coder(torch.randn(2, 16, 8))
    assert torch.isnan(y[:, 4:]).all()


@pytest.mark.parametrize("name", ["sparsemax", "softmax", "entmax15", "entmax:1.3"])
def test_selection_rows_with_nan_are_nan_and_the_rest_sum_to_one(name):
    logits = torch.randn(2, 3, 10, dtype=torch.float64)
    logits[0, 1, 4] = math.nan
    logits[1, 2, 0] = math.inf
    w = select(logits, torch.tensor(0.8), name)
    assert torch.isnan(w[0, 1]).all() and torch.isnan(w[1, 2]).all()
    good = torch.ones(2, 3, dtype=torch.bool)
    good[0, 1] = good[1, 2] = False
    torch.testing.assert_close(w[good].sum(-1), torch.ones(int(good.sum()), dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_float_dtypes_are_cast_to_the_coders(coder, dtype):
    x = torch.randn(2, 16, 8)
    expected = coder(x)
    y = coder(x.to(dtype))
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, coder(x.to(dtype).float()))
    torch.testing.assert_close(y, expected, atol=0.05, rtol=0.05)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.uint8])
def test_integer_tokens_are_one_sentence(coder, dtype):
    with pytest.raises(ValueError, match=rf"expected floating-point tokens, got dtype {dtype}"):
        coder(torch.ones(1, 16, 8, dtype=dtype))


@pytest.mark.parametrize("tokens", [16, 17])
def test_an_empty_batch_gives_an_empty_result(coder, tokens):
    y = coder(torch.randn(0, tokens, 8))
    assert y.shape == (0, 7, 8) and y.dtype == torch.float32


# ---------------------------------------------------------------------------------------------- commands


def _cost_error(argv, capsys) -> str:
    """The one line ``braco cost`` prints for a user error (exit code 2, nothing on stdout)."""
    with pytest.raises(SystemExit) as exit_info:
        cost_main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == ""  # refused before any table is printed
    assert captured.err.startswith("braco cost: error: ") and captured.err.count("\n") == 1
    return captured.err


@pytest.mark.parametrize("argv, message", [
    (["--vision-layers", "999"], r"--vision-layers 999 exceeds the 24 layers of the vision tower of llava-v1.5-7b; accepted: 1 to 24"),
    (["--measure", "--layers", "33"], r"--layers 33 exceeds the 32 layers of the LLM .*accepted: 1 to 32"),
    (["--prompt-tokens", "-1"], r"--prompt-tokens must be >= 0, got -1"),
    (["--measure", "--warmup", "-5"], r"--warmup must be >= 0, got -5"),
    (["--projector", "braco_c3s600", "--input-tokens", "576"], r"projector c3s600 outputs 609 tokens but the 24x24 grid"),
])
def test_cost_refuses_out_of_range_values(argv, message, capsys):
    assert re.search(message, _cost_error(argv, capsys))


def test_cost_refuses_a_budget_beyond_a_small_grid(capsys):
    assert re.search(r"budget 580 \(c23s51\) outputs 580 tokens but the 24x24 grid has only 576; with C=23, S must be at most 47",
                     _cost_error(["--budgets", "580", "--input-tokens", "576"], capsys))


@pytest.mark.parametrize("argv, message", [
    (["--patch", "0"], "--patch: expected a positive integer, got 0"),
    (["--budgets", "0"], "--budgets: expected a positive integer, got 0"),
    (["--budgets", "4", "-3"], "--budgets: expected a positive integer, got -3"),
    (["--image-size", "0"], "--image-size/--image_size: expected a positive integer, got 0"),
    (["--patch", "400"], "--patch 400 is larger than --image-size 336; accepted: 1 to 336"),
])
def test_demo_refuses_zero_and_oversized_values_in_one_line(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo_main(argv + ["--out", str(tmp_path / "demo")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()


def test_demo_refuses_a_budget_beyond_the_grid(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo_main(["--image-size", "56", "--budgets", "20", "--out", str(tmp_path / "demo")])
    assert exit_info.value.code == 2
    assert re.search(r"budget 20 \(c3s11\) does not fit the 4x4 grid of 16 tokens; accepted budgets: 1 to 16", capsys.readouterr().err)
