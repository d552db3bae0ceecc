"""The seam between the paper's baselines and LLaVA: one :class:`CompressorPlugin` declaration per method.

Loaded through the ``llava.projectors`` entry point ``baselines = braco_patch.baselines.llava_plugin``
(setup.py). Together with :mod:`.view` it is the only module of :mod:`braco_patch.baselines` that imports
``llava``; the methods themselves stay pure PyTorch. Name grammar, settings and layouts: docs/BASELINES.md.

=====================================  ==========================================================  ========
projector type                         module (state-dict keys)                                    boundary
=====================================  ==========================================================  ========
``prumerge_k{K}``, ``prumerge``        PruMerge (none), then mlp2x_gelu (``0.*``, ``2.*``)          pre
``prumerge_plus_k{K}``, ``prumerge_plus``  PruMerge+ (none), then mlp2x_gelu (``0.*``, ``2.*``)     pre
``divprune_k{K}``                      mlp2x_gelu (``0.*``, ``2.*``), then DivPrune (none)          post
``mqt_k{K}``, ``mqt_q{Q}``             MQT query abstractor, replaces the projector                 pre
``quecc_k{K}``                         QueCC (``compressor.*``), then mlp2x_gelu (``0.*``, ``2.*``)  pre
``tokenpacker_k{K}``                   TokenPacker, replaces the projector                          post
``fouriervlm_k{K}``                    Fourier-VLM (none), then mlp2x_gelu (``0.*``, ``2.*``)       pre
=====================================  ==========================================================  ========

The parameter-free methods (PruMerge, DivPrune, Fourier-VLM) keep exactly ``mlp2x_gelu``'s keys, so any
``mlp2x_gelu`` checkpoint (stage-1 ``mm_projector.bin`` or a full stage-2 checkpoint) loads under their
projector types unchanged: that is how they run training-free.

Budgets are checked when the projector is built, from the build context (the tower's grid and depth): an
impossible budget is one ``ValueError`` sentence naming the reason and the accepted budgets. Factories return the
settings they resolved as config keys, and QueCC/TokenPacker return the tower layers they read as their needs.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
import torch.nn as nn

from llava.cost.module import CostModel
from llava.model.multimodal_projector.builder import mlp_projector, resolve_projector
from llava.model.multimodal_projector.plugins import (
    BuildContext,
    BuiltProjector,
    CompressorPlugin,
    ModelNeeds,
    ProjectorType,
    RunInfo,
    Setting,
    register_plugin,
)

from ._common import multi_level_layers, region_scale
from .cdpruner import CDPruner
from .divprune import DivPrune
from .fourier_vlm import FourierVLM
from .mqt import MQTAbstractor
from .prumerge import PruMerge, projection_scores
from .quecc import QueCC
from .tokenpacker import TokenPacker
from .visionzip import VisionZip, default_contextual
from .vispruner import VisPruner

__all__ = [
    "PLUGINS",
    "PRE_LLM_PLUGINS",
    "CompressThenProject",
    "InputsThenProject",
    "ProjectThenSelect",
    "MQTProjector",
    "TokenPackerProjector",
    "parse_layers",
]


# ---------------------------------------------------------------------------------------------- the tower


def _check_patch_features(context: BuildContext) -> None:
    """Methods that work on the patch grid refuse ``mm_vision_select_feature cls_patch``."""
    if context.select_feature != "patch":
        raise ValueError(
            f"mm_projector_type {context.projector_type!r} compresses the patch grid, so mm_vision_select_feature must be "
            f"'patch', got {context.select_feature!r}"
        )


def parse_layers(value: Any, key: str) -> tuple[int, ...]:
    """``"12,16,22,23"`` (a config string) → ``(12, 16, 22, 23)``, or a one-sentence ``ValueError``."""
    text = str(value).strip()
    if not re.fullmatch(r"-?\d+(\s*,\s*-?\d+)*", text):
        raise ValueError(f"{key} must be comma-separated tower hidden-state indices such as '12,16,22,23', got {value!r}")
    return tuple(int(part) for part in text.split(","))


class _Resolved:
    """The settings a factory reads, each its config value or its default; :attr:`keys` are returned to be saved,
    so ``config.json`` rebuilds the same module."""

    def __init__(self, context: BuildContext) -> None:
        self.context = context
        self.keys: dict[str, Any] = {}

    def get(self, key: str, default: Any) -> Any:
        self.keys[key] = self.context.setting(key, default)
        return self.keys[key]

    def layers(self, key: str, num_layers: int) -> tuple[int, ...]:
        """The multi-level layers: the config key when set, else the releases' rule for this depth."""
        stored = self.context.setting(key)
        layers = parse_layers(stored, key) if stored is not None else multi_level_layers(num_layers)
        for index in layers:
            if not -(num_layers + 1) <= index <= num_layers:
                raise ValueError(f"{key} index {index} is out of range for a {num_layers}-layer tower; expected {-(num_layers + 1)}..{num_layers}")
        self.keys[key] = ",".join(map(str, layers))
        return layers


