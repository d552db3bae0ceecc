"""The quickstart end to end on a tiny budget: every file the full run writes, through the real entry points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llava.eval.files import read_jsonl
from llava.quickstart.run import QuickstartConfig, build_parser, run_quickstart

TINY = QuickstartConfig(projectors=("braco_c2s5",), train_scenes=8, test_questions=5, finetune_epochs=1.0, batch_size=4)


def test_quickstart_writes_checkpoints_answers_results_and_figure(tmp_path: Path, capsys: pytest.CaptureFixture):
    out = tmp_path / "quickstart"
    results = run_quickstart(out, TINY)
    run = out / "runs" / "braco_c2s5"
    assert (run / "llava-braco_c2s5-pretrain" / "mm_projector.bin").is_file()
    assert (run / "llava-braco_c2s5" / "model.safetensors").is_file()
    answers = read_jsonl(run / "answers.jsonl")
    assert sorted(a["question_id"] for a in answers) == list(range(5))
    assert {a["model_id"] for a in answers} == {"llava-braco_c2s5"}
    gold = read_jsonl(out / "data" / "answers_gold.jsonl")
    saved = json.loads((out / "results.json").read_text())
    [entry] = saved["runs"]
    assert entry["visual_tokens"] == results[0].visual_tokens == 9
    assert entry["score"]["answered"] == 5
    assert entry["score"]["chance"] == pytest.approx(sum(g["chance"] for g in gold) / len(gold))
    hits = sum(a["text"].strip().lower().rstrip(".") == {g["question_id"]: g["answer"] for g in gold}[a["question_id"]] for a in answers)
    assert entry["score"]["accuracy"] == pytest.approx(hits / 5)
    assert set(entry["seconds"]) == {"stage1", "stage2", "eval"}
    assert (out / "quickstart.png").read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if line.startswith("projector"))
    assert header.split()[:3] == ["projector", "visual", "tokens"]
    assert "braco_c2s5" in printed and "total wall time" in printed


def test_command_line_defaults():
    args = build_parser().parse_args([])
    assert (args.out, args.reduced, args.projectors) == ("outputs/quickstart", False, None)
    assert build_parser().parse_args(["--reduced", "--projectors", "mlp2x_gelu"]).projectors == ["mlp2x_gelu"]
