"""The plugin API: everything a method plugin declares and everything it is handed, in one package.

A *method* (a visual-token compressor, upstream's projectors, your own) is one plugin, and an in-repo method is one
file: its module, its factory, its cost, its view and its :class:`CompressorPlugin` declaration, all written against this package alone. The
registry (:mod:`llava.model.multimodal_projector.registry`) holds the declarations; the model builds from them, the
cost engine (:mod:`llava.cost`) counts them, the demo (:mod:`llava.serve.panels`) draws them, and none of those
names a method. docs/PLUGINS.md is the guide.

**Imports.** The standard library only, at run time; torch for type checkers (tensors and modules are what plugins
hand back, and :func:`mlp_projector` imports ``torch.nn`` when it is called). So importing the API is free, any
layer may build on it, and no import cycle can pass through it (tests/test_import_seams.py holds all three).

**Its modules** (import the names from the package, ``from llava.plugin_api import NameForm``; the modules are how the
API is kept, not part of it): ``names`` (booleans, :class:`NameForm`, :class:`Setting`, :data:`PLUGIN_KINDS`),
``contract`` (:class:`BuildContext`, :class:`BuiltProjector`, :class:`ProjectorType`, :class:`ModelNeeds`,
:class:`CompressorInputs`), ``cost`` (:class:`LMDims`, the FLOP helpers, :class:`CostSetting`, :class:`ModuleCost`,
:class:`CostModel`), ``view`` (:class:`ViewInputs`, :class:`Picture`, :class:`CompressorView`), ``plugin``
(:class:`CompressorPlugin`) and ``reducer`` (the reducer kind). Each imports only the standard library and the ones
before it (``cost`` names the reducer's :class:`ReducerBuild` for type checkers only).

**One name grammar.** A method's one name is its plugin's ``name`` (lower-case letters and digits: ``mypool``):
the rows of the cost tables (:mod:`llava.cost`) and of ``llava.eval.compare``, the demo panel, messages, docs. Its
type names are written once, as :class:`NameForm` templates (``mypool_k{K}``), and every other spelling is derived
from them: the pattern the registry matches (``mypool_k(?P<K>\\d+)``), the spelling in messages and ``--help``, the
names a budget gives (``{K}`` is the visual tokens per view: ``mypool_k16``), and a name's values (``{"K": 16}``).

**Two kinds, one shape.** :data:`PLUGIN_KINDS` are the places a method acts. ``projector`` types run between the
vision tower and the LLM (``mm_projector_type``), with a ``pre`` or ``post`` boundary. The in-LLM *reducer* (issue
32: runs at a chosen decoder layer, sees the hidden states and what it needs of that layer's attention, returns the
positions it keeps) is the second kind, in the same shape: name forms (:class:`ReducerType`), a factory of a typed
context (:class:`ReducerBuild`), a :class:`CostModel` (``layer_tokens``: per decoder layer), a view and a declaration
(:class:`ReducerPlugin`); it sees a :class:`ReducerContext` and returns a :class:`Reduction`. Its registry is
:mod:`llava.model.reducers`, its seam in the LLM :mod:`llava.model.reduction` (docs/PLUGINS.md, "The reducer kind").

**Import layers** (tests/test_import_seams.py; a unit imports only its own layer's or lower layers' units, and no
import cycle exists, module-level and function-level imports alike):

0. ``llava.plugin_api`` (this package, every module of it);
1. the shared utilities: ``llava`` (the package), ``constants``, ``utils``, ``devices``, ``outputs``, ``net``,
   ``video``, ``mm_utils``, ``conversation``, ``visual_tokens``, ``numeric``, ``pixels``, ``endpoints``,
   ``openai_client``, ``capture`` (compiled and CUDA-graph callables);
2. ``llava.model`` (registries, the model, the loader): never ``llava.cost`` or anything above;
3. ``llava.cost``, ``llava.generation``;
4. ``llava.eval``, ``llava.serve``, ``llava.train``, ``llava.testing`` (the tiny-model builders and test helpers; never
   one another);
5. ``llava.quickstart``;

and above them the plugin packages, which import llava only from their seam modules (tests/test_import_seams.py).
"""
from .contract import (
    BOUNDARIES,
    TEXT_ENCODERS,
    TEXT_NEEDS,
    Boundary,
    BuildContext,
    BuiltProjector,
    CompressorInputs,
    ModelNeeds,
    ProjectorFactory,
    ProjectorType,
    RunInfo,
    TowerShape,
    mlp_projector,
)
from .cost import (
    ELEMENTWISE_PARTS,
    CostModel,
    CostSetting,
    LMDims,
    LMHead,
    ModuleCost,
    attention_score_flops,
    elementwise,
    linear_flops,
    llm_prefill_flops,
    projector_flops,
    total,
)
from .names import BOOLEAN_WORDS, FALSE_WORDS, PLUGIN_KINDS, SETTING_TYPES, TRUE_WORDS, NameForm, Setting, parse_bool
from .plugin import CompressorPlugin
from .reducer import REDUCER_QUERIES, Reducer, ReducerBuild, ReducerContext, ReducerPlugin, ReducerType, Reduction
from .view import CompressorView, Picture, ViewInputs

# ``Boundary`` and ``LMHead`` (the literal types of a boundary and of the LM-head accounting) are importable for
# annotations, as before the split, and stay out of ``__all__``.
__all__ = [
    "BOOLEAN_WORDS", "BOUNDARIES", "ELEMENTWISE_PARTS", "FALSE_WORDS", "PLUGIN_KINDS", "SETTING_TYPES", "TEXT_ENCODERS",
    "TEXT_NEEDS", "TRUE_WORDS", "BuildContext", "BuiltProjector", "CompressorInputs", "CompressorPlugin", "CompressorView",
    "CostModel", "CostSetting", "LMDims", "ModelNeeds", "ModuleCost", "NameForm", "Picture", "ProjectorFactory",
    "ProjectorType", "REDUCER_QUERIES", "Reducer", "ReducerBuild", "ReducerContext", "ReducerPlugin", "ReducerType",
    "Reduction", "RunInfo", "Setting", "TowerShape", "ViewInputs", "attention_score_flops", "elementwise",
    "linear_flops", "llm_prefill_flops", "mlp_projector", "parse_bool", "projector_flops", "total",
]
