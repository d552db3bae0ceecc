"""Braco's name grammar in its two homes agrees: the core's parser (braco_patch/config.py, which imports no llava)
and the plugin's name forms on the plugin API (braco_patch/llava_plugin.py), from which the registry's patterns, the
spellings and the budget names are derived."""

from __future__ import annotations

import itertools
import re

from braco_patch.config import NAME_PATTERN, PROJECTOR_PREFIX, BracoConfig, parse_name
from braco_patch.coordinates import COORDINATE_ALIASES, COORDINATE_MODES
from braco_patch.llava_plugin import ALLOCATION_FORM, BUDGET_FORM, OFFICIAL_FORM, PLUGIN


def _names() -> list[str]:
    suffixes = ["", *(f"_{mode}" for mode in (*COORDINATE_MODES, *COORDINATE_ALIASES)), "_fourier", "_"]
    core = [f"c{c}s{s}{suffix}" for c, s, suffix in itertools.product(("0", "3", "12"), ("0", "7"), suffixes)]
    core += ["k16", "k4", "k", "c3", "s7", "c3s7k16", "k16_idct", "c-1s7", "C3S7", ""]
    return [PROJECTOR_PREFIX + name for name in core] + ["fourier_mlp2x_gelu", "braco_fourier_mlp2x_gelu", "c3s7"]


def test_the_plugins_forms_accept_what_the_core_parses():
    for name in _names():
        core = NAME_PATTERN.fullmatch(name.removeprefix(PROJECTOR_PREFIX)) is not None and name.startswith(PROJECTOR_PREFIX)
        plugin = any(re.fullmatch(form.regex, name) for form in (ALLOCATION_FORM, BUDGET_FORM))
        assert plugin == core, name


def test_the_registered_types_are_the_forms():
    assert [entry.spelling for entry in PLUGIN.projectors] == [
        "braco_c{C}s{S}[_coef|_idct|_randrot]", "braco_k{K}", "fourier_mlp{N}x_gelu"]
    assert [entry.form for entry in PLUGIN.projectors] == [ALLOCATION_FORM, BUDGET_FORM, OFFICIAL_FORM]


def test_a_formatted_name_parses_to_the_same_allocation():
    for cutoff, residual in ((1, 3), (3, 7), (4, 9)):
        name = ALLOCATION_FORM.format(C=cutoff, S=residual)
        fields, _ = parse_name(name)
        assert (fields["cutoff"], fields["residual_tokens"]) == (cutoff, residual)
    for budget in (4, 9, 16, 25, 36):
        assert PLUGIN.budget_types(budget) == [BUDGET_FORM.format(K=budget)]
        assert BracoConfig.from_name(BUDGET_FORM.format(K=budget)).output_tokens == budget
