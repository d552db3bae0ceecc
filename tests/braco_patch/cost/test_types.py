"""``braco cost`` over projector types: the plugin's cost model, ``all`` at a budget, measured rows, and the
paper's compressor-cost table at K = 16 (tab:main_compressor_cost)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

from braco_patch.cost.by_type import compressors_table
from braco_patch.cost.cli import main
from llava.cost.flops import LMDims
from llava.cost.module import CostModel, CostSetting, ModuleCost, module_cost
from llava.cost.pipeline import cost_setting, projector_pipeline_flops
from llava.cost.presets import get_preset, load_spec
from llava.model.multimodal_projector.builder import mlp_projector
from llava.model.multimodal_projector.plugins import (
    BuildContext,
    BuiltProjector,
    CompressorPlugin,
    ModelNeeds,
    ProjectorType,
    register_plugin,
    unregister_plugin,
)

from .conftest import TINY_LLM, TINY_TOWER


class KeepByAttention(nn.Module):
    """Post-projector toy compressor: ``mlp2x_gelu`` on all N tokens, then the K with the most CLS-free attention."""

    def __init__(self, dim: int, hidden: int, budget: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(*mlp_projector(dim, hidden, 2))
        self.budget = budget

    def forward(self, features, inputs):
        tokens = self.mlp(features)
        score = inputs.attention[..., -features.shape[1]:].mean(dim=(1, 2))  # [B, N]: attention each patch receives (T = N + 1, CLS first)
        idx = score.topk(self.budget, dim=1).indices.sort(dim=1).values
        return torch.gather(tokens, 1, idx.unsqueeze(-1).expand(-1, -1, tokens.shape[-1]))


def _toy_factory(context: BuildContext) -> BuiltProjector:
    return BuiltProjector(KeepByAttention(context.mm_hidden, context.hidden, int(context.match.group(1))))


def _toy_flops(context: BuildContext, setting: CostSetting) -> ModuleCost:
    k = int(context.projector_type.removeprefix("toykeep_k"))
    d, h, n = setting.mm_hidden, setting.lm.hidden, setting.tokens
    return ModuleCost(context.projector_type, k, "post", {}, {"linear_1": 2 * n * d * h, "linear_2": 2 * n * h * h})


def _toy_budget(budget: int) -> list[str]:
    if budget > 16:
        raise ValueError(f"toykeep keeps at most 16 tokens, got {budget}")
    return [f"toykeep_k{budget}"]


@pytest.fixture
def toy_plugin():
    plugin = register_plugin(CompressorPlugin(
        name="toykeep",
        projectors=(ProjectorType(r"toykeep_k(\d+)", _toy_factory, examples=("toykeep_k4",)),),
        needs=ModelNeeds(attention=0), boundary="post",
        cost=CostModel(module_flops=_toy_flops, types_at_budget=_toy_budget),
    ))
    yield plugin
    unregister_plugin("toykeep")


def test_all_expands_from_the_registry_and_is_measured(toy_plugin, tiny_llava, tmp_path, capsys):
    out = tmp_path / "cost.json"
    main(["--config", str(tiny_llava), "--projector", "all", "--budgets", "4", "--measure", "--device", "cpu", "--warmup", "0",
          "--iters", "2", "--parts", "boundary", "--json", str(out)])
    text = capsys.readouterr().out
    assert "(g) projector types" in text and "(h) projector types as built" in text
    saved = json.loads(out.read_text())
    types = {r["type"]: r for r in saved["types"]}
    # every installed plugin's type at the budget (the baselines too), the reference first
    assert list(types)[0] == "mlp2x_gelu" and {"braco_k4", "toykeep_k4", "divprune_k4", "fouriervlm_k4", "quecc_k4"} <= set(types)
    n, d, h = 16, TINY_TOWER["hidden_size"], TINY_LLM["hidden_size"]
    assert types["toykeep_k4"]["tokens"] == 4 and types["toykeep_k4"]["post"] == 2 * n * d * h + 2 * n * h * h
    assert types["mlp2x_gelu"]["post"] == types["toykeep_k4"]["post"]  # the same MLP on the same N tokens
    # the LLM of the pipeline sees K + prompt tokens: 4 + 52 vs 16 + 52
    assert types["toykeep_k4"]["pipeline"]["llm"] < types["mlp2x_gelu"]["pipeline"]["llm"]
    measured = {r["variant"]: r for r in saved["measure"]["types"]["module"]}
    for name in ("mlp2x_gelu", "toykeep_k4"):  # torch.profiler counts the same matrix products
        assert measured[name]["status"] == "ok" and measured[name]["profiler_matmul"] == measured[name]["analytic"]
    braco = measured["braco_k4"]  # coder (our computation) + MLP: the elementwise parts are what the profiler calls add/mul
    assert braco["status"] == "ok" and braco["median_ms"] > 0 and braco["profiler_matmul"] == braco["analytic_matmul"] < braco["analytic"]


def test_full_prefill_of_every_type_is_measured(toy_plugin, tiny_llava, tmp_path, capsys):
    out = tmp_path / "cost.json"
    main(["--config", str(tiny_llava), "--projector", "all", "--budgets", "4", "--measure", "--device", "cpu", "--warmup", "0",
          "--iters", "1", "--parts", "pipeline", "--layers", "1", "--prompt-tokens", "5", "--json", str(out)])
    assert "(i) full-pipeline prefill per projector type" in capsys.readouterr().out
    rows = {r["variant"]: r for r in json.loads(out.read_text())["measure"]["types"]["pipeline"]}
    # every type builds, QueCC too: its tower depth comes from the measured tower, not from a file the config names
    assert {"mlp2x_gelu", "braco_k4", "toykeep_k4", "divprune_k4", "fouriervlm_k4", "quecc_k4"} <= set(rows)
    # QueCC's question pass through the LLM is counted but not run (the row says so): the profiler sees less
    assert rows["quecc_k4"]["note"] == "prompt-conditioned: LLM question pass not run"
    assert rows["quecc_k4"]["status"] == "ok" and rows["quecc_k4"]["profiler_matmul"] < rows["quecc_k4"]["analytic_matmul"]
    for name, row in rows.items():  # tower + projector + one LLM layer: the profiler counts what we count ...
        if row["note"]:  # ... but a text pass the row says was not run (QueCC's LLM pass, CDPruner's CLIP text pass)
            continue
        assert row["status"] == "ok" and row["profiler_matmul"] >= row["analytic_matmul"], name
        if name in ("mlp2x_gelu", "braco_k4", "toykeep_k4", "divprune_k4", "fouriervlm_k4", "prumerge_k4"):
            assert row["profiler_matmul"] == row["analytic_matmul"], name
    # ... except the attention scores of modules that compute attention with explicit matmuls (MQT, TokenPacker),
    # which the profiler sees and the analytic count leaves out (the paper's convention, as for the LLM's SDPA)
    assert rows["toykeep_k4"]["llm_tokens"] == 4 + 5 and rows["mlp2x_gelu"]["llm_tokens"] == 16 + 5


def test_a_refused_budget_leaves_the_plugin_out(toy_plugin, tiny_llava, capsys):
    result = main(["--config", str(tiny_llava), "--projector", "all", "--budgets", "36"])
    assert [r["type"] for r in result["types"]] == ["mlp2x_gelu"]  # Braco's C = 5 does not fit 4x4, toykeep refuses 36
    assert result["pipeline"][1:] == []  # and no Braco allocation reaches tables (a)-(c)
    # the in-LLM reducers on this 2-layer LLM with 16 image tokens: each plugin's first type that fits, or left out
    reducers = {row["method"]: row for row in result["reducers"]}
    assert reducers["fastv"]["type"] == "fastv_k1_r50" and reducers["fastv"]["per_layer"] == "16 x1, 8 x1"
    assert "left_out" in reducers["sparsevlm"] and "sparsevlm_k192" in reducers["sparsevlm"]["left_out"]
    assert "left out: none of ['sparsevlm_k192'" in capsys.readouterr().out


def test_pipeline_of_a_plugin_type_against_a_direct_count(toy_plugin, tiny_llava):
    spec = load_spec(tiny_llava)
    got = projector_pipeline_flops(spec, "toykeep_k4", prompt_tokens=10)
    h, m, layers, vocab, kv = 48, 96, 2, 100, 2 * 12  # 2 KV heads of width 12
    t = 4 + 10
    llm = layers * (2 * 2 * t * h * h + 2 * 2 * t * h * kv + 3 * 2 * t * h * m) + 2 * t * h * vocab
    assert got["visual_tokens"] == 4 and got["llm"] == llm and got["boundary"] == "post"


def test_unknown_types_and_plugins_without_a_cost_model(toy_plugin):
    setting = cost_setting(get_preset("llava-v1.5-7b"))
    with pytest.raises(ValueError, match="unknown projector type 'nosuch_k4'"):
        module_cost("nosuch_k4", setting)
    register_plugin(CompressorPlugin(name="toynotool", projectors=(ProjectorType("toynotool", lambda context: BuiltProjector(nn.Identity())),)))
    try:
        with pytest.raises(ValueError, match="'toynotool' compressor .* declares no module FLOPs, so its cost cannot be counted"):
            module_cost("toynotool", setting)
    finally:
        unregister_plugin("toynotool")


PAPER = {"tokenpacker": 15.271, "quecc": 109.504, "mqt": 2.674, "prumerge": 0.724, "divprune": 29.603}


def test_compressor_table_against_the_paper_at_k16():
    setting = cost_setting(get_preset("llava-v1.5-7b"))
    rows = {(r["method"], r["accounting"], r["boundary"]): r for r in compressors_table(setting, 16)}
    at = lambda key: rows[key]["at_boundary"] / 1e9  # noqa: E731
    assert at(("tokenpacker", "ours", "post")) == pytest.approx(PAPER["tokenpacker"], rel=1e-3)
    assert at(("quecc", "ours", "pre")) == pytest.approx(PAPER["quecc"], rel=1e-3)  # 7 question tokens
    assert at(("mqt", "ours", "pre")) == pytest.approx(PAPER["mqt"], rel=0.025)
    assert at(("prumerge", "repository", "pre")) == pytest.approx(PAPER["prumerge"], rel=0.01)
    # DivPrune: mlp2x_gelu on 576 tokens + one 576 x 576 similarity in 4096 dims; the paper's is 9.2 % higher
    direct = 2 * 576 * 1024 * 4096 + 2 * 576 * 4096 * 4096 + 2 * 576 * 576 * 4096
    assert rows[("divprune", "ours", "post")]["at_boundary"] == direct
    assert direct / 1e9 / PAPER["divprune"] - 1 == pytest.approx(-0.092, abs=0.001)
    # QueCC's figure is almost all its prompt pass: without it the module is 17 GFLOP
    assert rows[("quecc", "ours", "pre")]["pre"] - rows[("quecc", "ours", "pre")]["at_boundary"] == 0


def test_budgets_a_baseline_cannot_give():
    setting = cost_setting(get_preset("llava-v1.5-7b"))
    with pytest.raises(ValueError, match=r"QueCC cannot give 25 tokens on a 24x24 grid.*accepted budgets"):
        module_cost("quecc_k25", setting)
    with pytest.raises(ValueError, match="fouriervlm gives C² tokens"):
        module_cost("fouriervlm_k10", setting)
    with pytest.raises(ValueError, match="unknown projector type 'nosuch_k16'"):
        module_cost("nosuch_k16", setting)
    lm = LMDims(hidden=48, intermediate=96, layers=2, heads=4, kv_heads=2, head_dim=12, vocab=100)
    with pytest.raises(ValueError, match="square patch grid, got 4x6"):
        module_cost("tokenpacker_k4", CostSetting(mm_hidden=32, lm=lm, grid=(4, 6)))


def test_table_compressors_command(capsys):
    result = main(["--table", "compressors", "--budgets", "16", "9"])
    text = capsys.readouterr().out
    assert "(f) compressor modules at K = 16" in text and "(f) compressor modules at K = 9" in text
    methods = [r["method"] for r in result["compressors"]["16"]]
    from braco_patch.baselines.llava_plugin import PLUGINS

    # Braco and every method file found by discovery, the paper's six baselines among them
    assert set(methods) == {"braco"} | {plugin.name for plugin in PLUGINS}
    assert {"prumerge", "divprune", "mqt", "quecc", "tokenpacker", "fouriervlm"} <= set(methods)
    assert all(r["paper_gflops"] is None for r in result["compressors"]["9"])  # the paper's table is K = 16 only


def test_table_compressors_leaves_out_a_budget_a_method_cannot_give(capsys):
    # 25 = 5 x 5 regions does not divide a 24 x 24 grid (paper: "25 omitted for QueCC"); the table goes on without it.
    result = main(["--table", "compressors", "--budgets", "25"])
    rows = {r["method"]: r for r in result["compressors"]["25"]}
    assert "accepted budgets: [1, 4, 9, 16, 36" in rows["quecc"]["left_out"] and "left_out" in rows["tokenpacker"]
    assert rows["braco"]["tokens"] == 25 and "left_out" not in rows["divprune"]
    assert "quecc        ours       left out: QueCC cannot give 25 tokens" in capsys.readouterr().out


def test_fouriervlm_and_prumerge_split_against_direct_formulas():
    setting = cost_setting(get_preset("llava-v1.5-7b"))
    mlp16 = 2 * 16 * 1024 * 4096 + 2 * 16 * 4096 * 4096
    fourier = module_cost("fouriervlm_k16", setting)
    assert (fourier.pre, fourier.post, fourier.tokens) == (2 * 16 * 576 * 1024, 2 * 16 * 576 * 1024 + mlp16, 16)
    prumerge = module_cost("prumerge_k16", setting)  # 15 kept + the extra token
    score = 2 * 577 * 1024  # the CLS query against the 577 keys of the next layer, one full-width product
    merge = 2 * 15 * 576 * 1024 * 2 + 15 * 1024  # key similarity + dense merge + centre add
    extra = 2 * 576 * 1024 + 576
    assert prumerge.pre == score + merge + extra and prumerge.post == prumerge.pre + mlp16


def test_a_checkpoint_config_is_costed_with_its_stored_settings(tmp_path, tiny_llava):
    from braco_patch.config import BracoConfig
    from braco_patch.cost.coder_flops import compressor_flops
    from llava.cost.flops import total

    values = json.loads(tiny_llava.read_text())
    values.update(mm_projector_type="braco_c1s3", mm_fourier_spatial_hidden_mult=0.0)  # a one-layer scorer
    tiny_llava.write_text(json.dumps(values))
    result = main(["--config", str(tiny_llava), "--projector", "braco_c1s3", "braco_c1s3_coef"])
    rows = {r["type"]: r for r in result["types"]}
    stored = BracoConfig(cutoff=1, residual_tokens=3, scorer_hidden_mult=0.0)
    assert rows["braco_c1s3"]["pre"] == total(compressor_flops(stored, 32, (4, 4), "official"))
    # the other type is not the checkpoint's: the paper's default two-layer scorer
    assert rows["braco_c1s3_coef"]["pre"] == total(compressor_flops(BracoConfig(cutoff=1, residual_tokens=3, coordinates="coef"), 32, (4, 4), "official"))
    assert rows["braco_c1s3"]["pre"] < rows["braco_c1s3_coef"]["pre"]
