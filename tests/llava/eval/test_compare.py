"""``llava.eval.compare``: results folders as the eval scripts write them, the paper's Acc., the Pareto front."""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import pytest

from llava.eval import compare as cmp
from llava.eval import eval_gqa, summarize
from llava.eval.files import write_json, write_score

# Table 1 (tab:token-retain), 16 retained tokens: scores in the paper's column order and the printed Acc.
COLUMNS = ("gqa", "mmbench", "mmbench_cn", "mme", "pope", "sqa", "textvqa", "mmvet")
VANILLA = (62.9, 65.5, 60.7, 1785, 85.7, 69.7, 58.0, 32.8)
PAPER_ROWS = {
    "braco_k16": ((57.5, 63.3, 55.8, 1704, 82.4, 69.5, 51.9, 29.8), 94.0, 1.25, 40.59),
    "quecc_k16": ((59.0, 63.1, 54.6, 1668, 83.5, 70.6, 52.8, 28.8), 93.9, 1.36, 63.22),
    "prumerge_k16": ((46.9, 53.1, 44.2, 1446, 51.6, 68.2, 49.3, 18.8), 76.2, 1.25, 43.37),
    "tokenpacker_k16": ((57.0, 63.7, 55.2, 1681, 83.0, 69.3, 53.4, 29.0), 93.7, 1.26, 37.87),
}
METRICS = {"gqa": "accuracy (%) on testdev-balanced", "mmbench": "accuracy (%)", "mmbench_cn": "accuracy (%)",
           "mme": "perception + cognition scores", "pope": "F1 x100, mean over splits", "sqa": "IMG-Accuracy (%) on ScienceQA-IMG",
           "textvqa": "VQA soft accuracy x100", "mmvet": "MM-Vet total"}


