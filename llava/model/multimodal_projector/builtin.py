"""Upstream LLaVA's projectors, declared as a plugin like every other: ``linear``, ``mlp{N}x_gelu``, ``identity``.

They keep upstream's layouts (``mlp2x_gelu``: ``Sequential(Linear, GELU, Linear)``, weights ``0.*`` and ``2.*``),
send every patch token (K = N, boundary ``post``) and declare their cost like any plugin, so the cost engine
writes no projector grammar of its own. :mod:`.registry` registers :data:`PLUGIN` before any installed plugin.
"""

from __future__ import annotations

import re
from typing import Any

import torch.nn as nn

from llava.cost.flops import projector_flops
from llava.cost.module import CostModel, CostSetting, ModuleCost

from .contract import BuildContext, BuiltProjector, CompressorPlugin, ProjectorType

__all__ = ["MLP_PATTERN", "PLUGIN", "mlp_projector"]

#: ``mlp{N}x_gelu``: N linear layers with exact GELUs between them.
MLP_PATTERN = r"mlp(\d+)x_gelu"


def mlp_projector(in_features: int, out_features: int, depth: int) -> list[nn.Module]:
    """Upstream's ``mlp{depth}x_gelu`` layers: Linear, then (depth-1) x [GELU (exact), Linear]."""
    if depth < 1:
        raise ValueError(f"mlp projector depth must be at least 1, got {depth}")
    layers: list[nn.Module] = [nn.Linear(in_features, out_features)]
    for _ in range(depth - 1):
        layers += [nn.GELU(), nn.Linear(out_features, out_features)]
    return layers


def _linear(context: BuildContext) -> BuiltProjector:
    return BuiltProjector(nn.Linear(context.mm_hidden, context.hidden))


def _mlp(context: BuildContext) -> BuiltProjector:
    return BuiltProjector(nn.Sequential(*mlp_projector(context.mm_hidden, context.hidden, int(context.match.group(1)))))


def _identity(context: BuildContext) -> BuiltProjector:
    if context.mm_hidden != context.hidden:
        raise ValueError(
            f"mm_projector_type 'identity' passes the tower's {context.mm_hidden}-wide features on unchanged, but the "
            f"language model is {context.hidden} wide; use linear or mlp2x_gelu"
        )
    return BuiltProjector(nn.Identity())


def _depth(projector_type: str) -> int:
    if projector_type == "identity":
        return 0
    if projector_type == "linear":
        return 1
    match = re.fullmatch(MLP_PATTERN, projector_type)
    if match is None:
        raise ValueError(f"{projector_type!r} is not a built-in projector type")
    return int(match.group(1))


def _module_flops(config: Any, setting: CostSetting) -> ModuleCost:
    """No compressor: all N tokens go through the projector (``identity``: nothing is counted)."""
    name, n = str(config.mm_projector_type), setting.tokens
    depth = _depth(name)
    projector = projector_flops(n, setting.mm_hidden, setting.lm.hidden, depth) if depth else {}
    return ModuleCost(name, n, "post", projector=projector)


PLUGIN = CompressorPlugin(
    name="builtin",
    projectors=(
        ProjectorType("linear", _linear, "Linear(mm_hidden_size, hidden_size)"),
        ProjectorType(MLP_PATTERN, _mlp, "Linear, then (N-1) x [GELU, Linear]; weights at even indices",
                      examples=("mlp2x_gelu", "mlp1x_gelu", "mlp3x_gelu"), spelling="mlp{N}x_gelu"),
        ProjectorType("identity", _identity, "no projection (mm_hidden_size must equal hidden_size)"),
    ),
    boundary="post",
    cost=CostModel(module_flops=_module_flops),
    showcase=("mlp2x_gelu",),
    video_showcase=("mlp2x_gelu",),
)
