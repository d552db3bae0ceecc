"""``braco cost`` through ``main(argv)``: tables, JSON, ``--measure --device cpu`` on a tiny config, config formats
and one-sentence errors."""

import json

import pytest
import torch

from braco_patch import cli as braco_cli
from braco_patch.cost.cli import main
from llava.cost.presets import load_spec

from .conftest import TINY_LLM, TINY_TOWER


def test_default_prints_the_three_tables_and_json(tmp_path, capsys):
    out = tmp_path / "cost.json"
    result = main(["--json", str(out)])
    text = capsys.readouterr().out
    assert "(a) full-pipeline" in text and "(b) compressor per paper step" in text and "(c) compressor at the projector" in text
    saved = json.loads(out.read_text())
    assert [r["label"] for r in saved["pipeline"]][:2] == ["vanilla", "Braco-4 (c1s3_coef)"]
    assert saved["accounting"] == {"prompt_tokens": 52, "count_attention": False, "lm_head": "all",
                                   "vision_layers": "all", "computation": "official"}
    assert all(abs(r["deviation"]) < 0.02 for r in saved["pipeline"])
    assert result["stages"][2]["official_steps"][:3] == [56_623_104, 38_928_384, 0]  # c3s7


def test_braco_console_dispatches_cost(capsys):
    braco_cli.main(["cost", "--budgets", "16", "--projector", "c3s7"])
    assert "c3s7" in capsys.readouterr().out


def test_measure_cpu_on_a_tiny_config(tiny_llava, tmp_path, capsys):
    out = tmp_path / "measured.json"
    main(["--config", str(tiny_llava), "--budgets", "4", "9", "--prompt-tokens", "5", "--measure", "--device", "cpu",
          "--warmup", "1", "--iters", "2", "--batch-sizes", "1", "2", "--json", str(out)])
    text = capsys.readouterr().out
    assert "latency does not depend on the weight values" in text and "LLM layers 2 of 2" in text
    measured = json.loads(out.read_text())["measure"]
    assert measured["header"]["dtype"] == "float32" and measured["header"]["batch_sizes"] == [1, 2]
    boundary, pipeline = measured["boundary"], measured["pipeline"]
    assert len(boundary) == 2 * (1 + 2 * 4)  # per batch: the plain MLP, then 2 budgets x {ours, official} x {pre, post}
    assert len(pipeline) == 2 * 3  # per batch: vanilla + 2 budgets
    for row in boundary + pipeline:
        assert row["status"] == "ok" and row["median_ms"] > 0 and row["peak_bytes"] > 0
        assert row["profiler_matmul"] == row["analytic_matmul"]  # the profiler agrees with the analytic count
    pre = {r["variant"]: r for r in boundary if r["batch"] == 1 and r["boundary"] == "pre"}
    assert pre["c2s5_coef ours"]["analytic"] < pre["c2s5_coef official"]["analytic"]


def test_measure_caps_llm_layers(tiny_llava, tmp_path, capsys):
    out = tmp_path / "m.json"
    main(["--config", str(tiny_llava), "--budgets", "4", "--measure", "--device", "cpu", "--warmup", "0", "--iters", "1",
          "--layers", "1", "--parts", "pipeline", "--json", str(out)])
    measured = json.loads(out.read_text())["measure"]
    assert measured["header"]["llm_layers"] == "1 of 2" and "boundary" not in measured
    assert "LLM layers 1 of 2" in capsys.readouterr().out


def test_oom_is_reported_not_raised(tiny_llava, tmp_path, monkeypatch):
    from llava.cost import measure

    real = measure.time_call

    def fake(fn, device, warmup, iters):
        if not torch.is_grad_enabled() and fake.calls == 0:
            fake.calls += 1
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
        return real(fn, device, warmup, iters)

    fake.calls = 0
    monkeypatch.setattr(measure, "time_call", fake)
    out = tmp_path / "oom.json"
    main(["--config", str(tiny_llava), "--budgets", "4", "--measure", "--device", "cpu", "--warmup", "0", "--iters", "1",
          "--parts", "boundary", "--json", str(out)])
    rows = json.loads(out.read_text())["measure"]["boundary"]
    assert rows[0]["status"] == "OOM" and all(r["status"] == "ok" for r in rows[1:])


