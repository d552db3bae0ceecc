"""Upstream LLaVA's projectors, declared as a plugin like every other: ``linear``, ``mlp{N}x_gelu``, ``identity``.

One file on the plugin API (:mod:`llava.plugin_api`), as every method is: the factories, the cost and the
declaration. They keep upstream's layouts (``mlp2x_gelu``: ``Sequential(Linear, GELU, Linear)``, weights ``0.*`` and
``2.*``), send every patch token (K = N, boundary ``post``) and declare their cost like any plugin, so the cost engine
writes no projector grammar of its own. :mod:`.registry` registers :data:`PLUGIN` before any installed plugin.
"""

from __future__ import annotations

import torch.nn as nn

from llava.plugin_api import (
    BuildContext,
    BuiltProjector,
    CompressorPlugin,
    CostModel,
    CostSetting,
    ModuleCost,
    NameForm,
    ProjectorType,
    mlp_projector,
    projector_flops,
)

__all__ = ["MLP_FORM", "MLP_PATTERN", "PLUGIN", "mlp_projector"]

#: ``mlp{N}x_gelu``: N linear layers with exact GELUs between them.
MLP_FORM = NameForm("mlp{N}x_gelu")
MLP_PATTERN = MLP_FORM.regex


def _linear(context: BuildContext) -> BuiltProjector:
    return BuiltProjector(nn.Linear(context.mm_hidden, context.hidden))


def _mlp(context: BuildContext) -> BuiltProjector:
    return BuiltProjector(nn.Sequential(*mlp_projector(context.mm_hidden, context.hidden, int(context.match["N"]))))


def _identity(context: BuildContext) -> BuiltProjector:
    if context.mm_hidden != context.hidden:
        raise ValueError(
            f"mm_projector_type 'identity' passes the tower's {context.mm_hidden}-wide features on unchanged, but the "
            f"language model is {context.hidden} wide; use linear or mlp2x_gelu"
        )
    return BuiltProjector(nn.Identity())


def _module_flops(context: BuildContext, setting: CostSetting) -> ModuleCost:
    """No compressor: all N tokens go through the projector (``identity``: nothing is counted)."""
    name, n = context.projector_type, setting.tokens
    depth = {"identity": 0, "linear": 1}[name] if name in ("identity", "linear") else int(context.match["N"])
    projector = projector_flops(n, setting.mm_hidden, setting.lm.hidden, depth) if depth else {}
    return ModuleCost(name, n, "post", projector=projector)


PLUGIN = CompressorPlugin(
    name="builtin",
    projectors=(
        ProjectorType.named("linear", _linear, "Linear(mm_hidden_size, hidden_size)"),
        ProjectorType.named(MLP_FORM, _mlp, "Linear, then (N-1) x [GELU, Linear]; weights at even indices",
                            examples=("mlp2x_gelu", "mlp1x_gelu", "mlp3x_gelu")),
        ProjectorType.named("identity", _identity, "no projection (mm_hidden_size must equal hidden_size)"),
    ),
    boundary="post",
    cost=CostModel(module_flops=_module_flops),
    showcase=("mlp2x_gelu",),
    video_showcase=("mlp2x_gelu",),
)
