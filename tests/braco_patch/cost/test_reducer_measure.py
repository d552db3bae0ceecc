"""``braco cost --reducer NAME --measure``: the timed call runs the reducer through the real seam (each layer's rows,
the logits and the profiler's matrix-product FLOPs are those of the reduced token counts, against the direct formula),
the call without it is the plain model, and every refusal is one sentence before anything is printed."""

from __future__ import annotations

import json

import pytest
import torch

from braco_patch.cost.cli import main
from llava.cost.measure import MeasureOptions
from llava.cost.presets import load_spec
from llava.cost.reducer_measure import ReducerLLM, plan_reducer

from .conftest import TINY_LLM, write_tiny_llava

H, M, V = TINY_LLM["hidden_size"], TINY_LLM["intermediate_size"], TINY_LLM["vocab_size"]
HEADS, HEAD_DIM = TINY_LLM["num_attention_heads"], H // TINY_LLM["num_attention_heads"]
KV = TINY_LLM["num_key_value_heads"] * HEAD_DIM  # the width of k_proj and v_proj
TEXT = 5  # prompt tokens; the tiny tower's 4x4 grid gives 16 image tokens


@pytest.fixture
def tiny(tmp_path):
    """The tiny LLaVA config with a 4-layer LLM (FastV's layer 2 and PyramidDrop's stages fit)."""
    return write_tiny_llava(tmp_path, num_hidden_layers=4)


def layer(tokens: int) -> int:
    """One decoder layer's matrix products: q/o (H x H), k/v (H x KV), SwiGLU (3 x H x M)."""
    return 2 * tokens * (2 * H * H + 2 * H * KV) + 3 * 2 * tokens * H * M


def selection(tokens: int, queries: int = 1) -> int:
    """What the seam computes for one attention row set: k_proj over the rows, q_proj over the queries, QKᵀ."""
    return 2 * tokens * H * KV + 2 * queries * H * H + 2 * queries * tokens * HEADS * HEAD_DIM


def _cpu(layers: int | None = None) -> MeasureOptions:
    return MeasureOptions(device=torch.device("cpu"), dtype=torch.float32, warmup=0, iters=1, llm_layers=layers)


def test_the_timed_call_runs_fastv_through_the_seam(tiny) -> None:
    spec = load_spec(str(tiny))
    model = ReducerLLM(spec, _cpu())
    seen: list[int] = []  # rows each decoder layer runs on, read after the seam's own pre-hook
    for block in model.llm.model.layers:
        block.register_forward_pre_hook(lambda module, args, kwargs: seen.append(args[0].shape[1]), with_kwargs=True)
    plan = plan_reducer("fastv_k2_r50", spec.llm, 16, TEXT, 4, count_attention=False, lm_head="all")
    embeds, visual = model.inputs(2, 16, TEXT)
    logits, state = model.prefill(embeds, visual, plan.steps)
    kept = round(16 * 0.5)  # FastV's release: round(N (1 - R)) image tokens from layer K = 2 on
    assert seen == [16 + TEXT] * 2 + [kept + TEXT] * 2
    assert logits.shape == (2, kept + TEXT, V)
    assert state.done and state.kept[2].shape == (2, kept + TEXT)
    assert (state.kept[2][:, -TEXT:] == torch.arange(16, 16 + TEXT)).all()  # every prompt token stays
    seen.clear()
    plain, none = model.prefill(embeds, visual)
    assert seen == [16 + TEXT] * 4 and plain.shape == (2, 16 + TEXT, V) and none is None


def test_without_a_reducer_the_call_is_the_plain_model(tiny) -> None:
    from transformers import LlamaForCausalLM

    spec = load_spec(str(tiny))
    model = ReducerLLM(spec, _cpu())
    embeds, visual = model.inputs(1, 16, TEXT)
    torch.manual_seed(0)
    plain = LlamaForCausalLM._from_config(spec.llm, dtype=torch.float32, attn_implementation="sdpa").eval()
    with torch.no_grad():
        expected = plain(inputs_embeds=embeds, use_cache=False).logits
    assert torch.equal(model.prefill(embeds, visual)[0], expected)


def test_the_command_times_each_reducer_against_the_same_prefill(tiny, tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    main(["--config", str(tiny), "--reducer", "fastv_k2_r50", "pyramiddrop_s1_r50", "--prompt-tokens", str(TEXT),
          "--measure", "--device", "cpu", "--warmup", "0", "--iters", "2", "--batch-sizes", "1", "2", "--layers", "3",
          "--json", str(out)])
    text = capsys.readouterr().out
    assert "LLM layers timed: 3 of 4" in text and "layer 3" in text  # PyramidDrop's last stage is not run
    measured = json.loads(out.read_text())["measure"]
    assert measured["header"]["llm_layers"] == "3 of 4" and measured["header"]["dtype"] == "float32"
    rows = {(r["reducer"], r["batch"]): r for r in measured["rows"]}
    assert sorted(rows) == [("fastv_k2_r50", 1), ("fastv_k2_r50", 2), ("pyramiddrop_s1_r50", 1), ("pyramiddrop_s1_r50", 2)]
    full, fastv_kept = 16 + TEXT, 8 + TEXT
    fastv = 2 * layer(full) + layer(fastv_kept) + selection(full) + 2 * fastv_kept * H * V
    pyramid = layer(full) + layer(8 + TEXT) + layer(4 + TEXT) + selection(full) + selection(8 + TEXT) + 2 * (4 + TEXT) * H * V
    baseline = 3 * layer(full) + 2 * full * H * V
    for (name, batch), row in rows.items():
        expected = fastv if name == "fastv_k2_r50" else pyramid
        assert row["with"]["status"] == row["without"]["status"] == "ok" and row["timed_layers"] == 3
        assert row["with"]["analytic_matmul"] == batch * expected and row["without"]["analytic_matmul"] == batch * baseline
        assert row["with"]["profiler_matmul"] == batch * expected  # what ran: the reduced rows, layer by layer
        assert row["without"]["profiler_matmul"] == batch * baseline
        assert row["analytic_ratio"] == pytest.approx(expected / baseline)
        assert row["measured_ratio"] == pytest.approx(row["with"]["median_ms"] / row["without"]["median_ms"])
        assert row["not_run_layers"] == ([] if name == "fastv_k2_r50" else [3])


@pytest.mark.parametrize(("extra", "said"), [
    (["--reducer", "fastv_k2_r50", "--layers", "2"],
     "reducer 'fastv_k2_r50' first runs on fewer image tokens at decoder layer 2, which --layers 2 does not reach; "
     "pass --layers 3 or more"),
    (["--reducer", "fastv_k2_r50", "--fast", "compile"], "--fast compile cannot run an in-LLM reducer"),
    (["--reducer", "fastv_k2_r50", "--prompt-tokens", "0"], "needs --prompt-tokens 1 or more"),
    (["--reducer", "fastv_k2_r50", "--layers", "5"], "--layers 5 exceeds the 4 layers of the LLM"),
    (["--reducer", "fastv_k9_r50"], "reducer 'fastv_k9_r50' acts at decoder layer 9"),
])
def test_refusals_are_one_sentence_before_any_table(tiny, capsys, extra, said) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(tiny), *extra, "--measure", "--device", "cpu", "--warmup", "0", "--iters", "1"])
    captured = capsys.readouterr()
    assert exited.value.code == 2 and said in captured.err and captured.err.count("\n") == 1
    assert "layer  image" not in captured.out
