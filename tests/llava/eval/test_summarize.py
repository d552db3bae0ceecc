"""The Table-1 row and Vanilla-normalised Acc., checked against the paper's own figures (Table 1)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from llava.eval import summarize

KEYS = ["gqa", "mmbench", "mmbench_cn", "mme", "pope", "sqa", "textvqa", "mmvet"]

# Table 1: GQA, MMB-EN, MMB-CN, MME, POPE-F1, SQA, VQA-T, MMVet, and the printed Acc.
VANILLA = [62.9, 65.5, 60.7, 1785, 85.7, 69.7, 58.0, 32.8]
BRACO_ROWS = {
    "25 tokens": ([58.1, 65.4, 57.2, 1705, 82.6, 70.0, 52.3, 30.4], 95.2),
    "16 tokens": ([57.5, 63.3, 55.8, 1704, 82.4, 69.5, 51.9, 29.8], 94.0),
    "9 tokens": ([57.0, 63.4, 54.2, 1773, 81.7, 69.7, 51.1, 28.2], 93.2),
}
# The per-benchmark percentages Table 1 prints under the 16-token Braco row.
BRACO16_PERCENT = [91.4, 96.6, 91.9, 95.5, 96.1, 99.7, 89.5, 90.9]


def results_dir(root: Path, scores: list[float]) -> Path:
    """A results folder as the scorers write it: one <benchmark>.json per benchmark."""
    root.mkdir(parents=True)
    for key, score in zip(KEYS, scores):
        (root / f"{key}.json").write_text(json.dumps({"benchmark": key, "score": score, "metric": "paper"}))
    return root


@pytest.mark.parametrize("row", list(BRACO_ROWS))
def test_paper_acc_from_results_dirs(tmp_path: Path, row: str) -> None:
    scores, printed_acc = BRACO_ROWS[row]
    run = results_dir(tmp_path / "braco", scores)
    baseline = results_dir(tmp_path / "vanilla", VANILLA)
    summary = summarize.main([str(run), "--baseline", str(baseline)])
    assert round(summary.acc, 1) == printed_acc
    assert summary.used == KEYS
    stored = json.loads((run / "summary.json").read_text())
    assert round(stored["acc"], 1) == printed_acc
    with (run / "summary.csv").open() as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["row", *KEYS, "acc"]
    assert round(float(rows[1][-1]), 1) == printed_acc


def test_braco16_percentages_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scores, _ = BRACO_ROWS["16 tokens"]
    scores_file = tmp_path / "braco16.json"
    # a JSON of scores works as well as a folder, with column names or keys and bare or wrapped numbers
    scores_file.write_text(json.dumps({"GQA": scores[0], "MMB-EN": scores[1], "mmbench_cn": {"score": scores[2]},
                                       **{key: value for key, value in zip(KEYS[3:], scores[3:])}}))
    summary = summarize.main([str(scores_file), "--baseline", "paper-vanilla", "--name", "Braco-16"])
    assert [round(summary.relative[key], 1) for key in KEYS] == BRACO16_PERCENT
    assert summary.acc == pytest.approx(sum(s / v for s, v in zip(scores, VANILLA)) / 8 * 100)
    table = capsys.readouterr().out
    assert "| Braco-16 | 57.5 | 63.3 | 55.8 | 1704.0 | 82.4 | 69.5 | 51.9 | 29.8 | 94.0 |" in table
    assert (tmp_path / "braco16_summary.json").is_file() and (tmp_path / "braco16_summary.csv").is_file()


def test_dotted_run_names_label_the_row_and_name_the_outputs(tmp_path: Path) -> None:
    # Upstream's checkpoint names have a dot (llava-v1.5-7b): it is part of the name, not a file suffix.
    run = results_dir(tmp_path / "llava-v1.5-7b-braco_c3s7", BRACO_ROWS["16 tokens"][0])
    assert summarize.main([str(run)]).name == "llava-v1.5-7b-braco_c3s7"
    scores_file = tmp_path / "llava-v1.5-7b.json"
    scores_file.write_text(json.dumps(dict(zip(KEYS, VANILLA))))
    assert summarize.main([str(scores_file)]).name == "llava-v1.5-7b"
    written = sorted(path.name for path in tmp_path.iterdir() if path.is_file())
    assert written == ["llava-v1.5-7b.json", "llava-v1.5-7b_summary.csv", "llava-v1.5-7b_summary.json"]


def test_partial_results_and_no_baseline(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "pope.json").write_text(json.dumps({"score": 85.7}))
    (run / "gqa.json").write_text(json.dumps({"score": 31.45}))
    summary = summarize.summarize(run)
    assert summary.acc is None and summary.scores == {"gqa": 31.45, "pope": 85.7}
    with_baseline = summarize.summarize(run, "paper-vanilla")
    assert with_baseline.used == ["gqa", "pope"]
    assert with_baseline.acc == pytest.approx(75.0)  # (50 + 100) / 2


@pytest.mark.parametrize(
    ("payload", "message"),
    [({"gqa": "high"}, "finite number"), ({"vqav5": 1.0}, "unknown benchmark"), ({"gqa": {"value": 1}}, "no 'score'")],
)
def test_bad_scores(tmp_path: Path, payload: dict, message: str) -> None:
    path = tmp_path / "scores.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=message):
        summarize.load_scores(path)


def test_empty_results_dir(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no benchmark scores"):
        summarize.summarize(tmp_path)