def write_results(folder: Path, scores, tflops: float | None = None, latency: float | None = None) -> Path:
    """``playground/data/eval/results/$CKPT/<benchmark>.json`` as the scorers' ``--output-json`` writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    for key, score in zip(COLUMNS, scores):
        if key == "mmvet":  # the eval script asks for this file by hand: {"score": total}
            (folder / "mmvet.json").write_text(json.dumps({"score": score}))
        else:
            write_score(folder / f"{key}.json", key, score, METRICS[key])
    if tflops is not None:
        write_json(folder / "cost.json", {"tflops": tflops, "latency_ms": latency})
    return folder


def test_paper_rows_acc_is_reproduced(tmp_path: Path):
    root = tmp_path / "playground/data/eval/results"
    args = ["--results", f"vanilla={write_results(root / 'llava-v1.5-7b', VANILLA, 8.67, 67.25)}", "--vanilla", "vanilla"]
    for name, (scores, _, tflops, latency) in PAPER_ROWS.items():
        args += ["--results", f"{name}={write_results(root / name, scores, tflops, latency)}"]
    result = cmp.main(args + ["--out", str(tmp_path / "table.md"), "--json", str(tmp_path / "t.json"), "--figure", str(tmp_path / "p.png")])
    for name, (_, acc, _, _) in PAPER_ROWS.items():
        # the paper prints scores rounded to 0.1 (MME to 1) and Acc. to 0.1
        assert result.acc[name] == pytest.approx(acc, abs=0.06), name
    assert result.acc["vanilla"] == pytest.approx(100.0)
    # per-benchmark ratio as Table 1 prints it (Braco, GQA 91.4%, MME 95.5%)
    assert result.relative["braco_k16"]["gqa"] == pytest.approx(91.4, abs=0.05)
    assert result.relative["braco_k16"]["mme"] == pytest.approx(95.5, abs=0.05)
    table = (tmp_path / "table.md").read_text()
    assert "| braco_k16 | - | not recorded | 57.5 (91.4%) |" in table and "| 1.25 | 40.59 |" in table
    saved = json.loads((tmp_path / "t.json").read_text())
    assert {r["name"]: r["pareto"] for r in saved["runs"]} == {
        "vanilla": True, "braco_k16": True, "quecc_k16": False, "prumerge_k16": False, "tokenpacker_k16": False,
    }
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_scorer_written_file_and_the_paper_baseline(tmp_path: Path):
    """gqa.json from eval_gqa's own --output-json; Acc. against the paper's Vanilla row."""
    folder = tmp_path / "results" / "ckpt"
    questions = {f"q{i}": {"answer": "yes", "isBalanced": True, "types": {"structural": "verify"}} for i in range(8)}
    write_json(tmp_path / "questions.json", questions)
    write_json(tmp_path / "predictions.json", [{"questionId": f"q{i}", "prediction": "yes" if i < 5 else "no"} for i in range(8)])
    eval_gqa.main(["--questions", str(tmp_path / "questions.json"), "--predictions", str(tmp_path / "predictions.json"),
                   "--output-json", str(folder / "gqa.json")])
    write_score(folder / "pope.json", "pope", 85.7 / 2, METRICS["pope"])
    result = cmp.main(["--results", str(folder), "--vanilla", "paper-vanilla"])
    # 5/8 = 62.5 % of GQA against 62.9, half of Vanilla's POPE
    assert result.acc["ckpt"] == pytest.approx((100 * 62.5 / 62.9 + 50.0) / 2)
    assert result.front == []  # no cost: nothing to place


def brute_force_front(points):
    def dominates(q, p):
        return q[0] <= p[0] and q[1] >= p[1] and (q[0] < p[0] or q[1] > p[1])

    return sorted(i for i, p in enumerate(points) if not any(dominates(q, p) for j, q in enumerate(points) if j != i))


def test_pareto_front_matches_brute_force():
    rng = random.Random(0)
    for trial in range(300):
        n = rng.randint(1, 9)
        # small integer grids make ties in cost, accuracy and whole points frequent
        points = [(rng.randint(0, 4), rng.randint(0, 4)) for _ in range(n)]
        assert sorted(cmp.pareto_front(points)) == brute_force_front(points), points
    for points in itertools.product([(1, 1), (1, 2), (2, 2)], repeat=3):
        assert sorted(cmp.pareto_front(list(points))) == brute_force_front(list(points))


def test_cost_from_a_checkpoint_and_errors(tmp_path: Path, tiny_llava_checkpoint, capsys):
    scores = write_results(tmp_path / "a", VANILLA)
    ckpt = tiny_llava_checkpoint("mlp2x_gelu")
    result = cmp.main(["--results", f"a={scores}", "--checkpoint", f"a={ckpt}", "--vanilla", "a", "--prompt-tokens", "30"])
    run = result.runs[0]
    assert run.tokens == 36 and run.flops > 0 and "analytic" in run.cost_source
    with pytest.raises(ValueError, match="--vanilla 'b' is not one of the runs"):
        cmp.main(["--results", f"a={scores}", "--vanilla", "b"])
    with pytest.raises(ValueError, match="--cost names \\['b'\\], which are not runs"):
        cmp.main(["--results", f"a={scores}", "--vanilla", "a", "--cost", f"b={tmp_path}/c.json"])
    write_json(tmp_path / "bad.json", {"tflops": "many"})
    with pytest.raises(ValueError, match="tflops must be a finite number"):
        cmp.main(["--results", f"a={scores}", "--vanilla", "a", "--cost", f"a={tmp_path / 'bad.json'}"])
    with pytest.raises(ValueError, match="run names must be unique"):
        cmp.main(["--results", f"a={scores}", "--results", f"a={scores}", "--vanilla", "a"])


def test_a_benchmark_vanilla_scored_zero_is_left_out_of_acc():
    runs = [cmp.Run("v", {"a": 0.0, "b": 50.0}, flops=2.0), cmp.Run("c", {"a": 10.0, "b": 25.0}, flops=1.0)]
    result = cmp.compare(runs, "v")
    assert result.acc == {"v": 100.0, "c": 50.0} and result.front == ["c", "v"]
    assert "a left out of Acc.: v scored 0" in result.notes


# -- fault cases (issue 22) ----------------------------------------------------------------------------


def _two_runs(tmp_path: Path) -> tuple[Path, Path]:
    """Results folders as gqa.sh and qbench.sh write them: gqa.json and qbench.json."""
    folders = []
    for name, gqa, qbench in (("v", 60.0, 30.0), ("b16", 55.0, 70.0)):
        folder = tmp_path / "cmp" / name
        write_score(folder / "gqa.json", "gqa", gqa, METRICS["gqa"])
        write_score(folder / "qbench.json", "qbench", qbench, "Q-Bench LLVisionQA dev accuracy (%)")
        folders.append(folder)
    return folders[0], folders[1]


def test_every_score_file_the_scripts_write_is_shown_or_named(tmp_path: Path, capsys) -> None:  # E01
    v, b16 = _two_runs(tmp_path)
    write_score(b16 / "seed.json", "seed", 61.5, "SEED image accuracy")
    (b16 / "notes.json").write_text("{}")
    result = cmp.main(["--results", f"v={v}", "--results", f"b16={b16}", "--vanilla", "v"])
    header, _, row_v, row_b16 = capsys.readouterr().out.splitlines()[:4]
    assert header.startswith("| Method | Tokens | Prompt | GQA | SEED-IMG | Q-Bench | Acc. (%)")
    assert "| - | 30.0 |" in row_v and "| 61.5 | 70.0 |" in row_b16
    # Acc. stays the paper's: over the Table-1 benchmarks only (GQA here), 55 / 60
    assert result.acc["b16"] == pytest.approx(100 * 55 / 60)
    assert any("Q-Bench" in note and "not in Acc." in note for note in result.notes)
    assert any("b16: ignored notes.json" in note for note in result.notes)
    summary = summarize.main([str(b16), "--baseline", str(v)])
    assert summary.scores["qbench"] == 70.0 and summary.scores["seed"] == 61.5 and summary.used == ["gqa"]


def test_out_equal_to_an_input_score_file_is_refused(tmp_path: Path) -> None:  # E02
    v, b16 = _two_runs(tmp_path)
    before = (v / "gqa.json").read_bytes()
    for out in (v / "gqa.json", v / "qbench.json"):
        with pytest.raises(ValueError, match=rf"^--out .* is the same file as --results v \({out.name}\) .*; writing it would destroy the input"):
            cmp.main(["--results", f"v={v}", "--results", f"b16={b16}", "--vanilla", "v", "--out", str(out)])
    assert (v / "gqa.json").read_bytes() == before
    with pytest.raises(ValueError, match="--json .* is the same file as --results b16"):
        cmp.main(["--results", f"v={v}", "--results", f"b16={b16}", "--vanilla", "v", "--json", str(b16 / "qbench.json")])


def test_an_output_that_is_a_runs_cost_file_is_refused(tmp_path: Path) -> None:
    # old-E03 (issue 31): the guard got the score files only; --json over a run's own cost.json replaced it.
    v = write_results(tmp_path / "v", [60.0, 70.0], tflops=8.6, latency=40)  # GQA, MMBench
    b16 = write_results(tmp_path / "b16", [55.0, 30.0], tflops=1.2, latency=20)
    cost = b16 / "cost.json"
    before = cost.read_bytes()
    for flag in ("--json", "--out", "--figure"):
        with pytest.raises(ValueError, match=rf"^{flag} '{cost}' is the same file as the cost file of run b16 \(cost.json\) "):
            cmp.main(["--results", f"v={v}", "--results", f"b16={b16}", "--vanilla", "v", flag, str(cost)])
    given = tmp_path / "b16-cost.json"
    given.write_bytes(before)
    with pytest.raises(ValueError, match=rf"^--json '{given}' is the same file as --cost b16 "):
        cmp.main(["--results", f"v={v}", "--results", f"b16={b16}", "--vanilla", "v", "--cost", f"b16={given}", "--json", str(given)])
    assert cost.read_bytes() == before and given.read_bytes() == before
    # The cost file the guard names is the one the comparison read (--cost first, else cost.json)
    assert cmp.load_run("b16", b16).cost_source == str(cost)


def test_out_a_folder_is_one_sentence(tmp_path: Path) -> None:  # E05
    v, b16 = _two_runs(tmp_path)
    (tmp_path / "tables").mkdir()
    with pytest.raises(ValueError, match=r"^--out .*tables' is a folder; pass a file path$"):
        cmp.main(["--results", f"v={v}", "--results", f"b16={b16}", "--vanilla", "v", "--out", str(tmp_path / "tables")])
    with pytest.raises(ValueError, match=r"^--out .*cmp' is a folder holding --results v"):
        cmp.main(["--results", f"v={v}", "--results", f"b16={b16}", "--vanilla", "v", "--out", str(tmp_path / "cmp")])


def test_two_outputs_on_one_file_are_refused_before_writing(tmp_path: Path) -> None:
    # --json and --out on one path: the JSON used to replace the table silently (two writes, one file left)
    v, b16 = _two_runs(tmp_path)
    target = tmp_path / "table.md"
    with pytest.raises(ValueError, match=r"^--out and --json both name '.*table.md'; one would replace the other"):
        cmp.main(["--results", f"v={v}", "--results", f"b16={b16}", "--vanilla", "v", "--out", str(target), "--json", str(target)])
    assert not target.exists()


def test_a_negative_prompt_length_is_one_sentence(tmp_path: Path) -> None:
    # it used to be counted as -5 text tokens, lowering every run's FLOPs
    v, b16 = _two_runs(tmp_path)
    with pytest.raises(ValueError, match=r"^--prompt-tokens must be 0 or more text tokens, got -5$"):
        cmp.main(["--results", f"v={v}", "--results", f"b16={b16}", "--vanilla", "v", "--prompt-tokens", "-5"])


def test_a_checkpoint_with_a_broken_config_is_named(tmp_path: Path) -> None:  # E10
    v, b16 = _two_runs(tmp_path)
    broken = tmp_path / "llava-badjson"
    broken.mkdir()
    (broken / "config.json").write_text('{"hidden_size": 64,\n')
    with pytest.raises(ValueError, match=r"checkpoint config '.*llava-badjson/config.json' is not valid JSON"):
        cmp.main(["--results", f"v={v}", "--results", f"b16={b16}", "--vanilla", "v", "--checkpoint", f"b16={broken}"])


def test_summarize_refuses_to_write_over_a_score_file(tmp_path: Path) -> None:
    v, _ = _two_runs(tmp_path)
    before = (v / "gqa.json").read_bytes()
    with pytest.raises(ValueError, match="--output-json .* is the same file as results gqa.json"):
        summarize.main([str(v), "--output-json", str(v / "gqa.json")])
    assert (v / "gqa.json").read_bytes() == before


def test_a_checkpoint_row_names_its_type(tmp_path: Path, tiny_llava_checkpoint):
    """A run costed from a checkpoint shows the checkpoint's type, the name the cost tables give it."""
    scores = write_results(tmp_path / "a", VANILLA)
    ckpt = tiny_llava_checkpoint("mlp2x_gelu")
    result = cmp.main(["--results", f"small={scores}", "--checkpoint", f"small={ckpt}", "--vanilla", "small",
                       "--json", str(tmp_path / "t.json")])
    assert result.runs[0].projector_type == "mlp2x_gelu" and result.runs[0].label == "small (mlp2x_gelu)"
    assert "| small (mlp2x_gelu) |" in cmp.format_table(result)
    assert json.loads((tmp_path / "t.json").read_text())["runs"][0]["projector_type"] == "mlp2x_gelu"
    named = cmp.Run("mlp2x_gelu", {"gqa": 1.0}, projector_type="mlp2x_gelu")
    assert named.label == "mlp2x_gelu"  # a row named by its type is not named twice


