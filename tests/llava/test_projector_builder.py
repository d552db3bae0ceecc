"""The projector registry and the Braco plugin seen through build_vision_projector."""

import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from braco_patch import BracoCoder
from llava.model.multimodal_projector.builder import build_vision_projector, list_projectors, resolve_projector
from llava.model.multimodal_projector.plugins import CompressorInputs, projector_needs
from llava.testing.registry import registered_examples


def _config(name, **extra):
    return SimpleNamespace(mm_projector_type=name, mm_hidden_size=32, hidden_size=32 if name == "identity" else 48, **extra)


def _inputs(projector, config, features: torch.Tensor) -> tuple:
    """``(features,)``, or ``(features, CompressorInputs)`` with random stand-ins for what the projector needs."""
    needs = projector_needs(projector)
    if not needs.extra:
        return (features,)
    batch, tokens, dim = features.shape
    inputs = CompressorInputs(features=features, grid_shape=(6, 6), has_cls_token=True)
    inputs.layers = {index: torch.randn(batch, tokens, dim) for index in needs.tower_layers}
    if needs.attention is not None:
        inputs.attention = torch.softmax(torch.randn(batch, 2, tokens + 1, tokens + 1), dim=-1)
        inputs.queries = torch.randn(batch, tokens + 1, dim)
        inputs.keys = torch.randn(batch, tokens + 1, dim)
        inputs.cls_token = torch.randn(batch, dim)
    if needs.text is not None and needs.text_encoder == "tower":  # the paired text tower's segments, the patches in its space
        inputs.prompt = [torch.randn(1, 16) for _ in range(batch)]
        inputs.paired_features = torch.randn(batch, tokens, 16)
    elif needs.text is not None:
        inputs.prompt = [torch.randn(5, config.hidden_size) for _ in range(batch)]
        inputs.run_language_model = lambda embeds: embeds.tanh()
    return features, inputs


@pytest.mark.parametrize("name, settings", registered_examples())
def test_every_projector_builds_and_runs_on_stand_in_inputs(name, settings, tiny_tower_dir):
    config = _config(name, mm_vision_tower=str(tiny_tower_dir), **settings)
    proj = build_vision_projector(config)
    out = proj(*_inputs(proj, config, torch.randn(2, 36, 32)))
    out = torch.stack(out) if isinstance(out, list) and len({o.shape for o in out}) == 1 else out
    if isinstance(out, list):  # adaptive token counts
        assert len(out) == 2 and all(o.shape[-1] == 48 and torch.isfinite(o).all() for o in out)
        return
    assert out.shape[0] == 2 and out.shape[-1] == (32 if name == "identity" else 48)
    assert torch.isfinite(out).all()


def test_upstream_layouts():
    mlp = build_vision_projector(_config("mlp2x_gelu"))
    assert [type(m) for m in mlp] == [nn.Linear, nn.GELU, nn.Linear] and mlp[1].approximate == "none"
    assert set(mlp.state_dict()) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert isinstance(build_vision_projector(SimpleNamespace(mm_hidden_size=32, hidden_size=48)), nn.Linear)


def test_braco_projector_layout_is_official():
    proj = build_vision_projector(_config("braco_c3s7"))
    assert isinstance(proj[0], BracoCoder) and [type(m) for m in proj[1:]] == [nn.Linear, nn.GELU, nn.Linear]
    keys = set(proj.state_dict())
    assert {"0.polar_proj.weight", "0.spatial_scorer.3.weight", "1.weight", "3.weight"} <= keys
    assert proj(torch.randn(2, 577, 32)).shape == (2, 16, 48)


def test_braco_name_and_official_config_build_the_same_module():
    official = _config("fourier_mlp2x_gelu", mm_fourier_C=3, mm_fourier_spatial_keep=7, mm_fourier_use_polar_pe=True,
                       mm_fourier_low_idct=False, mm_fourier_spatial_prior="grad", mm_fourier_polar_include_raw=False)
    torch.manual_seed(0)
    a = build_vision_projector(official)
    torch.manual_seed(0)
    b = build_vision_projector(_config("braco_c3s7"))
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)
    x = torch.randn(2, 576, 32)
    assert torch.equal(a.eval()(x), b.eval()(x))


def test_keys_are_written_back_and_rebuild_without_flags():
    cfg = _config("braco_c4s9", mm_fourier_spatial_prior_weight_init=0.5)
    first = build_vision_projector(cfg)
    assert cfg.mm_fourier_C == 4 and cfg.mm_fourier_low_idct is True and cfg.mm_braco_coordinates == "auto"
    stored = {k: v for k, v in vars(cfg).items()}
    second = build_vision_projector(SimpleNamespace(**stored))
    assert second[0].config == first[0].config
    assert float(second[0].spatial_prior_weight) == 0.5


def test_contradicting_keys_are_rejected():
    with pytest.raises(ValueError, match="config.json says cutoff=4 but mm_projector_type 'braco_c3s7' means cutoff=3"):
        build_vision_projector(_config("braco_c3s7", mm_fourier_C=4))


def test_unknown_projector_lists_known_patterns_as_users_write_them():
    with pytest.raises(ValueError, match=r"unknown mm_projector_type 'resampler'; known projector types: linear, "
                                         r"mlp\{N\}x_gelu, identity") as exc:
        resolve_projector("resampler")
    assert "(" not in str(exc.value) and "\\" not in str(exc.value)  # no regular expressions


def test_a_pattern_without_a_spelling_is_shown_as_is():
    from llava.plugin_api import ProjectorType

    entry = ProjectorType(r"pool_k(\d+)", lambda context: None, examples=("pool_k4",))
    assert (entry.spelling, ProjectorType("plain", lambda context: None).spelling) == (r"pool_k(\d+)", "plain")


