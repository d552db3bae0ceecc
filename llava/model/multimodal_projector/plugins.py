"""Compressor plugins: one declaration per visual-token compressor, in one place.

A compressor (a projector that changes the number of visual tokens, or any projector with settings of its own)
declares itself with a :class:`CompressorPlugin` and :func:`register_plugin`, usually from the module that the
``llava.projectors`` entry point names. The declaration says:

- ``name``: the method's one name (its rows in the cost and comparison tables, its demo panel);
- ``projectors``: its name forms (``ProjectorType.named("mypool_k{K}", factory)``: the pattern the registry
  matches, the spelling and the names per budget are derived from the form) → factories
  ``factory(BuildContext) -> BuiltProjector``
  (the module and the config keys to save; a factory reads no files and writes nothing into the config), each
  with example names the test suite builds; they go into the one registry (:mod:`.registry`), next to
  upstream's built-ins, which are declared the same way (:mod:`.builtin`);
- ``settings``: :class:`Setting` s. Each is a ``config.json`` key and, with the same name, a training flag
  (``--key``; it appears in ``train.py --help``, is parsed by ``HfArgumentParser`` and checked by
  :meth:`Setting.parse`). Given flags are written to ``config.json``; on load the keys are checked again
  (types, choices, ranges) and a key that starts with one of ``key_prefixes`` but is not declared is an error
  that names the closest declared key;
- ``run_defaults``: values for unset settings that depend on the run (stage, planned optimizer steps),
  e.g. a temperature schedule per training stage;
- ``callbacks``: ``callbacks(model) -> list[TrainerCallback]``, added by ``train.py`` to the trainer;
- ``needs``: what :meth:`LlavaMetaForCausalLM.encode_images` must hand the projector besides the select
  layer's features (:class:`ModelNeeds`: other tower layers, one layer's attention relative to the select
  layer, the question or the whole prompt; a factory may return needs that depend on its settings), resolved
  once when the projector is built and kept on it (:func:`projector_needs`);
- ``boundary``: ``"pre"`` (the module compresses tower features, then projects; the built module is the whole
  projector) or ``"post"`` (it runs on projected tokens); the cost tools account by it;
- ``view``: ``view(projector, ViewInputs) -> CompressorView | None``, the demo panel's picture
  (drawn with :mod:`llava.serve.panels`' helpers);
- ``cost``: a :class:`~llava.plugin_api.CostModel`: ``module_flops(context, setting)``, its type's FLOPs in llava's
  convention, given the same :class:`BuildContext` as the factory; its types per visual-token budget (by default its
  ``{K}`` name forms); the cost tables, ``llava.eval.compare``, the quickstart's ``--projectors all`` ask it;
- ``showcase`` / ``video_showcase``: the projector types a first comparison shows on images / videos (the
  quickstart's default lists ask every plugin, :func:`showcase`);
- ``reference_scores``: published benchmark rows by name, for ``summarize --baseline`` / ``compare --vanilla``;
- ``tokens_depend_on_image``: whether the number of tokens per view depends on the image (adaptive selection),
  a constant or ``tokens_depend_on_image(config) -> bool``; such a projector cannot feed a merge that needs the
  same count in every view (AnyRes ``spatial`` / ``spatial_unpad``), which is refused before training or loading.

**How a projector is called** (:meth:`LlavaMetaForCausalLM.encode_images`): a projector whose plugin needs
nothing (:attr:`ModelNeeds.extra` is false) is called as ``projector(features)`` with ``features``
``[N, T, mm_hidden_size]`` (the select layer, after ``mm_vision_select_feature``), exactly as upstream. Otherwise
it is called as ``projector(features, inputs)`` with ``inputs`` a :class:`CompressorInputs`. The text a
compressor reads arrives as an argument of that call (from ``generate`` / ``forward``'s ``question_ids`` or the
model's own ids, :mod:`llava.model.compressor_text`), never as model state.

The declarations are the plugin API's (:mod:`llava.plugin_api`: one module, standard library only, that a plugin
file builds on). This module is the public door: it re-exports the API's declaration types and the registry's
functions (:mod:`.registry`). It imports nothing heavy and knows no plugin by name.
"""

from __future__ import annotations

from llava.plugin_api import (
    BOUNDARIES,
    PLUGIN_KINDS,
    SETTING_TYPES,
    TEXT_ENCODERS,
    TEXT_NEEDS,
    BuildContext,
    BuiltProjector,
    CompressorInputs,
    CompressorPlugin,
    CostModel,
    ModelNeeds,
    NameForm,
    ProjectorFactory,
    ProjectorType,
    RunInfo,
    Setting,
    TowerShape,
)

from .needs import NEEDS_ATTRIBUTE, attach_needs, projector_needs
from .registry import (
    apply_runtime_settings,
    build_context,
    check_plugin_config,
    config_values,
    list_plugins,
    list_projectors,
    owner_of,
    plugin_for,
    plugin_settings,
    projector_spellings,
    reference_scores,
    register_plugin,
    resolve_projector,
    settings_in,
    showcase,
    tokens_depend_on_image,
    unregister_plugin,
)

__all__ = [
    "BOUNDARIES",
    "NEEDS_ATTRIBUTE",
    "PLUGIN_KINDS",
    "SETTING_TYPES",
    "TEXT_ENCODERS",
    "TEXT_NEEDS",
    "BuildContext",
    "BuiltProjector",
    "CompressorInputs",
    "CompressorPlugin",
    "CostModel",
    "ModelNeeds",
    "NameForm",
    "ProjectorFactory",
    "ProjectorType",
    "RunInfo",
    "Setting",
    "TowerShape",
    "apply_runtime_settings",
    "attach_needs",
    "build_context",
    "check_plugin_config",
    "config_values",
    "list_plugins",
    "list_projectors",
    "owner_of",
    "plugin_for",
    "plugin_settings",
    "projector_spellings",
    "projector_needs",
    "reference_scores",
    "register_plugin",
    "resolve_projector",
    "settings_in",
    "showcase",
    "tokens_depend_on_image",
    "unregister_plugin",
]
