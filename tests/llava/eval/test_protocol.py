"""The pinned protocol: what the scorers record, how a chunked run's records merge, and how ``compare`` states each
row's prompt format and MME split and labels (or refuses) a row measured another way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llava.eval import compare as cmp
from llava.eval.protocol import (
    answers_protocol,
    method_of,
    mme_split,
    prompt_cell,
    recipe_differences,
    relative_differences,
    split_differences,
)
from llava.eval.provenance import merge_records
from llava.utils import UserError


def protocol(conv_mode: str = "vicuna_v1", temperature: float = 0.0, max_new_tokens: int = 128, reducer: str | None = None,
             **prompt: Any) -> dict[str, Any]:
    return {"prompt": {"conv_mode": conv_mode, **prompt},
            "decoding": {"temperature": temperature, "top_p": None, "num_beams": 1, "max_new_tokens": max_new_tokens},
            "method": {"projector_type": None, "projector_settings": {}, "reducer": reducer}}


def sidecar(answers: Path, producer: dict[str, Any]) -> Path:
    answers.write_text('{"question_id": 1, "text": "a"}\n')
    Path(f"{answers}.meta.json").write_text(json.dumps({"format": 1, "producer": producer, "skipped": {}}))
    return answers


PRODUCER = {"model": {"path": "/ckpt", "fingerprint": "abc"}, "model_base": None, "model_id": "ckpt", "conv_mode": "vicuna_v1",
            "temperature": 0.0, "top_p": None, "num_beams": 1, "max_new_tokens": 128, "projector_settings": {},
            "projector_type": None, "reducer": None, "single_pred_prompt": True, "questions": "q0"}


# -- the recipe ---------------------------------------------------------------------------------------
def test_recipe_differences_name_each_departure() -> None:
    assert recipe_differences("sqa", protocol(single_pred_prompt=True)) == []
    assert recipe_differences("sqa", protocol()) == ["single_pred_prompt=None (pinned True)"]
    assert recipe_differences("gqa", protocol(temperature=0.2)) == ["temperature=0.2 (pinned 0.0)"]
    found = recipe_differences("mmbench_cn", protocol(single_pred_prompt=True, lang="en", all_rounds=False))
    assert found == ["lang='en' (pinned 'cn')"]
    assert recipe_differences("pope", protocol(single_pred_prompt=False)) == []  # POPE pins no prompt flag


def test_relative_differences_hold_conv_mode_and_answer_length_to_the_reference() -> None:
    assert relative_differences(protocol(), protocol()) == []
    assert relative_differences(protocol(conv_mode="llava_v1"), protocol()) == ["conv_mode='llava_v1' (reference 'vicuna_v1')"]
    assert relative_differences(protocol(max_new_tokens=16), protocol()) == ["max_new_tokens=16 (reference 128)"]


def test_mme_split_is_perception_plus_cognition() -> None:
    assert mme_split({"score": 1862.5}) is None
    split = mme_split({"score": 1862.5, "perception": 1510.25, "cognition": 352.25})
    assert split == {"perception": 1510.25, "cognition": 352.25, "total": 1862.5}
    assert split_differences(split) == []
    assert split_differences(mme_split({"score": 1510.25, "perception": 1510.25, "cognition": 352.25})) == [
        "MME score is perception only (pinned perception + cognition)"]
    assert split_differences(mme_split({"score": 1000.0, "perception": 1510.25, "cognition": 352.25})) == [
        "MME score 1000.0 is not perception + cognition (1862.5)"]


def test_recipe_text_names_the_flags_of_the_benchmarks_shown() -> None:
    from llava.eval.protocol import recipe_text

    assert recipe_text(["gqa", "pope"]) == ("greedy decoding (temperature 0, one beam) with the reference row's conv mode "
                                            "and max new tokens")
    both = recipe_text(["sqa", "mme"])
    assert both.endswith("; sqa: single_pred_prompt=True; MME scored as perception + cognition") and "mmbench" not in both


def test_prompt_cell_and_method() -> None:
    assert prompt_cell({}) == "not recorded"
    assert prompt_cell({"gqa": protocol(), "pope": None}) == "vicuna_v1, greedy (pope not recorded)"
    assert prompt_cell({"gqa": protocol(temperature=0.7)}) == "vicuna_v1, sampled"
    assert method_of({"gqa": protocol(reducer="fastv_k2_r50"), "pope": None}) == {"projector_type": None, "reducer": "fastv_k2_r50"}
    with pytest.raises(UserError, match="different methods"):
        method_of({"gqa": protocol(reducer="fastv_k2_r50"), "pope": protocol()})


# -- records: one file, chunks ------------------------------------------------------------------------
def test_answers_protocol_reads_the_record(tmp_path: Path) -> None:
    answers = sidecar(tmp_path / "a.jsonl", PRODUCER)
    assert answers_protocol(answers) == protocol(single_pred_prompt=True)
    assert answers_protocol(None) is None
    bare = tmp_path / "upstream.jsonl"
    bare.write_text('{"question_id": 1, "text": "a"}\n')
    assert answers_protocol(bare) is None  # answers from upstream LLaVA: not recorded
    Path(f"{bare}.meta.json").write_text("{not json")
    with pytest.raises(UserError, match="not a readable answers record"):
        answers_protocol(bare)


def test_chunk_records_merge_and_disagreeing_chunks_are_refused(tmp_path: Path) -> None:
    first = sidecar(tmp_path / "2_0.jsonl", PRODUCER)
    second = sidecar(tmp_path / "2_1.jsonl", {**PRODUCER, "questions": "q1"})
    empty = tmp_path / "3_2.jsonl"
    empty.write_text("")  # more devices than questions: that chunk answered nothing and has no record
    merged = tmp_path / "merge.jsonl"
    record = json.loads(merge_records(merged, [first, second, empty]).read_text())
    assert record["producer"] == {**PRODUCER, "questions": ["q0", "q1"]}
    assert answers_protocol(merged) == answers_protocol(first)
    sidecar(second, {**PRODUCER, "temperature": 0.2})
    with pytest.raises(UserError, match=r"other settings \(temperature 0.0 -> 0.2\)"):
        merge_records(merged, [first, second])
    with pytest.raises(UserError, match="different settings"):
        answers_protocol([first, second])


def test_merge_command_refuses_the_merged_file_as_a_chunk(tmp_path: Path) -> None:
    first = sidecar(tmp_path / "1_0.jsonl", PRODUCER)
    done = subprocess.run([sys.executable, "-m", "llava.eval.provenance", str(first), str(first)], capture_output=True, text=True)
    assert done.returncode == 2 and "also given as a chunk" in done.stderr and "Traceback" not in done.stderr
    assert json.loads(Path(f"{first}.meta.json").read_text())["producer"] == PRODUCER  # untouched


# -- compare ------------------------------------------------------------------------------------------
def results(folder: Path, protocols: dict[str, dict[str, Any] | None], scores: dict[str, float], mme: tuple[float, float] | None = None) -> Path:
    """A results folder as the scorers write it (``{"benchmark", "score", "metric", ..., "protocol"}``)."""
    folder.mkdir(parents=True)
    for key, value in scores.items():
        record: dict[str, Any] = {"benchmark": key, "score": value, "metric": "test", "protocol": protocols.get(key)}
        if key == "mme" and mme is not None:
            record.update(perception=mme[0], cognition=mme[1])
        (folder / f"{key}.json").write_text(json.dumps(record))
    return folder


def test_compare_states_prompt_and_mme_split_and_labels_another_protocol(tmp_path: Path, capsys) -> None:
    pinned = {"gqa": protocol(), "mme": protocol(), "sqa": protocol(single_pred_prompt=True)}
    vanilla = results(tmp_path / "vanilla", pinned, {"gqa": 60.0, "mme": 1800.0, "sqa": 70.0}, mme=(1450.0, 350.0))
    small = results(tmp_path / "small", pinned, {"gqa": 55.0, "mme": 1700.0, "sqa": 68.0}, mme=(1400.0, 300.0))
    sampled = results(tmp_path / "sampled", {**pinned, "gqa": protocol(temperature=0.2), "sqa": protocol()},
                      {"gqa": 59.0, "mme": 1500.0, "sqa": 69.0}, mme=(1500.0, 300.0))  # MME perception only
    costs = []
    for name, flops in (("vanilla", 8e12), ("small", 1e12), ("sampled", 0.5e12)):
        costs += ["--cost", f"{name}={tmp_path / (name + '.json')}"]
        (tmp_path / f"{name}.json").write_text(json.dumps({"flops": flops}))
    argv = ["--results", f"vanilla={vanilla}", "--results", f"small={small}", "--results", f"sampled={sampled}",
            "--vanilla", "vanilla", *costs]
    result = cmp.main(argv)
    table = capsys.readouterr().out
    assert "| Method | Tokens | Prompt | GQA | MME | MME P / C | SQA-IMG |" in table
    assert "| small | - | vicuna_v1, greedy | 55.0 (91.7%) | 1700 (94.4%) | 1400.0 / 300.0 |" in table
    # cheapest, best-looking, but measured another way: labelled and off the front
    assert "| sampled † | - | vicuna_v1, sampled |" in table
    assert result.differences["sampled"] == ["gqa: temperature=0.2 (pinned 0.0)", "sqa: single_pred_prompt=None (pinned True)",
                                             "mme: MME score is perception only (pinned perception + cognition)"]
    assert result.front == ["small", "vanilla"]
    with pytest.raises(UserError, match=r"run 'sampled' was measured under another protocol \(gqa: temperature=0.2"):
        cmp.main([*argv, "--strict-protocol"])


def test_compare_holds_rows_to_the_vanillas_conv_mode(tmp_path: Path) -> None:
    vanilla = results(tmp_path / "vanilla", {"gqa": protocol()}, {"gqa": 60.0})
    other = results(tmp_path / "other", {"gqa": protocol(conv_mode="llava_v1")}, {"gqa": 61.0})
    result = cmp.main(["--results", f"vanilla={vanilla}", "--results", f"other={other}", "--vanilla", "vanilla"])
    assert result.differences == {"other": ["gqa: conv_mode='llava_v1' (reference 'vicuna_v1')"]}


def test_compare_counts_the_reducer_its_answers_recorded(tmp_path: Path, tiny_llava_checkpoint) -> None:
    checkpoint = tiny_llava_checkpoint("mlp2x_gelu")
    reduced = results(tmp_path / "reduced", {"gqa": protocol(reducer="fastv_k1_r50")}, {"gqa": 50.0})
    plain = results(tmp_path / "plain", {"gqa": protocol()}, {"gqa": 60.0})
    base = ["--results", f"plain={plain}", "--results", f"reduced={reduced}", "--vanilla", "plain",
            "--checkpoint", f"plain={checkpoint}", "--checkpoint", f"reduced={checkpoint}"]
    from_record = {run.name: run for run in cmp.main(base).runs}
    from_flag = {run.name: run for run in cmp.main([*base, "--reducer", "reduced=fastv_k1_r50"]).runs}
    assert from_record["reduced"].reducer == "fastv_k1_r50" and from_record["reduced"].flops == from_flag["reduced"].flops
    assert from_record["reduced"].flops < from_record["plain"].flops and from_record["plain"].reducer is None
    with pytest.raises(UserError, match=r"--reducer reduced=fastv_k1_r75 disagrees with run 'reduced'"):
        cmp.main([*base, "--reducer", "reduced=fastv_k1_r75"])
