"""``--reducers``: the quickstart runs in-LLM reducers on its trained vanilla checkpoint, through the loaders' own
``--reducer``, one table row each; ``all`` picks a type of every reducer plugin that fits the tiny LLM.

Independent references: the kept counts per layer are the releases' formulas written here (FastV ``round(N·(1-R))``,
PyramidDrop ``int(N·λ)``, DART ``pivots + 8·(K // 8)``), the scores an exact-match count over the answers file, and the
loader path is the one ``set_reducer`` call each reducer's load makes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llava.eval.files import read_jsonl
from llava.model import reducers as registry
from llava.plugin_api import CostModel, NameForm, Reducer, ReducerPlugin, ReducerType, Reduction
from llava.quickstart.reducers import expand_reducers
from llava.quickstart.run import QuickstartConfig, build_parser, image_tokens, llm_config, main, run_quickstart
from llava.utils import UserError

TINY = QuickstartConfig(projectors=("mlp2x_gelu",), reducers=("all",), train_scenes=8, test_questions=5, finetune_epochs=1.0,
                        batch_size=4)
VISUAL = 64  # the 8 x 8 patch grid of the quickstart's 64 x 64 images, CLS dropped
#: Image tokens per layer of the 2-layer LLM, by each release's rule: FastV keeps round(64 · 0.5), PyramidDrop
#: int(64 · 0.5), DART its 4 image pivots plus 8 pivots · (16 // 8) claims.
EXPECTED = {"fastv_k1_r50": [64, round(64 * (1 - 0.5))], "pyramiddrop_s1_r50": [64, int(64 * 0.5)],
            "dart_k16_l1": [64, 4 + 8 * (16 // 8)]}


class _Keep(Reducer):
    def __init__(self, layer: int) -> None:
        self.layer = layer

    def __call__(self, ctx):  # pragma: no cover - the expansion never runs a reducer
        return Reduction(keep=ctx.visual.nonzero()[:, 1].view(ctx.visual.shape[0], -1))


class _Refuse(_Keep):
    def __call__(self, ctx):
        raise ValueError("toyboom refuses this prompt")


def _toy(name: str, showcase: tuple[str, ...], examples: tuple[str, ...], kept: int, step: type = _Keep) -> ReducerPlugin:
    """A plugin ``{name}_l{L}`` acting at layer L that keeps ``kept`` image tokens from there on (by its cost model)."""
    form = NameForm(name + "_l{L}")
    return ReducerPlugin(name, (ReducerType(form, lambda build: [step(build.values["L"])], examples=examples),),
                         cost=CostModel(layer_tokens=lambda build, visual: [visual if layer < build.values["L"] else kept
                                                                            for layer in range(build.lm.layers)]),
                         showcase=showcase)


@pytest.fixture
def toys():
    plugins = [_toy("toyfit", ("toyfit_l5",), ("toyfit_l9", "toyfit_l1"), 10),  # showcase too deep; 2nd example fits
               _toy("toywide", ("toywide_l1",), ("toywide_l1",), 100),         # keeps more than the image has
               _toy("toyall", ("toyall_l1",), ("toyall_l1",), VISUAL)]          # fits but drops nothing
    for plugin in plugins:
        registry.register_reducer_plugin(plugin)
    yield
    for plugin in plugins:
        registry.unregister_reducer_plugin(plugin.name)


def test_all_is_one_fitting_type_per_plugin_from_its_declaration(toys):
    chosen, notes = expand_reducers(["all"], llm_config(TINY), image_tokens(TINY))
    assert image_tokens(TINY) == VISUAL and llm_config(TINY).num_hidden_layers == 2
    assert "toyfit_l1" in chosen and not any(name.startswith(("toywide", "toyall")) for name in chosen)
    assert set(EXPECTED) <= set(chosen) and len(chosen) == len({registry.resolve_reducer(n).plugin.name for n in chosen})
    assert ("reducer plugin toywide: none of its types ['toywide_l1'] fits the quickstart's 2-layer LLM with 64 image tokens "
            "(reducer 'toywide_l1' keeps 100 image tokens at some layer, but the image has 64)") in notes
    assert any(note.startswith("reducer plugin toyall:") and "keeps all 64 image tokens at every layer" in note for note in notes)
    # a plugin with no type for two decoder layers (three increasing sparsification layers, the last below the LLM's last)
    assert any(note.startswith("reducer plugin sparsevlm: none of its types") for note in notes)
    # named ones are kept as given (no "reduces" demand), in order, without repeats
    assert expand_reducers(["toyall_l1", "fastv_k1_r75", "toyall_l1"], llm_config(TINY), VISUAL) == (("toyall_l1", "fastv_k1_r75"), [])


@pytest.mark.parametrize("name, words", [
    ("fastv_k2_r50", "--reducers fastv_k2_r50 does not fit the quickstart's 2-layer LLM with 64 image tokens: reducer "
                     "'fastv_k2_r50' acts at decoder layer 2"),
    ("dart_k128_l1", "--reducers dart_k128_l1 does not fit the quickstart's 2-layer LLM with 64 image tokens: DART budget "
                     "128 keeps 132 image tokens but the image has 64; use a budget below 60; '--reducers all' picks"),
    ("fastv_k9", "unknown reducer 'fastv_k9'"),
    ("none", "--reducers none: leave --reducers out to run no reducer"),
])
def test_a_name_that_cannot_run_is_one_sentence_before_anything_is_written(tmp_path: Path, name: str, words: str):
    out = tmp_path / "out"
    with pytest.raises(UserError, match="^" + re.escape(words)) as error:
        main(["--reduced", "--reducers", name, "--out", str(out)])
    assert "\n" not in str(error.value) and not out.exists()


@pytest.mark.parametrize("argv, words", [
    (["--projectors", "braco_c2s5"], "--reducers runs on the trained vanilla checkpoint, but --projectors braco_c2s5 has none; "
                                     "add mlp2x_gelu to --projectors"),
    (["--video"], "--reducers runs on the image quickstart"),
])
def test_reducers_without_a_vanilla_image_run_are_refused(tmp_path: Path, argv: list[str], words: str):
    if "--video" in argv:
        pytest.importorskip("av")  # --video asks for its extra first
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="^" + words):
        main(["--reduced", "--reducers", "all", *argv, "--out", str(out)])
    assert not out.exists()


def test_command_line():
    assert build_parser().parse_args([]).reducers is None and QuickstartConfig().reducers == ()
    assert build_parser().parse_args(["--reducers", "all", "fastv_k1_r75"]).reducers == ["all", "fastv_k1_r75"]


def _hits(answers: Path, gold: Path) -> float:
    truth = {record["question_id"]: record["answer"] for record in read_jsonl(gold)}
    records = read_jsonl(answers)
    return sum(r["text"].strip().lower().rstrip(".") == truth[r["question_id"]] for r in records) / len(records)


@pytest.fixture
def toyboom():
    """A reducer that fits the tiny LLM but refuses every prompt at its forward."""
    registry.register_reducer_plugin(_toy("toyboom", ("toyboom_l1",), ("toyboom_l1",), 8, step=_Refuse))
    yield
    registry.unregister_reducer_plugin("toyboom")


def test_reducers_all_runs_each_reducer_through_the_loader_on_the_vanilla_checkpoint(tmp_path: Path, capsys, monkeypatch, toyboom):
    calls: list[str | None] = []
    real = registry.set_reducer

    def recording(model, name):
        calls.append(name)
        real(model, name)

    monkeypatch.setattr("llava.model.builder.set_reducer", recording)
    out = tmp_path / "quickstart"
    results = run_quickstart(out, TINY)
    vanilla, *reduced = results
    assert vanilla.reducer is None and vanilla.projector == "mlp2x_gelu"
    names = [result.reducer for result in reduced]
    assert set(EXPECTED) <= set(names) and "toyboom_l1" not in names
    loaded = [name for name in calls if name]  # one loader call per reducer, the refused one included
    assert sorted(loaded) == sorted([*names, "toyboom_l1"]) and [name for name in loaded if name != "toyboom_l1"] == names
    saved = json.loads((out / "results.json").read_text())
    assert saved["reducers"] == loaded and [entry["reducer"] for entry in saved["runs"]] == [None, *names]  # asked, ran
    printed = capsys.readouterr().out
    for result, entry in zip(reduced, saved["runs"][1:]):
        answers = out / "runs" / "mlp2x_gelu" / "reducers" / result.reducer / "answers.jsonl"
        assert result.answers == entry["answers"] == str(answers) and result.checkpoint == vanilla.checkpoint
        assert sorted(record["question_id"] for record in read_jsonl(answers)) == list(range(5))
        assert json.loads(Path(f"{answers}.meta.json").read_text())["producer"]["reducer"] == result.reducer
        assert entry["score"]["accuracy"] == pytest.approx(_hits(answers, out / "data" / "answers_gold.jsonl"))
        assert set(entry["seconds"]) == {"eval"}  # no training
        assert entry["flops"]["total"] < vanilla.flops["total"]  # layer 1 runs on fewer tokens
        if result.reducer in EXPECTED:
            first, second = EXPECTED[result.reducer]
            row = next(line for line in printed.splitlines() if line.startswith(f"| mlp2x_gelu + {result.reducer} |"))
            assert row.split(" | ")[1] == f"{first} x1, {second} x1"
    assert "skipped: reducer plugin sparsevlm: none of its types" in printed
    assert "skipped: mlp2x_gelu + toyboom_l1: toyboom refuses this prompt" in printed  # the other rows are kept
    assert (out / "quickstart.png").is_file()