def test_config_formats(tmp_path):
    # transformers LlavaConfig layout: text_config + vision_config.
    nested = tmp_path / "hf.json"
    nested.write_text(json.dumps({"model_type": "llava", "text_config": {"model_type": "qwen2", **TINY_LLM},
                                  "vision_config": TINY_TOWER, "vision_feature_layer": -1}))
    spec = load_spec(nested)
    assert spec.llm.model_type == "qwen2" and spec.select_layer == -1 and spec.inputs[0].label == "16"
    # A plain LM config plus --vision-config.
    (tmp_path / "lm.json").write_text(json.dumps({"model_type": "llama", **TINY_LLM}))
    (tmp_path / "tower.json").write_text(json.dumps(TINY_TOWER))
    assert load_spec(tmp_path / "lm.json", tmp_path / "tower.json").vision.hidden_size == 32
    # An upstream LLaVA config naming the hub tower: the built-in CLIP-L/14-336 dimensions.
    (tmp_path / "llava.json").write_text(json.dumps({"model_type": "llava_llama", **TINY_LLM,
                                                     "mm_vision_tower": "openai/clip-vit-large-patch14-336"}))
    assert load_spec(tmp_path / "llava.json").inputs[0].label == "576"


def test_bad_inputs_give_one_sentence(tiny_llava, tmp_path, capsys):
    def _error(argv) -> str:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        message = capsys.readouterr().err
        assert exc.value.code == 2
        assert message.startswith("braco cost: error: ") and message.count("\n") == 1 and "Traceback" not in message
        return message

    assert "unknown preset 'llava-9b'; expected one of" in _error(["--preset", "llava-9b"])
    assert "budget 36 (c5s11) needs C=5 but the 4x4 token grid allows at most C=4" in _error(
        ["--config", str(tiny_llava), "--budgets", "36"])
    missing = tmp_path / "nope" / "config.json"
    assert f"config file '{missing}' does not exist" in _error(["--config", str(missing)])
    assert "mm_vision_tower 'org/unknown-tower' is neither a local folder nor a known tower" in _error(
        ["--config", str(_write(tmp_path, {"model_type": "llama", **TINY_LLM, "mm_vision_tower": "org/unknown-tower"}))])
    assert "LLM config lacks ['vocab_size']" in _error(
        ["--config", str(_write(tmp_path, {k: v for k, v in TINY_LLM.items() if k != "vocab_size"}))])
    assert "unknown projector type 'c3x7'; known projector types: linear, mlp{N}x_gelu" in _error(["--projector", "c3x7"])
    assert "no 999-token input" in _error(["--input-tokens", "999"])
    if not torch.cuda.is_available():
        assert "--device cuda needs a GPU" in _error(["--measure", "--device", "cuda"])
    assert "--fast cudagraph needs --device cuda" in _error(
        ["--config", str(tiny_llava), "--measure", "--device", "cpu", "--fast", "cudagraph"])


def test_json_on_a_read_only_location_is_one_sentence_before_the_tables(tmp_path, read_only_under, capsys):
    # C08: the tables were printed, then a raw "OSError: [Errno 30] Read-only file system" came from the --json write.
    read_only = read_only_under(tmp_path / "ro")
    with pytest.raises(SystemExit) as exc:
        main(["--projector", "braco_c3s7", "--json", str(read_only / "cost.json")])
    captured = capsys.readouterr()
    assert exc.value.code == 2 and "Traceback" not in captured.err
    assert captured.err.strip() == f"braco cost: error: --json '{read_only / 'cost.json'}' cannot be written (read-only file system); choose a writable location"
    assert "(a)" not in captured.out  # refused before any table is computed
    assert not (read_only / "cost.json").exists()


def _write(tmp_path, values):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(values))
    return path


