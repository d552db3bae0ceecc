"""What the baselines' plugin declarations share, on the plugin API alone (:mod:`llava.plugin_api`).

Each method is one file of this package (its module, FLOPs, factory, view and ``PLUGIN``); this module holds the
pieces several of them use, so no rule is written twice: the compress-then-project layout whose keys are exactly
``mlp2x_gelu``'s, the number a type name carries, settings resolution (the resolved values are saved), the grid
checks, the cost helpers and the frame of a demo view. Budgets are checked when the projector is built, from the
build context (the tower's grid and depth): an impossible budget is one ``ValueError`` sentence naming the reason and
the accepted budgets; the cost models refuse the same budgets from the same context.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from llava.plugin_api import BuildContext, CostSetting, NameForm, ViewInputs, linear_flops, mlp_projector, projector_flops

from ._common import multi_level_layers, region_scale

__all__ = [
    "LAYERS_HELP", "SCORES_NOTE", "CompressThenProject", "Resolved", "attention_flops", "check_patch_features", "check_selection_budget", "cost_budget",
    "mlp2_flops", "name_count", "parse_layers", "projector_part", "regional", "regions_view", "scale_parts", "select_layer_attention",
    "square_types", "square_grid_of", "view_of",
]

LAYERS_HELP = ("tower hidden-state indices of the multi-level features, comma-separated (default: 12,16,22,23 on a 24-layer tower, "
               "the same relative depths otherwise)")


# ---------------------------------------------------------------------------------------------- names and settings


def name_count(match: re.Match[str]) -> int | None:
    """The number a type name carries (its last group: the K of ``*_k{K}``, MQT's Q), checked to be positive;
    ``None`` for a name without one (adaptive PruMerge)."""
    groups = [group for group in match.groups() if group is not None]
    if not groups:
        return None
    count = int(groups[-1])
    if count < 1:
        raise ValueError(f"mm_projector_type {match.group(0)!r} asks for {count} tokens; the budget must be a positive integer")
    return count


def parse_layers(value: Any, key: str) -> tuple[int, ...]:
    """``"12,16,22,23"`` (a config string) → ``(12, 16, 22, 23)``, or a one-sentence ``ValueError``."""
    text = str(value).strip()
    if not re.fullmatch(r"-?\d+(\s*,\s*-?\d+)*", text):
        raise ValueError(f"{key} must be comma-separated tower hidden-state indices such as '12,16,22,23', got {value!r}")
    return tuple(int(part) for part in text.split(","))


class Resolved:
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


# ---------------------------------------------------------------------------------------------- checks


def check_patch_features(context: BuildContext) -> None:
    """Methods that work on the patch grid refuse ``mm_vision_select_feature cls_patch``."""
    if context.select_feature != "patch":
        raise ValueError(
            f"mm_projector_type {context.projector_type!r} compresses the patch grid, so mm_vision_select_feature must be "
            f"'patch', got {context.select_feature!r}"
        )


def check_selection_budget(budget: int, grid: tuple[int, int], projector_type: str, most: int, least: int = 1) -> None:
    """Refuse a budget above ``most``, naming the accepted range ``least..most``."""
    if budget > most:
        raise ValueError(
            f"mm_projector_type {projector_type!r} keeps {budget} tokens but the {grid[0]}x{grid[1]} grid has "
            f"{grid[0] * grid[1]} patches; accepted budgets: {least}..{most}"
        )


def regional(context: BuildContext, budget: int, method: str, settings: Resolved) -> tuple[int, tuple[int, ...]]:
    """Grid side and multi-level layers of a regional method (QueCC, TokenPacker), the budget checked against the grid."""
    name = context.projector_type
    check_patch_features(context)
    tower = context.require_tower("splits the tower's grid into regions")
    rows, cols = tower.grid
    if rows != cols:
        raise ValueError(f"mm_projector_type {name!r} splits a square grid into regions, but the tower gives {rows}x{cols}; use a tower with a square grid")
    region_scale(budget, rows, method)
    return rows, settings.layers(f"mm_{method.lower()}_layers", tower.layers)


def square_types(form: NameForm, method: str) -> Callable[[int], list[str]]:
    """The ``types_at_budget`` of a method giving a C×C grid of tokens: ``form`` at K, a K that is not a square number
    refused in one sentence."""

    def types_at_budget(budget: int) -> list[str]:
        side = math.isqrt(budget)
        if side * side != budget:
            raise ValueError(f"{method} gives a square number of tokens (4, 9, 16, 25, ...), not {budget}")
        return [form.format(K=budget)]

    return types_at_budget


# ---------------------------------------------------------------------------------------------- layout


class CompressThenProject(nn.Module):
    """A compressor on tower features, then upstream's ``mlp2x_gelu`` (pre-projector methods).

    State-dict keys: ``0.*`` and ``2.*`` for the MLP, exactly ``mlp2x_gelu``'s, and ``compressor.*`` for a
    compressor with parameters (QueCC). Called as ``projector(features)`` or ``projector(features, inputs)``
    (``inputs`` a :class:`~llava.plugin_api.CompressorInputs`); ``read(projector, features, inputs)`` gives the
    compressor's arguments after the features (``None``: the compressor takes the features alone); ``layers`` are
    the tower layers it reads.

    Returns ``[B, K, hidden]``, or a list of ``[K_b, hidden]`` for adaptive PruMerge.
    """

    def __init__(self, compressor: nn.Module, mm_hidden: int, hidden: int, read: Any = None, layers: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.compressor = compressor
        for index, layer in enumerate(mlp_projector(mm_hidden, hidden, 2)):
            self.add_module(str(index), layer)
        self.read = read
        self.layers = tuple(layers)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The MLP: ``[..., mm_hidden]`` → ``[..., hidden]``."""
        for index in range(3):
            x = self._modules[str(index)](x)
        return x

    def compress(self, features: torch.Tensor, inputs: Any = None) -> torch.Tensor | list[torch.Tensor]:
        """The compressor alone: ``[B, N, D]`` → ``[B, K, D]`` (a list for adaptive PruMerge)."""
        if self.read is None:
            return self.compressor(features)
        if inputs is None:
            raise ValueError(f"{type(self.compressor).__name__} needs the model's CompressorInputs; call it through encode_images")
        return self.compressor(features, *self.read(self, features, inputs))

    def forward(self, features: torch.Tensor, inputs: Any = None) -> torch.Tensor | list[torch.Tensor]:
        out = self.compress(features, inputs)
        if isinstance(out, list):
            return [self.project(tokens) for tokens in out]
        return self.project(out)


# ---------------------------------------------------------------------------------------------- cost


def cost_budget(method: str, budget: int, setting: CostSetting) -> int:
    """``budget``, refused in one sentence when the grid has fewer tokens (no method keeps more than it is given)."""
    if budget > setting.tokens:
        raise ValueError(f"{method} cannot keep {budget} of the {setting.tokens} tokens of a {setting.grid[0]}x{setting.grid[1]} grid")
    return budget


def scale_parts(parts: dict[str, int], batch: int) -> dict[str, int]:
    """Every part of one call's count times ``batch``."""
    return {k: int(v) * batch for k, v in parts.items()}


def attention_flops(q_tokens: int, kv_tokens: int, dim: int, count_attention: bool, kv_per_query: int | None = None) -> dict[str, int]:
    """:class:`~._common.CrossAttention`: q/k/v/out projections (+ scores over ``kv_per_query`` keys per query)."""
    keys = kv_tokens if kv_per_query is None else kv_per_query
    return {
        "attn_q": linear_flops(q_tokens, dim, dim),
        "attn_k": linear_flops(kv_tokens, dim, dim),
        "attn_v": linear_flops(kv_tokens, dim, dim),
        "attention_scores": 4 * q_tokens * keys * dim if count_attention else 0,
        "attn_out": linear_flops(q_tokens, dim, dim),
    }


def mlp2_flops(tokens: int, d_in: int, d: int) -> int:
    """A two-layer MLP ``d_in → d → d`` on ``tokens`` rows."""
    return linear_flops(tokens, d_in, d) + linear_flops(tokens, d, d)


def projector_part(tokens: int, setting: CostSetting) -> dict[str, int]:
    """The ``mlp{N}x_gelu`` a method feeds or follows, on ``tokens`` tokens."""
    return projector_flops(tokens, setting.mm_hidden, setting.lm.hidden, setting.projector_depth)


#: The cost note of a method that reads one tower layer's attention before the LLM (VisionZip, VisPruner).
SCORES_NOTE = ("scores: one tower layer's attention, recomputed (counted with attention scores); "
               "the LLM sees K visual tokens in every layer")


def square_grid_of(setting: CostSetting, method: str) -> int:
    """The side of the setting's grid, which ``method`` needs square."""
    h, w = setting.grid
    if h != w:
        raise ValueError(f"{method} needs a square patch grid, got {h}x{w}")
    return h


# ---------------------------------------------------------------------------------------------- view


def view_of(inputs: ViewInputs, pictures: list[Any], help_text: str, breakdown: str = "", **details: Any) -> Any:
    """A method's panel: the model input first, then ``pictures``; the token summary and ``details`` (lists and
    arrays among them also as ``arrays``)."""
    from llava.serve.panels import CompressorView, Picture, token_details, tokens_summary

    summary = tokens_summary(inputs.tokens_sent, inputs.grid, breakdown)
    return CompressorView(summary, (Picture("model input", inputs.image), *pictures), help_text, {**token_details(inputs), **details},
                          {key: np.asarray(value) for key, value in details.items() if isinstance(value, (list, np.ndarray))})


def select_layer_attention(inputs: ViewInputs, offset: int = 0) -> tuple[Any, Any]:
    """``(tower, its encode output)`` for ``inputs.pixels`` with the attention, queries and keys of the layer the model
    reads for ``ModelNeeds(attention=offset)``: ``0`` the layer that produced the select layer's features (VisionZip,
    VisPruner), ``1`` the next one (PruMerge)."""
    from llava.serve.panels import tower_attention

    model = inputs.model
    return model.get_vision_tower(), tower_attention(model, inputs.pixels, offset)


def regions_view(projector: Any, inputs: ViewInputs) -> Any:
    """A regional method's panel (QueCC, TokenPacker): the ``s x s`` region each output token attends to
    (``details["regions"]``: ``[K, s²]`` grid positions)."""
    from llava.serve.panels import regions_picture

    module = getattr(projector, "compressor", projector)
    regions = module.regions().cpu().numpy()
    labels = np.zeros(inputs.grid[0] * inputs.grid[1], dtype=np.int64)
    for token, positions in enumerate(regions):
        labels[positions] = token
    name = type(module).__name__.replace("Compressor", "").replace("Projector", "")
    picture = regions_picture(f"{len(regions)} regions of {module.scale}x{module.scale}", inputs.image, labels.reshape(inputs.grid))
    help_text = f"Each colour is one {name} output token: its query attends only to the patches of its own region."
    return view_of(inputs, [picture], help_text, f"{len(regions)} regions", regions=regions.tolist())
