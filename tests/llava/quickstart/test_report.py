"""Scoring, FLOPs, table and figure of the quickstart report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llava.quickstart.report import RunResult, format_table, plot_results, prefill_flops, score_answers, write_results

GOLD = [
    {"question_id": 0, "answer": "red", "category": "colour_at", "chance": 0.25},
    {"question_id": 1, "answer": "left", "category": "side_of", "chance": 0.5},
    {"question_id": 2, "answer": "two", "category": "count", "chance": 1 / 3},
    {"question_id": 3, "answer": "blue", "category": "colour_at", "chance": 0.25},
]


def _jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_exact_match_after_normalising(tmp_path: Path):
    gold = _jsonl(tmp_path / "gold.jsonl", GOLD)
    answers = _jsonl(tmp_path / "answers.jsonl", [
        {"question_id": 0, "text": " Red."}, {"question_id": 1, "text": "right"},
        {"question_id": 2, "text": "two"}, {"question_id": 3, "text": "blue is it"},
    ])
    score = score_answers(answers, gold)
    assert score.accuracy == pytest.approx(2 / 4)
    assert score.chance == pytest.approx((0.25 + 0.5 + 1 / 3 + 0.25) / 4)
    assert score.by_category == {"colour_at": 0.5, "count": 1.0, "side_of": 0.0}
    assert score.answered == 4


def test_answers_must_cover_the_gold_questions(tmp_path: Path):
    gold = _jsonl(tmp_path / "gold.jsonl", GOLD)
    answers = _jsonl(tmp_path / "answers.jsonl", [{"question_id": 0, "text": "red"}, {"question_id": 9, "text": "x"}])
    with pytest.raises(ValueError, match=r"unknown ids \[9\], unanswered ids \[1, 2, 3\]"):
        score_answers(answers, gold)


def test_prefill_flops_follow_the_visual_tokens(tiny_llava_checkpoint):
    mlp = prefill_flops(tiny_llava_checkpoint("mlp2x_gelu"), prompt_tokens=30)
    braco = prefill_flops(tiny_llava_checkpoint("braco_c2s5"), prompt_tokens=30)
    assert (mlp["visual_tokens"], braco["visual_tokens"]) == (36, 9)  # 6x6 grid vs C² + S = 4 + 5
    assert mlp["vision"] == braco["vision"] > 0
    assert braco["compressor"] > 0 == mlp["compressor"]
    assert braco["llm"] < mlp["llm"] and braco["total"] < mlp["total"]
    # the MLP runs on 36 vs 9 tokens: its FLOPs scale with the token count
    assert mlp["projector"] * 9 == braco["projector"] * 36
    more = prefill_flops(tiny_llava_checkpoint("mlp2x_gelu"), prompt_tokens=60)
    assert more["llm"] > mlp["llm"] and more["vision"] == mlp["vision"]


def _result(name: str, tokens: int, accuracy: float) -> RunResult:
    from llava.quickstart.report import Score

    score = Score(accuracy, 0.4, 10, {"colour_at": accuracy, "count": accuracy}, {"colour_at": 0.25, "count": 1 / 3})
    flops = {"visual_tokens": tokens, "total": tokens * 1e6, "accounting": "test accounting"}
    return RunResult(name, tokens, score, flops, {"stage1": 10.0, "stage2": 20.0, "eval": 3.0}, "ckpt", "answers")


def test_table_figure_and_json(tmp_path: Path):
    results = [_result("mlp2x_gelu", 64, 0.7), _result("braco_c2s5", 9, 0.6), _result("braco_c1s0", 1, 0.5)]
    lines = format_table(results).splitlines()
    # the llava.eval.compare table: question types as benchmarks, ratio to mlp2x_gelu, Acc., FLOPs, time per question
    assert lines[0] == "| Method | Tokens | Prompt | colour_at | count | Acc. (%) | FLOPs (M) | Lat. (ms) | Pareto |"
    assert lines[2] == "| mlp2x_gelu | 64 | not recorded | 70.0 (100.0%) | 70.0 (100.0%) | 100.0 | 64 | 300.00 | yes |"
    assert lines[3] == f"| braco_c2s5 | 9 | not recorded | 60.0 ({600 / 7:.1f}%) | 60.0 ({600 / 7:.1f}%) | {600 / 7:.1f} | 9 | 300.00 | yes |"
    assert lines[4].startswith("| braco_c1s0 | 1 |") and lines[4].endswith("| yes |")
    table = "\n".join(lines)
    assert "test accounting" in table and "held-out answering wall time per question" in table
    details = lines[lines.index(next(line for line in lines if line.startswith("projector"))):]
    assert details[2].split() == ["mlp2x_gelu", "70.0%", "40.0%", "30", "3", "33"]
    assert "chance by question type: colour_at 25%, count 33%" in table
    figure = plot_results(tmp_path / "quickstart.png", results)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads(write_results(tmp_path / "results.json", results, {"config": {"seed": 0}}).read_text())
    assert [run["projector"] for run in saved["runs"]] == ["mlp2x_gelu", "braco_c2s5", "braco_c1s0"]
    assert saved["runs"][1]["score"]["accuracy"] == 0.6 and saved["runs"][1]["wall_time"] == 33.0
