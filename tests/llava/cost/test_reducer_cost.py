"""``braco cost --reducer``: the per-layer LLM prefill of an in-LLM reducer against the direct formula (LLaMA-7B:
``2·T·h·4h`` attention projections and ``3·2·T·h·m`` SwiGLU per layer, each layer at its own T), and the command's
refusals."""

from __future__ import annotations

import pytest

from braco_patch.cost.cli import main
from llava.cost.reducer import reducer_prefill
from llava.plugin_api import LMDims

LLAMA_7B = LMDims(hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32, head_dim=128, vocab=32000)
H, M, V = 4096, 11008, 32000


def layer(tokens: int) -> int:
    return 2 * tokens * H * 4 * H + 3 * 2 * tokens * H * M


def selection(tokens: int, queries: int = 1) -> int:
    return 2 * tokens * H * H + 2 * queries * H * H + 2 * queries * tokens * H  # k_proj, q_proj, one QKᵀ row per head


def test_fastv_per_layer_equals_the_direct_formula() -> None:
    table = reducer_prefill("fastv_k2_r50", LLAMA_7B, 576, 52)
    assert [row.tokens for row in table.layers] == [628, 628] + [340] * 30
    assert [row.flops for row in table.layers] == [layer(628)] * 2 + [layer(340)] * 30
    assert [row.selection for row in table.layers] == [0, selection(628)] + [0] * 30  # layer K-1's attention
    assert table.total == 2 * layer(628) + 30 * layer(340) + selection(628) + 2 * 340 * H * V
    assert table.baseline == 32 * layer(628) + 2 * 628 * H * V


def test_pyramiddrop_selections_read_each_stage_layers_input_before_its_drop() -> None:
    table = reducer_prefill("pyramiddrop_s8_r50", LLAMA_7B, 576, 52, lm_head="last")
    assert [row.visual for row in table.layers] == [576] * 8 + [288] * 8 + [144] * 8 + [72] * 8
    assert {row.layer: row.selection for row in table.layers if row.selection} == {
        8: selection(628), 16: selection(340), 24: selection(196)}
    assert table.lm_head == 2 * H * V


def test_the_command_prints_every_layer_and_refuses_an_unknown_reducer(capsys) -> None:
    result = main(["--reducer", "fastv_k2_r50"])
    out = capsys.readouterr().out
    assert "never averaged" in out and out.count("\n   31  ") == 1
    assert result["reducers"][0]["layers"][2]["visual"] == 288
    with pytest.raises(SystemExit) as exited:
        main(["--reducer", "fastv"])
    assert exited.value.code == 2 and "unknown reducer 'fastv'" in capsys.readouterr().err


def test_a_capped_count_stops_at_its_depth() -> None:
    """``depth``: the first layers of the whole LLM's run; steps at later layers (PyramidDrop's 16 and 24) not counted."""
    table = reducer_prefill("pyramiddrop_s8_r50", LLAMA_7B, 576, 52, depth=9)
    assert [row.visual for row in table.layers] == [576] * 8 + [288]
    assert table.total == 8 * layer(628) + layer(340) + selection(628) + 2 * 340 * H * V
    assert table.baseline == 9 * layer(628) + 2 * 628 * H * V