# ---------------------------------------------------------------------------------------------- layouts


class CompressThenProject(nn.Module):
    """A compressor on tower features, then upstream's ``mlp2x_gelu`` (pre-projector methods).

    State-dict keys: ``0.*`` and ``2.*`` for the MLP, exactly ``mlp2x_gelu``'s, and ``compressor.*`` for a
    compressor with parameters (QueCC). Called as ``projector(features)`` or ``projector(features, inputs)``
    (``inputs`` a :class:`~llava.model.multimodal_projector.plugins.CompressorInputs`); ``method`` says how the
    compressor reads them (``"plain"``, ``"attention"``: PruMerge, ``"prompt"``: QueCC).

    Returns ``[B, K, hidden]``, or a list of ``[K_b, hidden]`` for adaptive PruMerge.
    """

    def __init__(self, compressor: nn.Module, mm_hidden: int, hidden: int, method: str = "plain", layers: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.compressor = compressor
        for index, layer in enumerate(mlp_projector(mm_hidden, hidden, 2)):
            self.add_module(str(index), layer)
        self.method = method
        self.layers = tuple(layers)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The MLP: ``[..., mm_hidden]`` → ``[..., hidden]``."""
        for index in range(3):
            x = self._modules[str(index)](x)
        return x

    def compress(self, features: torch.Tensor, inputs: Any = None) -> torch.Tensor | list[torch.Tensor]:
        """The compressor alone: ``[B, N, D]`` → ``[B, K, D]`` (a list for adaptive PruMerge)."""
        if self.method == "plain":
            return self.compressor(features)
        if inputs is None:
            raise ValueError(f"{type(self.compressor).__name__} needs the model's CompressorInputs; call it through encode_images")
        if self.method == "attention":
            return self.compressor(features, prumerge_scores(inputs), inputs.keys)
        levels = [inputs.layers[index] for index in self.layers]
        return self.compressor(features, levels, quecc_text_states(inputs, features))

    def forward(self, features: torch.Tensor, inputs: Any = None) -> torch.Tensor | list[torch.Tensor]:
        out = self.compress(features, inputs)
        if isinstance(out, list):
            return [self.project(tokens) for tokens in out]
        return self.project(out)


def prumerge_scores(inputs: Any) -> torch.Tensor:
    """``[B, N]`` PruMerge importance from the q/k projections of the layer its plugin asked for (the release's
    single full-width product, :func:`~braco_patch.baselines.prumerge.projection_scores`)."""
    if inputs.queries is None or inputs.keys is None:
        raise ValueError("PruMerge scores patches with the tower's query and key projections, but CompressorInputs has none; call it through encode_images")
    return projection_scores(inputs.queries, inputs.keys, inputs.has_cls_token)


def quecc_text_states(inputs: Any, features: torch.Tensor) -> torch.Tensor:
    """``[B, d_text]``: the LLM's last-layer state at the last token of each image's question.

    The question (``CompressorInputs.prompt`` for a plugin that asked for ``text="question"``) is the first user
    turn without image markers, tokenized on its own with the tokenizer's special tokens (LLaMA: BOS), as the
    release re-tokenizes it. Each runs on its own (``[1, L_i, hidden]``, no padding), so an image's tokens never
    depend on the batch. The pass carries no gradient into the LLM (the text projection after it trains).
    Without text (``encode_images`` called on its own, e.g. the demo's token count) the state is zero, and so is
    an image's whose question has no token at all (stage 1's ``plain`` samples have no question; on a tokenizer
    that adds no BOS, e.g. Qwen2's, that leaves nothing to run).
    """
    width = int(features.shape[0])
    prompts = inputs.prompt
    if prompts is None or inputs.run_language_model is None:
        return features.new_zeros(width, 0)
    states = []
    with torch.no_grad():
        for embeds in prompts:
            if embeds.shape[0] == 0:  # no question: stage-1 'plain' samples keep only the image (no BOS in Qwen2)
                states.append(embeds.new_zeros(embeds.shape[-1]))
                continue
            states.append(inputs.run_language_model(embeds.unsqueeze(0))[0, -1])
    return torch.stack(states).to(device=features.device, dtype=features.dtype)


class QueCCCompressor(QueCC):
    """:class:`QueCC` that treats a missing prompt (zero-width states) as a zero text vector."""

    def forward(self, features, levels, text_states, text_mask=None):  # noqa: D102 - see QueCC.forward
        if text_states.dim() == 2 and text_states.shape[1] == 0:
            text_states = features.new_zeros(features.shape[0], self.text_dim)
        return super().forward(features, levels, text_states, text_mask)


class MQTProjector(MQTAbstractor):
    """:class:`MQTAbstractor` as a projector: ``mm_mqt_num_tokens`` changes K on a loaded model."""

    def apply_settings(self, values: dict[str, Any]) -> None:
        if values.get("mm_mqt_num_tokens") is not None:
            self.num_tokens = self._check_tokens(int(values["mm_mqt_num_tokens"]))


class TokenPackerProjector(TokenPacker):
    """:class:`TokenPacker` called as ``projector(features, inputs)``: its levels are the tower layers it asked for."""

    def __init__(self, *args: Any, layers: tuple[int, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.layers = tuple(layers)

    def forward(self, features: torch.Tensor, inputs: Any = None) -> torch.Tensor:  # noqa: D102
        if inputs is None:
            raise ValueError("TokenPacker needs the tower's multi-level features; call it through encode_images")
        return super().forward(features, [inputs.layers[index] for index in self.layers])


# ---------------------------------------------------------------------------------------------- budgets


def _budget(match: re.Match[str]) -> int | None:
    """The ``K`` of a name (``None`` for the adaptive names), checked to be positive."""
    groups = [group for group in match.groups() if group is not None]
    if not groups:
        return None
    budget = int(groups[-1])
    if budget < 1:
        raise ValueError(f"mm_projector_type {match.group(0)!r} asks for {budget} tokens; the budget must be a positive integer")
    return budget


def _check_selection_budget(budget: int, grid: tuple[int, int], projector_type: str, most: int, least: int = 1) -> None:
    """Refuse a budget above ``most``, naming the accepted range ``least..most``."""
    if budget > most:
        raise ValueError(
            f"mm_projector_type {projector_type!r} keeps {budget} tokens but the {grid[0]}x{grid[1]} grid has "
            f"{grid[0] * grid[1]} patches; accepted budgets: {least}..{most}"
        )


# ---------------------------------------------------------------------------------------------- factories


def _prumerge(context: BuildContext) -> BuiltProjector:
    name = context.projector_type
    _check_patch_features(context)
    budget = _budget(context.match)
    settings = _Resolved(context)
    neighbours = int(settings.get("mm_prumerge_neighbours", 32))
    extra = bool(settings.get("mm_prumerge_extra_token", True))
    if budget is not None:
        if budget - int(extra) < 1:
            raise ValueError(f"mm_projector_type {name!r} keeps {budget} token(s), but PruMerge with its extra token needs at least 2")
        if context.tower is not None:  # without a tower (a bare config) the forward pass checks K
            grid = context.tower.grid
            _check_selection_budget(budget, grid, name, grid[0] * grid[1] + int(extra), least=1 + int(extra))
    module = PruMerge(context.mm_hidden, budget, plus="_plus" in name, neighbours=neighbours, extra_token=extra)
    return BuiltProjector(CompressThenProject(module, context.mm_hidden, context.hidden, method="attention"), settings.keys)


def _prumerge_is_adaptive(config: Any) -> bool:
    """PruMerge without ``_k<K>`` keeps the IQR outliers: how many depends on the image."""
    _, match = resolve_projector(str(config.mm_projector_type))
    return _budget(match) is None


def _divprune(context: BuildContext) -> BuiltProjector:
    budget = _budget(context.match)
    if context.tower is not None:
        grid = context.tower.grid
        _check_selection_budget(budget, grid, context.projector_type, grid[0] * grid[1])
    return BuiltProjector(nn.Sequential(*mlp_projector(context.mm_hidden, context.hidden, 2), DivPrune(budget)))


def _mqt(context: BuildContext) -> BuiltProjector:
    name = context.projector_type
    _check_patch_features(context)
    by_queries = name.startswith("mqt_q")
    count = _budget(context.match)
    settings = _Resolved(context)
    queries = int(settings.get("mm_mqt_num_queries", count if by_queries else 256))
    if by_queries and queries != count:
        raise ValueError(f"config.json says mm_mqt_num_queries={queries} but mm_projector_type {name!r} means {count} queries; fix one of them")
    tokens = context.setting("mm_mqt_num_tokens")
    tokens = int(tokens) if tokens is not None else (queries if by_queries else count)
    if tokens > queries:
        raise ValueError(f"mm_projector_type {name!r} asks for {tokens} tokens but has {queries} queries; accepted: 1..{queries} (or raise mm_mqt_num_queries)")
    heads = int(settings.get("mm_mqt_heads", 16))
    keys = str(settings.get("mm_mqt_keys", "position"))
    nested = bool(settings.get("mm_mqt_nested", True))
    module = MQTProjector(context.mm_hidden, context.hidden, queries, num_tokens=tokens, heads=heads, keys=keys, nested=nested)
    return BuiltProjector(module, settings.keys)


def _regional(context: BuildContext, budget: int, method: str, settings: _Resolved) -> tuple[int, tuple[int, ...]]:
    """Grid side and multi-level layers of QueCC/TokenPacker, the budget checked against the grid."""
    name = context.projector_type
    _check_patch_features(context)
    tower = context.require_tower("splits the tower's grid into regions")
    rows, cols = tower.grid
    if rows != cols:
        raise ValueError(f"mm_projector_type {name!r} splits a square grid into regions, but the tower gives {rows}x{cols}; use a tower with a square grid")
    region_scale(budget, rows, method)
    return rows, settings.layers(f"mm_{method.lower()}_layers", tower.layers)


def _quecc(context: BuildContext) -> BuiltProjector:
    budget, settings = _budget(context.match), _Resolved(context)
    side, layers = _regional(context, budget, "QueCC", settings)
    heads = int(settings.get("mm_quecc_heads", 8))
    dim = context.mm_hidden
    module = QueCCCompressor(dim, budget, side, context.hidden, level_dim=len(layers) * dim, heads=heads)
    needs = ModelNeeds(tower_layers=layers, text="question", square_grid=True)
    return BuiltProjector(CompressThenProject(module, dim, context.hidden, method="prompt", layers=layers), settings.keys, needs)


def _tokenpacker(context: BuildContext) -> BuiltProjector:
    budget, settings = _budget(context.match), _Resolved(context)
    side, layers = _regional(context, budget, "TokenPacker", settings)
    dim = context.mm_hidden
    heads = int(settings.get("mm_tokenpacker_heads", max(dim // 128, 1)))
    module = TokenPackerProjector(dim, context.hidden, budget, side, level_dim=len(layers) * dim, heads=heads, layers=layers)
    return BuiltProjector(module, settings.keys, ModelNeeds(tower_layers=layers, square_grid=True))


def _fouriervlm(context: BuildContext) -> BuiltProjector:
    name, budget = context.projector_type, _budget(context.match)
    _check_patch_features(context)
    cutoff = math.isqrt(budget)
    if cutoff * cutoff != budget:
        raise ValueError(
            f"mm_projector_type {name!r}: Fourier-VLM keeps a CxC block of frequencies, so K must be a perfect square "
            f"(4, 9, 16, 25, ...), got {budget}"
        )
    if context.tower is not None:
        grid = context.tower.grid
        if cutoff > min(grid):
            accepted = [c * c for c in range(1, min(grid) + 1)]
            raise ValueError(
                f"mm_projector_type {name!r} needs C={cutoff} but the {grid[0]}x{grid[1]} grid allows at most C={min(grid)}; "
                f"accepted budgets: {accepted}"
            )
    settings = _Resolved(context)
    module = FourierVLM(context.mm_hidden, budget, rescale=bool(settings.get("mm_fouriervlm_rescale", False)))
    return BuiltProjector(CompressThenProject(module, context.mm_hidden, context.hidden), settings.keys)


# ---------------------------------------------------------------------------------------------- needs


def _mqt_run_defaults(run: RunInfo) -> dict[str, Any]:
    """The release: stage 1 trains all queries, stage 2 random nested prefixes."""
    return {"mm_mqt_nested": run.stage != "pretrain"}


def _view(kind: str):
    def view(projector: Any, inputs: Any) -> Any:
        from . import view as views

        return views.VIEWS[kind](projector, inputs)

    return view


# ---------------------------------------------------------------------------------------------- cost


def _cost_model(method: str, names: tuple[str, ...], *, square: bool = False) -> CostModel:
    """The :class:`CostModel` of one method (``braco cost``, ``llava.eval.compare``, ``--projectors all``).

    Args:
        method: A key of :data:`braco_patch.baselines.module_flops.MODULE_FLOPS`.
        names: Projector-type templates offered for a budget, e.g. ``("divprune_k{k}",)``.
        square: The method gives only square numbers of tokens (a C×C grid of regions or frequencies).
    """

    def module_flops(config: Any, setting: Any) -> Any:
        from .module_flops import baseline_module_flops

        name = str(config.mm_projector_type)
        _, match = resolve_projector(name)  # the registered pattern's last group is K (MQT: mm_mqt_num_tokens first)
        budget = getattr(config, "mm_mqt_num_tokens", None) if method == "mqt" else None
        budget = budget or _budget(match)
        if budget is None:
            raise ValueError(
                f"{name!r} keeps an input-dependent number of tokens (adaptive selection), so it has no fixed cost; "
                f"cost {name}_k<K> instead"
            )
        return baseline_module_flops(method, int(budget), setting, projector_type=name)

    def types_at_budget(budget: int) -> list[str]:
        side = math.isqrt(budget)
        if square and side * side != budget:
            raise ValueError(f"{method} gives a square number of tokens (4, 9, 16, 25, ...), not {budget}")
        return [template.format(k=budget) for template in names]

    return CostModel(module_flops=module_flops, types_at_budget=types_at_budget)


# ---------------------------------------------------------------------------------------------- declarations

_K = r"_k(\d+)"
_LAYERS_HELP = ("tower hidden-state indices of the multi-level features, comma-separated (default: 12,16,22,23 on a 24-layer tower, "
                "the same relative depths otherwise)")

PLUGINS = (
    register_plugin(CompressorPlugin(
        name="prumerge",
        projectors=(
            ProjectorType(r"prumerge(?:_k(\d+))?", _prumerge,
                          "PruMerge: CLS-attention top-K (or IQR outliers without _k) merged by key similarity, then mlp2x_gelu",
                          examples=("prumerge_k4", "prumerge"), spelling="prumerge[_k{K}]"),
            ProjectorType(r"prumerge_plus(?:_k(\d+))?", _prumerge, "PruMerge+: PruMerge plus spatially uniform samples, then mlp2x_gelu",
                          examples=("prumerge_plus_k9", "prumerge_plus"), spelling="prumerge_plus[_k{K}]"),
        ),
        settings=(
            Setting("mm_prumerge_neighbours", int, "k, tokens each kept token absorbs by key similarity", default=32, minimum=1),
            Setting("mm_prumerge_extra_token", bool, "append the attention-weighted sum of the pruned tokens (counts in K)", default=True),
        ),
        key_prefixes=("mm_prumerge_",),
        needs=ModelNeeds(attention=1),  # the layer after the select layer reads its features (the release's layer 23)
        boundary=PruMerge.boundary,
        view=_view("prumerge"),
        cost=_cost_model("prumerge", ("prumerge_k{k}", "prumerge_plus_k{k}")),
        tokens_depend_on_image=_prumerge_is_adaptive,
    )),
    register_plugin(CompressorPlugin(
        name="divprune",
        projectors=(ProjectorType(r"divprune" + _K, _divprune, "DivPrune: mlp2x_gelu, then greedy max-min diversity selection of K tokens",
                                 examples=("divprune_k4",), spelling="divprune_k{K}"),),
        key_prefixes=("mm_divprune_",),
        needs=ModelNeeds(),
        boundary=DivPrune.boundary,
        view=_view("divprune"),
        cost=_cost_model("divprune", ("divprune_k{k}",)),
        video_showcase=("divprune_k16",),
    )),
    register_plugin(CompressorPlugin(
        name="mqt",
        projectors=(
            ProjectorType(r"mqt" + _K, _mqt, "MQT-LLaVA: nested query transformer (256 queries), K tokens at inference", examples=("mqt_k4",),
                          spelling="mqt_k{K}"),
            ProjectorType(r"mqt_q(\d+)", _mqt, "MQT-LLaVA with Q queries; K = mm_mqt_num_tokens (default Q)", examples=("mqt_q16",),
                          spelling="mqt_q{Q}"),
        ),
        settings=(
            Setting("mm_mqt_num_queries", int, "Q, learned queries (the release: 256)", default=256, minimum=1),
            Setting("mm_mqt_num_tokens", int,
                    "K at inference, any 1..Q from one checkpoint (the release's --num_visual_tokens; default: the name's K, or Q)",
                    minimum=1, runtime=True),
            Setting("mm_mqt_heads", int, "attention heads", default=16, minimum=1),
            Setting("mm_mqt_keys", str, "attention keys: the query grid's positions (the release) or the features",
                    default="position", choices=("position", "features")),
            Setting("mm_mqt_nested", bool, "train with random nested prefix lengths (default: no in stage 1, yes in stage 2, as the release)"),
        ),
        key_prefixes=("mm_mqt_",),
        run_defaults=_mqt_run_defaults,
        needs=ModelNeeds(square_grid=True),
        boundary=MQTAbstractor.boundary,
        view=_view("mqt"),
        cost=_cost_model("mqt", ("mqt_k{k}",)),
    )),
    register_plugin(CompressorPlugin(
        name="quecc",
        projectors=(ProjectorType(r"quecc" + _K, _quecc, "QueCC: prompt-conditioned regional queries (K = (G/s)^2), then mlp2x_gelu",
                                 examples=("quecc_k4",), spelling="quecc_k{K}"),),
        settings=(
            Setting("mm_quecc_layers", str, _LAYERS_HELP),
            Setting("mm_quecc_heads", int, "attention heads", default=8, minimum=1),
        ),
        key_prefixes=("mm_quecc_",),
        needs=ModelNeeds(text="question", square_grid=True),  # and the tower layers it resolves (the factory's)
        boundary=QueCC.boundary,
        view=_view("regions"),
        cost=_cost_model("quecc", ("quecc_k{k}",), square=True),
    )),
    register_plugin(CompressorPlugin(
        name="tokenpacker",
        projectors=(ProjectorType(r"tokenpacker" + _K, _tokenpacker,
                                  "TokenPacker: point-to-region queries over multi-level features (K = (G/s)^2), then its MLP",
                                 examples=("tokenpacker_k9",), spelling="tokenpacker_k{K}"),),
        settings=(
            Setting("mm_tokenpacker_layers", str, _LAYERS_HELP),
            Setting("mm_tokenpacker_heads", int, "attention heads (default: D // 128)", minimum=1),
        ),
        key_prefixes=("mm_tokenpacker_",),
        needs=ModelNeeds(square_grid=True),  # and the tower layers it resolves (the factory's)
        boundary=TokenPacker.boundary,
        view=_view("regions"),
        cost=_cost_model("tokenpacker", ("tokenpacker_k{k}",), square=True),
        video_showcase=("tokenpacker_k16",),
    )),
    register_plugin(CompressorPlugin(
        name="fouriervlm",
        projectors=(ProjectorType(r"fouriervlm" + _K, _fouriervlm, "Fourier-VLM: DCT low-pass to a CxC grid (K = C^2), then mlp2x_gelu",
                                 examples=("fouriervlm_k4",), spelling="fouriervlm_k{K}"),),
        settings=(Setting("mm_fouriervlm_rescale", bool, "scale by C/sqrt(H*W) so a constant grid keeps its value", default=False),),
        key_prefixes=("mm_fouriervlm_",),
        needs=ModelNeeds(square_grid=True),
        boundary=FourierVLM.boundary,
        view=_view("fouriervlm"),
        cost=_cost_model("fourier_vlm", ("fouriervlm_k{k}",), square=True),
    )),
)


# ==================================================================================================================
# VisionZip, VisPruner, CDPruner (issue 32): registration glue only. The methods, their FLOP counts and their view
# data are the pure modules braco_patch/baselines/{visionzip,vispruner,cdpruner}.py; what follows adapts the model's
# CompressorInputs to their arguments, checks budgets against the tower, and declares the three plugins.


class InputsThenProject(CompressThenProject):
    """A pre-projector compressor that takes named tensors of :class:`CompressorInputs` (``read(inputs) -> kwargs``),
    then ``mlp2x_gelu`` (keys ``0.*``, ``2.*``, as :class:`CompressThenProject`)."""

    def __init__(self, compressor: nn.Module, mm_hidden: int, hidden: int, read: Any) -> None:
        super().__init__(compressor, mm_hidden, hidden)
        self.read = read

    def compress(self, features: torch.Tensor, inputs: Any = None) -> torch.Tensor:
        if inputs is None:
            raise ValueError(f"{type(self.compressor).__name__} reads the vision tower's attention; call it through encode_images")
        return self.compressor(features, **self.read(inputs))


class ProjectThenSelect(CompressThenProject):
    """``mlp2x_gelu`` (keys ``0.*``, ``2.*``), then a selector on the projected tokens that may weigh them by the
    instruction (CDPruner): ``selector(tokens, paired_features, text_embeds)``."""

    def forward(self, features: torch.Tensor, inputs: Any = None) -> torch.Tensor:
        tokens = self.project(features)
        text = None if inputs is None else inputs.prompt
        return self.compressor(tokens, None if text is None else inputs.paired_features, text)


def _visionzip_inputs(inputs: Any) -> dict[str, Any]:
    return {"attention": inputs.attention, "keys": inputs.keys, "cls_token": inputs.cls_token}


def _vispruner_inputs(inputs: Any) -> dict[str, Any]:
    return {"attention": inputs.attention}


def _grid_budget(context: BuildContext, budget: int, extra: int = 0, least: int = 1) -> None:
    """Refuse a budget above the tower's patch count (plus ``extra`` tokens the method adds, e.g. the CLS token)."""
    _check_patch_features(context)
    if context.tower is not None:  # without a tower (a bare config) the forward pass checks K
        grid = context.tower.grid
        _check_selection_budget(budget, grid, context.projector_type, grid[0] * grid[1] + extra, least)


def _visionzip(context: BuildContext) -> BuiltProjector:
    budget = _budget(context.match)
    if budget < 2:
        raise ValueError(f"mm_projector_type {context.projector_type!r} keeps {budget} token, but VisionZip needs at least 2 "
                         "(a dominant and a contextual one)")
    has_cls = context.tower.has_cls if context.tower is not None else True
    _grid_budget(context, budget, int(has_cls), least=2)
    stored = context.setting("mm_visionzip_contextual")
    contextual = default_contextual(budget) if stored is None else int(stored)
    if contextual >= budget:
        raise ValueError(
            f"mm_projector_type {context.projector_type!r} keeps {budget} tokens, so mm_visionzip_contextual must be below {budget} "
            f"(the rest are the dominant tokens), got {contextual}"
        )
    module = VisionZip(context.mm_hidden, budget, contextual=contextual)
    keys = {"mm_visionzip_contextual": contextual}
    return BuiltProjector(InputsThenProject(module, context.mm_hidden, context.hidden, _visionzip_inputs), keys)


def _vispruner(context: BuildContext) -> BuiltProjector:
    budget = _budget(context.match)
    _grid_budget(context, budget)
    settings = _Resolved(context)
    module = VisPruner(context.mm_hidden, budget, important_ratio=float(settings.get("mm_vispruner_important_ratio", 0.5)))
    return BuiltProjector(InputsThenProject(module, context.mm_hidden, context.hidden, _vispruner_inputs), settings.keys)


def _cdpruner(context: BuildContext) -> BuiltProjector:
    budget = _budget(context.match)
    _grid_budget(context, budget)
    return BuiltProjector(ProjectThenSelect(CDPruner(budget), context.mm_hidden, context.hidden))


def _prellm_cost(method: str, template: str, options: Any = None) -> CostModel:
    """The cost model of a pre-LLM method: K from the name, the method's settings from the config (``options``)."""

    def module_flops(config: Any, setting: Any) -> Any:
        from .module_flops import baseline_module_flops

        name = str(config.mm_projector_type)
        _, match = resolve_projector(name)
        return baseline_module_flops(method, _budget(match), setting, projector_type=name, **(options(config) if options else {}))

    return CostModel(module_flops=module_flops, types_at_budget=lambda budget: [template.format(k=budget)])


def _present(config: Any, **keys: str) -> dict[str, Any]:
    """``{option: config value}`` for the config keys that are set (``option=key``)."""
    return {option: getattr(config, key) for option, key in keys.items() if getattr(config, key, None) is not None}


PRE_LLM_PLUGINS = (
    register_plugin(CompressorPlugin(
        name="visionzip",
        projectors=(ProjectorType(r"visionzip" + _K, _visionzip,
                                  "VisionZip: CLS-attention dominant tokens (CLS kept) + key-similarity contextual merges, then mlp2x_gelu",
                                  examples=("visionzip_k9",), spelling="visionzip_k{K}"),),
        settings=(Setting("mm_visionzip_contextual", int, "C of the K tokens are contextual merges, the rest dominant "
                          "(default: the paper's 10 in 64, max(1, round(K*10/64)))", minimum=1),),
        key_prefixes=("mm_visionzip_",),
        needs=ModelNeeds(attention=0),  # the layer that produced the select layer's features (the release's attentions[-2])
        boundary=VisionZip.boundary,
        view=_view("visionzip"),
        cost=_prellm_cost("visionzip", "visionzip_k{k}", lambda config: _present(config, contextual="mm_visionzip_contextual")),
    )),
    register_plugin(CompressorPlugin(
        name="vispruner",
        projectors=(ProjectorType(r"vispruner" + _K, _vispruner,
                                  "VisPruner: CLS-attention important tokens + duplicate-free diverse tokens, then mlp2x_gelu",
                                  examples=("vispruner_k9",), spelling="vispruner_k{K}"),),
        settings=(Setting("mm_vispruner_important_ratio", float, "r, the share of K chosen by attention (the release's --important_ratio)",
                          default=0.5, minimum=0.0, maximum=1.0),),
        key_prefixes=("mm_vispruner_",),
        needs=ModelNeeds(attention=0),  # attentions[select_layer], as the release reads them
        boundary=VisPruner.boundary,
        view=_view("vispruner"),
        cost=_prellm_cost("vispruner", "vispruner_k{k}", lambda config: _present(config, important_ratio="mm_vispruner_important_ratio")),
    )),
    register_plugin(CompressorPlugin(
        name="cdpruner",
        projectors=(ProjectorType(r"cdpruner" + _K, _cdpruner,
                                  "CDPruner: mlp2x_gelu, then an instruction-conditioned DPP keeps K tokens",
                                  examples=("cdpruner_k9",), spelling="cdpruner_k{K}"),),
        key_prefixes=("mm_cdpruner_",),
        needs=ModelNeeds(text="instruction", text_encoder="tower"),  # CLIP's text tower on the instruction, as the release
        boundary=CDPruner.boundary,
        view=_view("cdpruner"),
        cost=_prellm_cost("cdpruner", "cdpruner_k{k}"),
    )),
)