@pytest.mark.parametrize("argv", [["cost", "--help"], ["cost", "--iters", "0"], ["cost", "--preset"]])
def test_help_and_bad_flags_answer_without_loading_torch_or_transformers(argv):
    # A fresh interpreter: this test process has torch loaded already. --help and argparse errors exit before any
    # work, so neither heavy library may be imported for them (they made `braco cost --help` take seconds).
    import subprocess
    import sys

    probe = ("import sys\nfrom braco_patch.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as exc:\n"
             "    code = exc.code\nprint(code, sorted({'torch', 'transformers'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-1] == f"{0 if argv[-1] == '--help' else 2} []", done.stdout + done.stderr


def test_an_unknown_projector_type_is_refused_before_any_table(capsys):
    # The tables (a)-(c) used to print first, and the refusal came under them.
    with pytest.raises(SystemExit) as exc:
        main(["--projector", "braco_c3s7", "braco_c3_s7"])
    captured = capsys.readouterr()
    assert exc.value.code == 2 and captured.out == ""
    assert "unknown projector type 'braco_c3_s7'; known projector types:" in captured.err
    assert "braco_c{C}s{S}[_coef|_idct|_randrot], braco_k{K}" in captured.err and "\\d" not in captured.err


#: Runs ``braco cost`` in a fresh interpreter whose ``llava.projectors`` entry points are all missing, as in an
#: environment where the project is importable (PYTHONPATH) but not installed.
_NO_PLUGINS = """
import importlib.metadata, sys
real = importlib.metadata.entry_points
def entry_points(**selection):
    found = real(**selection)
    return found.select(name="") if selection.get("group") == "llava.projectors" else found
importlib.metadata.entry_points = entry_points
from braco_patch.cost.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("argv", [["--projector", "all", "--budgets", "16"], ["--projector", "all", "mlp2x_gelu", "--table", "pipeline"]])
def test_all_without_a_compressor_plugin_is_one_sentence(argv):
    """Issue 29: with no plugin registered, --projector all measured mlp2x_gelu alone, silently."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _NO_PLUGINS, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("braco cost: error: 'all' names every compressor, but no compressor plugin is registered "
                                  "(only linear, mlp{N}x_gelu, identity); install the package")


def test_named_types_still_cost_without_a_compressor_plugin():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _NO_PLUGINS, "--projector", "mlp2x_gelu", "linear"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "mlp2x_gelu" in done.stdout and "linear" in done.stdout


def test_projector_all_lists_every_in_llm_reducer_counted_per_layer(capsys):
    """``--projector all`` lists the in-LLM reducers too: each showcased type on the vanilla prefill, its LLM part
    counted layer by layer. FastV K=2 R=50 on LLaVA-1.5-7B, restated here: layers 0-1 see 576 + 52 tokens, layers
    2-31 see 288 + 52, the selection reads layer 1's attention for the last token, the LM head all 340 rows."""
    from llava.model.reducers import reducer_plugins

    result = main(["--projector", "all", "--budgets", "16"])
    out = capsys.readouterr().out
    rows = {row["type"]: row for row in result["reducers"]}
    assert sorted(rows) == sorted(name for plugin in reducer_plugins() for name in plugin.showcase)
    assert {row["method"] for row in rows.values()} >= {"fastv", "pyramiddrop", "sparsevlm", "dart"}
    d, ffn, vocab, text = 4096, 11008, 32000, 52

    def layer(tokens: int) -> int:  # q, k, v, o and the three MLP matrices; attention scores not counted
        return 2 * tokens * (4 * d * d + 3 * d * ffn)

    vanilla_llm = 32 * layer(576 + text) + 2 * (576 + text) * d * vocab
    selection = 2 * (576 + text) * d * d + 2 * d * d + 2 * (576 + text) * d  # keys of every row, one query, q·kᵀ
    fastv_llm = 2 * layer(576 + text) + 30 * layer(288 + text) + selection + 2 * (288 + text) * d * vocab
    vanilla = result["types"][0]["pipeline"]
    assert vanilla["llm"] == vanilla_llm
    assert rows["fastv_k2_r50"]["total"] == vanilla["total"] - vanilla_llm + fastv_llm
    assert rows["fastv_k2_r50"]["per_layer"] == "576 x2, 288 x30"
    assert "(j) in-LLM reducers on llava-v1.5-7b with mlp2x_gelu" in out
    assert f"fastv_k2_r50             fastv        {(vanilla['total'] - vanilla_llm + fastv_llm) / 1e12:>11.3f}" in out


def test_reducers_with_a_projector_are_one_sentence(capsys):
    with pytest.raises(SystemExit) as exit_info:
        braco_cli.main(["cost", "--reducer", "fastv_k2_r50", "--projector", "braco_c3s7"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--reducer" in err and "--projector" in err and len(err.strip().splitlines()) == 1