def _lm(checkpoint: Path) -> dict[str, int]:
    config = json.loads((checkpoint / "config.json").read_text())
    heads = config["num_attention_heads"]
    return {"h": config["hidden_size"], "m": config["intermediate_size"], "layers": config["num_hidden_layers"], "heads": heads,
            "kv": config.get("num_key_value_heads") or heads, "d": config.get("head_dim") or config["hidden_size"] // heads}


def _layer(lm: dict[str, int], tokens: int) -> int:
    """One LLaMA layer, attention scores counted (the full T x T square for QKᵀ and A·V), by the direct formula."""
    q, kv = lm["heads"] * lm["d"], lm["kv"] * lm["d"]
    projections = 2 * tokens * lm["h"] * (q + 2 * kv) + 2 * tokens * q * lm["h"]
    return projections + 3 * 2 * tokens * lm["h"] * lm["m"] + 2 * 2 * tokens * tokens * q


def _fastv_k1_r50_delta(lm: dict[str, int], visual: int, text: int) -> int:
    """FastV K=1 R=50%: layers 1.. on half the image tokens, plus the last token's attention row of layer 0."""
    full, kept = visual + text, round(visual / 2) + text
    selection = 2 * full * lm["h"] * lm["kv"] * lm["d"] + 2 * lm["h"] * lm["heads"] * lm["d"] + 2 * full * lm["heads"] * lm["d"]
    return (lm["layers"] - 1) * (_layer(lm, kept) - _layer(lm, full)) + selection


@pytest.mark.parametrize("projector_type", ["mlp2x_gelu", "braco_c2s5"])
def test_a_reducer_run_is_its_own_row_counted_per_layer(tmp_path: Path, tiny_llava_checkpoint, projector_type: str):
    """``--reducer NAME=TYPE``: the run's FLOPs are the plain checkpoint's minus what FastV's layers skip plus its
    selection row (direct formula); a compressor projector's tokens are reduced again (both count); the row names
    both and gives the image tokens per layer."""
    scores = write_results(tmp_path / "a", VANILLA)
    ckpt = tiny_llava_checkpoint(projector_type)
    lm = _lm(ckpt)
    result = cmp.main(["--results", f"plain={scores}", "--results", f"fast={scores}", "--checkpoint", f"plain={ckpt}",
                       "--checkpoint", f"fast={ckpt}", "--reducer", "fast=fastv_k1_r50", "--vanilla", "plain",
                       "--prompt-tokens", "30", "--json", str(tmp_path / "t.json")])
    plain, fast = result.runs
    visual = plain.tokens
    assert fast.tokens == visual and fast.reducer == "fastv_k1_r50" and plain.reducer is None
    assert fast.flops - plain.flops == _fastv_k1_r50_delta(lm, visual, 30)
    assert fast.per_layer == f"{visual} x1, {round(visual / 2)} x{lm['layers'] - 1}"
    table = cmp.format_table(result)
    assert f"| fast ({projector_type} + fastv_k1_r50) | {fast.per_layer} |" in table
    assert f"| plain ({projector_type}) | {visual} |" in table
    saved = json.loads((tmp_path / "t.json").read_text())["runs"][1]
    assert saved["reducer"] == "fastv_k1_r50" and saved["per_layer"] == fast.per_layer


def test_reducer_flag_faults_are_one_sentence(tmp_path: Path, tiny_llava_checkpoint) -> None:
    scores = write_results(tmp_path / "a", VANILLA)
    ckpt = tiny_llava_checkpoint("mlp2x_gelu")
    base = ["--results", f"a={scores}", "--vanilla", "a"]
    for extra, said in ((["--reducer", "a=fastv_k1_r50"], "run 'a' has no --checkpoint to count it on"),
                        (["--checkpoint", f"a={ckpt}", "--reducer", "a=fastv"], "unknown reducer 'fastv'"),
                        (["--checkpoint", f"a={ckpt}", "--reducer", "b=fastv_k1_r50"], "--reducer names ['b'], which are not runs")):
        with pytest.raises(ValueError, match=re.escape(said)):
            cmp.main(base + extra)
    result = cmp.main(base + ["--checkpoint", f"a={ckpt}", "--reducer", "a=none"])
    assert result.runs[0].reducer is None and result.runs[0].per_layer is None
    write_json(tmp_path / "c.json", {"tflops": 2.0})  # a measured cost wins; the row still names the reducer
    result = cmp.main(base + ["--checkpoint", f"a={ckpt}", "--reducer", "a=fastv_k1_r50", "--cost", f"a={tmp_path / 'c.json'}"])
    assert result.runs[0].label == "a (fastv_k1_r50)" and result.runs[0].flops == 2e12 and result.runs[0].per_layer is None
