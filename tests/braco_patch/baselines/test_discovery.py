"""A method is one file: a package's method files are found and registered by discovery, and one file holding a
method's module, FLOPs, factory, cost, view and ``PLUGIN`` (on the plugin API alone) is enough for the registry, the
builder, the cost engine, ``all`` at a budget and the demo panel."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from braco_patch.baselines import method_modules
from braco_patch.baselines.llava_plugin import PLUGINS, discover
from llava.cost.module import expand_types, module_cost, types_at_budget
from llava.model.multimodal_projector.builder import build_vision_projector
from llava.model.multimodal_projector.registry import plugin_for, register_plugin, unregister_plugin
from llava.plugin_api import CostSetting, LMDims

METHOD_FILE = '''
"""Chunk pooling: the N tokens in K consecutive chunks, each averaged, then mlp2x_gelu. A whole method in one file."""

import torch
import torch.nn as nn

from llava.plugin_api import (BuiltProjector, CompressorPlugin, CostModel, ModuleCost, NameForm, ProjectorType,
                              mlp_projector, projector_flops)

__all__ = ["ChunkPool", "PLUGIN"]

NAME = NameForm("chunkpool_k{K}")


class ChunkPool(nn.Module):
    def __init__(self, budget):
        super().__init__()
        self.budget = budget

    def forward(self, x):
        return torch.stack([part.mean(dim=1) for part in x.tensor_split(self.budget, dim=1)], dim=1)


def _factory(context):
    layers = [ChunkPool(int(context.match["K"])), *mlp_projector(context.mm_hidden, context.hidden, 2)]
    return BuiltProjector(nn.Sequential(*layers))


def _cost(context, setting):
    k = int(context.match["K"])
    return ModuleCost(context.projector_type, k, "pre", {"add": setting.tokens * setting.mm_hidden},
                      projector_flops(k, setting.mm_hidden, setting.lm.hidden, setting.projector_depth))


def _view(projector, inputs):
    return None


PLUGIN = CompressorPlugin(name="chunkpool", projectors=(ProjectorType.named(NAME, _factory, examples=("chunkpool_k4",)),),
                          cost=CostModel(module_flops=_cost), view=_view)
'''


@pytest.fixture
def method_package(tmp_path: Path, monkeypatch):
    """A package ``toymethods`` with one method file and a shared ``_helpers`` module (which discovery skips)."""
    package = tmp_path / "toymethods"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "_helpers.py").write_text("PLUGIN = 'not a method'\n", encoding="utf-8")
    (package / "chunkpool.py").write_text(textwrap.dedent(METHOD_FILE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "toymethods"
    for name in [name for name in sys.modules if name.startswith("toymethods")]:
        del sys.modules[name]
    unregister_plugin("chunkpool")


def test_every_method_file_of_the_baselines_is_found():
    assert [plugin.name for plugin in PLUGINS] == method_modules() == sorted(plugin.name for plugin in discover())


def test_one_file_is_a_whole_method(method_package):
    assert method_modules(importlib.import_module(method_package).__path__) == ["chunkpool"]
    (plugin,) = discover(method_package)
    register_plugin(plugin)
    assert plugin_for("chunkpool_k4") is plugin
    # the builder builds it from a config alone
    config = SimpleNamespace(mm_projector_type="chunkpool_k4", mm_hidden_size=8, hidden_size=12)
    projector = build_vision_projector(config)
    assert projector(torch.randn(2, 16, 8)).shape == (2, 4, 12)
    # the cost engine counts it, with the method's one name on the row
    setting = CostSetting(mm_hidden=8, lm=LMDims(hidden=12, intermediate=24, layers=1, heads=2, kv_heads=2, head_dim=6, vocab=10), grid=(4, 4))
    cost = module_cost("chunkpool_k4", setting)
    assert (cost.method, cost.tokens, cost.pre, cost.post) == ("chunkpool", 4, 16 * 8, 16 * 8 + 2 * 4 * 8 * 12 + 2 * 4 * 12 * 12)
    # 'all' at a budget lists it, its type spelt by its form
    assert types_at_budget(9)["chunkpool"] == ["chunkpool_k9"]
    assert "chunkpool_k4" in expand_types(["all"], [4], setting)


def test_a_package_without_methods_is_an_error(tmp_path: Path, monkeypatch):
    (tmp_path / "nomethods").mkdir()
    (tmp_path / "nomethods" / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(RuntimeError, match="no method file of 'nomethods' declares a PLUGIN"):
            discover("nomethods")
    finally:
        sys.modules.pop("nomethods", None)