def test_stage1_adapter_keys_interchange():
    # A stage-1 mm_projector.bin holds model.mm_projector.* keys; stripping the prefix must load strictly.
    proj = build_vision_projector(_config("braco_k9"))
    adapter = {f"model.mm_projector.{k}": v for k, v in proj.state_dict().items()}
    fresh = build_vision_projector(_config("braco_c2s5"))
    fresh.load_state_dict({k.split("mm_projector.", 1)[1]: v for k, v in adapter.items()}, strict=True)
    x = torch.randn(1, 576, 32)
    assert torch.equal(fresh.eval()(x), proj.eval()(x))


def test_unknown_braco_key_names_the_close_match():
    with pytest.raises(ValueError, match="'mm_fourier_spatial_keeep' is not a setting of the 'braco' compressor; did you mean 'mm_fourier_spatial_keep'"):
        build_vision_projector(_config("fourier_mlp2x_gelu", mm_fourier_C=2, mm_fourier_spatial_keeep=3))


@pytest.mark.parametrize("word, embedding", [("false", "none"), ("no", "none"), ("True", "polar")])
def test_string_booleans_in_braco_keys(word, embedding):
    config = _config("fourier_mlp2x_gelu", mm_fourier_C=2, mm_fourier_spatial_keep=3, mm_fourier_use_polar_pe=word)
    proj = build_vision_projector(config)
    assert proj[0].config.embedding == embedding and config.mm_fourier_use_polar_pe is (embedding == "polar")


def test_braco_keys_are_range_checked():
    with pytest.raises(ValueError, match="mm_fourier_spatial_prior must be one of"):
        build_vision_projector(_config("braco_c2s3", mm_fourier_spatial_prior="edges"))


def test_installed_plugins_register_through_their_entry_points():
    """Braco and the six baselines arrive through setup.py's ``llava.projectors`` entry points alone."""
    from importlib.metadata import entry_points

    from llava.model.multimodal_projector.plugins import list_plugins

    assert {ep.value for ep in entry_points(group="llava.projectors")} >= {
        "braco_patch.llava_plugin", "braco_patch.baselines.llava_plugin"}
    list_projectors()
    names = {plugin.name for plugin in list_plugins()}
    assert names >= {"braco", "prumerge", "divprune", "mqt", "quecc", "tokenpacker", "fouriervlm"}


@pytest.mark.parametrize("select_layer, num_layers, offset, expected", [
    (-2, 24, 0, 23),  # the layer that produced LLaVA-1.5's features (hidden_states[23])
    (-2, 24, 1, 24),  # the next one, which reads them: PruMerge's encoder.layers[23], the last of CLIP-L's 24
    (5, 24, 0, 5), (5, 24, 1, 6), (-1, 24, 0, 24),
    (-2, 1, 1, 1),  # a one-layer tower's -2 is the embedding output: the first layer reads it
    (0, 4, 1, 1), (-5, 4, 1, 1),
])
def test_attention_layer_is_relative_to_the_select_layer(select_layer, num_layers, offset, expected):
    from llava.model.image_encoding import attention_layer_for

    assert attention_layer_for(select_layer, num_layers, offset) == expected


@pytest.mark.parametrize("select_layer, num_layers, offset, words", [
    (-1, 24, 1, "select an earlier layer (at most 23 or -2)"),  # the last layer has no next one
    (0, 4, 0, "the embedding output, which no layer produced"),
    (-5, 4, 0, "the embedding output, which no layer produced"),
])
def test_a_missing_attention_layer_is_one_sentence(select_layer, num_layers, offset, words):
    from llava.model.image_encoding import attention_layer_for

    with pytest.raises(ValueError, match=re.escape(words)) as error:
        attention_layer_for(select_layer, num_layers, offset, "prumerge_k16")
    assert "'prumerge_k16'" in str(error.value) and "\n" not in str(error.value)


def test_needs_are_resolved_when_the_projector_is_built(monkeypatch, tiny_tower_dir):
    """The plugin lookup runs once, at build time; encode_images reads the result from the module."""
    from llava.model.multimodal_projector import plugins

    config = _config("quecc_k4", mm_vision_tower=str(tiny_tower_dir))
    projector = build_vision_projector(config)
    assert plugins.projector_needs(projector) == plugins.ModelNeeds(tower_layers=(1, 1, 2, 2), text="question", square_grid=True)
    assert plugins.projector_needs(build_vision_projector(_config("prumerge_k4"))).attention == 1
    assert plugins.projector_needs(build_vision_projector(_config("mlp2x_gelu"))) == plugins.ModelNeeds()
    assert plugins.projector_needs(nn.Linear(2, 2)) == plugins.ModelNeeds()  # built by hand: no plugin

    def no_lookup(*args, **kwargs):
        raise AssertionError("needs looked up after the build")

    from llava.model.multimodal_projector import registry

    monkeypatch.setattr(plugins, "plugin_for", no_lookup)
    monkeypatch.setattr(registry, "plugin_for", no_lookup)
    monkeypatch.setattr(registry, "resolve_projector", no_lookup)
    assert plugins.projector_needs(projector).text == "question"


@pytest.mark.parametrize("bad, words", [
    ({"attention": True}, "layer offset"), ({"attention": "next"}, "layer offset"), ({"text": "answer"}, "'question', 'instruction', 'prompt'"),
])
def test_model_needs_refuses_bad_declarations(bad, words):
    from llava.model.multimodal_projector.plugins import ModelNeeds

    with pytest.raises(ValueError, match=re.escape(words)):
        ModelNeeds(**bad)
