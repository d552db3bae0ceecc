"""The quickstart end to end on a tiny budget: every file the full run writes, through the real entry points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llava.cost.module import CostModel
from llava.eval.files import read_jsonl
from llava.model.multimodal_projector.plugins import CompressorPlugin, ProjectorType, register_plugin, unregister_plugin
from llava.quickstart.run import QuickstartConfig, build_parser, default_projectors, expand_projectors, main, run_quickstart

TINY = QuickstartConfig(projectors=("braco_c2s5", "toybad_k9"), train_scenes=8, test_questions=5, finetune_epochs=1.0, batch_size=4)


def _refuse(context):
    raise ValueError(f"toybad cannot give {context.match.group(1)} tokens on a {context.mm_hidden}-wide tower")


def _only_four(budget: int) -> list[str]:
    if budget != 4:
        raise ValueError(f"toybad gives only 4 tokens, got {budget}")
    return ["toybad_k4"]


@pytest.fixture
def toybad():
    """A plugin whose factory refuses every type and whose cost model offers only K = 4."""
    register_plugin(CompressorPlugin(name="toybad", projectors=(ProjectorType(r"toybad_k(\d+)", _refuse, examples=("toybad_k4",)),),
                                     cost=CostModel(types_at_budget=_only_four)))
    yield
    unregister_plugin("toybad")


def test_all_expands_from_the_registry(toybad):
    projectors, notes = expand_projectors(["all"], 9)
    assert projectors[0] == "mlp2x_gelu" and "braco_k9" in projectors and "toybad_k9" not in projectors
    assert "toybad at budget 9: toybad gives only 4 tokens, got 9" in notes
    projectors, notes = expand_projectors(["braco_c2s5", "all"], 4)
    assert projectors[:3] == ("braco_c2s5", "mlp2x_gelu", "braco_k4") or {"braco_k4", "toybad_k4"} <= set(projectors)
    assert "toybad_k4" in projectors and not any(n.startswith("toybad") for n in notes)
    with pytest.raises(ValueError, match="--budget must be a positive number of visual tokens, got 0"):
        main(["--projectors", "all", "--budget", "0"])


def test_quickstart_writes_checkpoints_answers_results_and_figure(tmp_path: Path, capsys: pytest.CaptureFixture, toybad,
                                                                  monkeypatch):
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
    # a single run is its own vanilla: it has an Acc. (and a place in pareto.png) unless it scored 0 on every type
    placed = any(value > 0 for value in entry["score"]["by_category"].values())
    assert (out / "pareto.png").is_file() == placed
    assert saved["skipped"] == ["toybad_k9: toybad cannot give 9 tokens on a 64-wide tower"]
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if line.startswith("| Method"))
    assert header.split(" | ")[:2] == ["| Method", "Tokens"] and "Acc. (%)" in header
    row = next(line for line in printed.splitlines() if line.startswith("| braco_c2s5 |"))
    assert row.split(" | ")[1] == "9" and ("yes" in row) == placed
    assert "skipped: toybad_k9: toybad cannot give 9 tokens" in printed and "total wall time" in printed
    _answer_as_printed(printed, run / "llava-braco_c2s5", out, tmp_path, monkeypatch)


def _answer_as_printed(printed: str, checkpoint: Path, out: Path, tmp_path: Path, monkeypatch) -> None:
    """The closing text names the checkpoint and a run_llava command that answers from another folder, also after the
    output folder moved: the checkpoints name their tower relative to themselves."""
    import shlex

    from llava.eval import run_llava

    assert f"braco_c2s5  {checkpoint}" in printed
    for stage in (checkpoint, checkpoint.parent / "llava-braco_c2s5-pretrain"):
        assert json.loads((stage / "config.json").read_text())["mm_vision_tower"] == "../../../models/clip-tiny"
    command = next(line.strip() for line in printed.splitlines() if "-m llava.eval.run_llava" in line)
    argv = shlex.split(command)[3:]
    assert argv[argv.index("--model-path") + 1] == str(checkpoint) and "--conv-mode" in argv
    assert "python -m llava.serve.demo --model-path" in printed
    moved = tmp_path / "moved"
    out.rename(moved)
    argv = [str(moved / Path(value).relative_to(out)) if value.startswith(str(out)) else value for value in argv]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert isinstance(run_llava.main(argv), str)


def test_default_comparison_comes_from_the_plugins():
    # llava names no compressor: the defaults are what the installed plugins showcase, the built-ins first
    assert default_projectors() == ("mlp2x_gelu", "braco_c2s5")
    assert default_projectors(video=True)[0] == "mlp2x_gelu"
    assert set(default_projectors(video=True)) == {"mlp2x_gelu", "braco_k16", "divprune_k16", "tokenpacker_k16"}
    register_plugin(CompressorPlugin(name="toyshow", projectors=(ProjectorType(r"toyshow_k(\d+)", _refuse, examples=("toyshow_k4",)),),
                                     showcase=("toyshow_k4",)))
    try:
        assert default_projectors()[-1] == "toyshow_k4" and "toyshow_k4" not in default_projectors(video=True)
    finally:
        unregister_plugin("toyshow")
    assert "toyshow_k4" not in default_projectors()


def test_command_line_defaults():
    args = build_parser().parse_args([])
    assert (args.out, args.reduced, args.projectors, args.budget) == ("outputs/quickstart", False, None, 9)
    assert build_parser().parse_args(["--reduced", "--projectors", "mlp2x_gelu"]).projectors == ["mlp2x_gelu"]
