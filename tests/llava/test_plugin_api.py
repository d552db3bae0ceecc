"""The plugin API's name grammar and declarations (llava/plugin_api/): every spelling of a type comes from its form."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest
import torch.nn as nn

from llava.model.multimodal_projector import builtin
from llava.plugin_api import BuiltProjector, CompressorPlugin, CostModel, NameForm, ProjectorType


def _factory(context):
    return BuiltProjector(nn.Identity())


@pytest.mark.parametrize("template, regex, spelling", [
    ("linear", "linear", "linear"),
    ("mlp{N}x_gelu", r"mlp(?P<N>\d+)x_gelu", "mlp{N}x_gelu"),
    ("pool[_k{K}]", r"pool(?:_k(?P<K>\d+))?", "pool[_k{K}]"),
    ("b_c{C}s{S}[_coef|_idct|~_vanilla]", r"b_c(?P<C>\d+)s(?P<S>\d+)(?:_coef|_idct|_vanilla)?", "b_c{C}s{S}[_coef|_idct]"),
    ("v1.5-x", r"v1\.5\-x", "v1.5-x"),
])
def test_a_form_gives_its_pattern_and_spelling(template, regex, spelling):
    form = NameForm(template)
    assert (form.regex, form.spelling, str(form)) == (regex, spelling, spelling)


def test_parse_and_format_are_inverse():
    form = NameForm("b_c{C}s{S}[_coef|_idct|~_vanilla]")
    assert form.parse("b_c3s7") == {"C": 3, "S": 7} and form.parse("b_c3s7_vanilla") == {"C": 3, "S": 7}
    assert form.parse("b_c3s7_other") is None and form.parse("b_c3") is None
    assert form.format(C=3, S=7) == "b_c3s7" and form.parse(form.format(C=12, S=0)) == {"C": 12, "S": 0}
    optional = NameForm("pool[_k{K}]")
    assert (optional.format(), optional.format(K=16), optional.parse("pool"), optional.parse("pool_k16")) == ("pool", "pool_k16", {}, {"K": 16})


def test_the_type_of_a_budget_is_the_forms_K():
    assert NameForm("pool_k{K}").budget_name(16) == "pool_k16"
    assert NameForm("pool[_k{K}]").budget_name(9) == "pool_k9"
    assert NameForm("mqt_q{Q}").budget_name(16) is None  # Q queries, not a budget
    assert NameForm("x_c{C}_k{K}").budget_name(16) is None  # needs C too
    assert NameForm("linear").budget_name(4) is None


@pytest.mark.parametrize("template, words", [
    ("", "literal text"), ("a(b)", "cannot read '(b)'"), ("a b", "cannot read ' b'"), ("x[y", "cannot read '[y'"),
    ("{K}_{K}", "names a placeholder twice"), ("a[_{K}|_k{K}]", "names a placeholder twice"), ("a{}", "cannot read"),
])
def test_a_bad_form_is_one_sentence(template, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        NameForm(template)


@pytest.mark.parametrize("values", [{}, {"K": -1}, {"K": 1.5}, {"K": True}, {"K": 4, "Q": 2}])
def test_format_refuses_missing_or_bad_values(values):
    with pytest.raises(ValueError, match="takes whole numbers for"):
        NameForm("pool_k{K}").format(**values)


def test_a_named_type_derives_pattern_spelling_and_match_groups():
    entry = ProjectorType.named("pool_k{K}", _factory, "pooling", examples=("pool_k4",))
    assert (entry.pattern, entry.spelling, entry.form) == (r"pool_k(?P<K>\d+)", "pool_k{K}", NameForm("pool_k{K}"))
    match = re.fullmatch(entry.pattern, "pool_k12")
    assert match["K"] == match.group(1) == "12" and entry.budget_name(12) == "pool_k12"
    with pytest.raises(ValueError, match="do not match their projector pattern"):
        ProjectorType.named("pool_k{K}", _factory, examples=("pool_4",))
    assert ProjectorType.named("plain", _factory).examples == ("plain",)


def test_budget_types_come_from_the_forms_unless_declared():
    plugin = CompressorPlugin(name="pool", projectors=(
        ProjectorType.named("pool[_k{K}]", _factory, examples=("pool_k4",)),
        ProjectorType.named("pool_plus_k{K}", _factory, examples=("pool_plus_k4",)),
        ProjectorType.named("pool_q{Q}", _factory, examples=("pool_q4",)),
    ))
    assert plugin.takes_budget and plugin.budget_types(9) == ["pool_k9", "pool_plus_k9"]

    def only_squares(budget):
        if budget != 4:
            raise ValueError(f"pool gives 4 tokens, not {budget}")
        return ["pool_k4"]

    declared = CompressorPlugin(name="pool", projectors=plugin.projectors, cost=CostModel(types_at_budget=only_squares))
    assert declared.budget_types(4) == ["pool_k4"]
    with pytest.raises(ValueError, match="not 9"):
        declared.budget_types(9)
    assert not builtin.PLUGIN.takes_budget and builtin.PLUGIN.budget_types(16) == []  # mlp{N}x_gelu: N is a depth


@pytest.mark.parametrize("name", ["fourier_vlm", "Braco", "2pool", "", "pool-k"])
def test_a_method_has_one_name_of_letters_and_digits(name):
    with pytest.raises(ValueError, match="lower-case letters and digits"):
        CompressorPlugin(name=name, projectors=(ProjectorType.named("plain", _factory),))


def test_the_builtins_are_named_types():
    assert [entry.spelling for entry in builtin.PLUGIN.projectors] == ["linear", "mlp{N}x_gelu", "identity"]
    assert all(entry.form is not None for entry in builtin.PLUGIN.projectors)


#: The public names of the plugin API, written out by hand: a plugin imports these from ``llava.plugin_api`` whatever
#: module of the package keeps them, so a name that moves, disappears or appears must change this list on purpose.
PUBLIC_NAMES = {
    # words, the name grammar, settings
    "BOOLEAN_WORDS", "FALSE_WORDS", "TRUE_WORDS", "PLUGIN_KINDS", "SETTING_TYPES", "NameForm", "Setting", "parse_bool",
    # the projector contract
    "BOUNDARIES", "TEXT_ENCODERS", "TEXT_NEEDS", "BuildContext", "BuiltProjector", "CompressorInputs", "ModelNeeds",
    "ProjectorFactory", "ProjectorType", "RunInfo", "TowerShape", "mlp_projector",
    # cost
    "ELEMENTWISE_PARTS", "CostModel", "CostSetting", "LMDims", "ModuleCost", "attention_score_flops", "elementwise",
    "linear_flops", "llm_prefill_flops", "projector_flops", "total",
    # views, the declaration, the reducer kind
    "CompressorView", "Picture", "ViewInputs", "CompressorPlugin",
    "REDUCER_QUERIES", "Reducer", "ReducerBuild", "ReducerContext", "ReducerPlugin", "ReducerType", "Reduction",
}


def test_the_package_exports_exactly_the_public_names():
    import llava.plugin_api as api

    star: dict[str, object] = {}
    exec("from llava.plugin_api import *", star)  # what a star import hands a plugin
    assert len(api.__all__) == len(set(api.__all__))
    assert set(api.__all__) == PUBLIC_NAMES
    assert set(star) - {"__builtins__"} == PUBLIC_NAMES
    # the annotation types stay importable by name, as before the package split (llava.cost.flops imports LMHead)
    assert api.LMHead.__args__ == ("all", "last") and api.Boundary.__args__ == ("pre", "post")


def test_each_public_name_is_one_object_kept_in_one_module():
    import llava.plugin_api as api

    kept = [name for name in sorted(PUBLIC_NAMES) if inspect.isclass(getattr(api, name)) or inspect.isfunction(getattr(api, name))]
    for name in kept:
        home = getattr(api, name).__module__
        assert home.startswith("llava.plugin_api."), f"{name} is kept in {home}"
        assert getattr(importlib.import_module(home), name) is getattr(api, name)
