"""``braco calibrate`` and ``braco diagnose energy|probe`` end to end on a tiny CLIP tower, and their one-sentence errors."""

import csv
import json
import shutil
import time

import pytest

from braco_patch import calibrate as calibrate_module
from braco_patch import cli as braco_cli
from braco_patch import diagnose as diagnose_module


def _error(capsys, fn, argv) -> str:
    with pytest.raises(SystemExit) as info:
        fn(argv)
    assert info.value.code == 2  # the project-wide user-error status (llava.utils.cli_main)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    return lines[0]


def test_braco_calibrate_end_to_end(tiny_tower, image_folder, tmp_path, capsys):
    out = tmp_path / "calibration"
    start = time.perf_counter()
    braco_cli.main(["calibrate", "--vision-tower", str(tiny_tower), "--images", str(image_folder), "--out", str(out),
                    "--n", "8", "--resamples", "3", "--batch-size", "5", "--no-progress"])
    assert time.perf_counter() - start < 60
    text = capsys.readouterr().out
    report = json.loads((out / "calibration.json").read_text())
    assert report["grid"] == 6 and report["cutoffs"] == [2, 3, 4, 5, 6]
    assert report["images_per_resample"] == [8, 8, 8] and report["seeds"] == [0, 1, 2]
    summary = report["summary"]
    assert len(summary["k_b_star"]) == 3 and all(k in (None, 4, 9, 16, 25, 36) for k in summary["k_b_star"])
    # Each resample's K_b* is the first scanned budget whose criterion Δ_st/K_b² − βρ_C is negative.
    for r in range(3):
        rows = [row for row in report["scan"] if row["resample"] == r]
        first = next((row["k_b"] for row in rows if row["delta_st"] / row["k_b"] ** 2 - report["beta"] * row["rho"] < 0), None)
        assert summary["k_b_star"][r] == first
    with (out / "calibration_scan.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 15
    table = (out / "calibration_table.md").read_text()
    assert "Vision encoder / resolution" in table and "K_b*" in table and table.strip() in text
    assert (out / "crossover.png").stat().st_size > 1000 and (out / "calibration_budgets.csv").exists()


def test_calibrate_accepts_a_llava_checkpoint_and_underscore_flags(tiny_tower, image_folder, tmp_path, capsys):
    ckpt = tmp_path / "llava-braco"
    ckpt.mkdir()
    shutil.copytree(tiny_tower, ckpt / "tower")
    (ckpt / "config.json").write_text(json.dumps({"model_type": "llava_llama", "mm_vision_tower": "tower",
                                                  "mm_vision_select_layer": -2}))
    calibrate_module.main(["--vision_tower", str(ckpt), "--images", str(image_folder), "--out", str(tmp_path / "o"),
                           "--n", "6", "--resamples", "2", "--cutoffs", "2", "3", "--beta", "0.01", "--gamma", "0.25",
                           "--gram_scale", "raw", "--no_progress"])
    report = json.loads((tmp_path / "o" / "calibration.json").read_text())
    assert (report["beta"], report["gamma"], report["gram_scale"], report["cutoffs"]) == (0.01, 0.25, "raw", [2, 3])


def test_diagnose_energy_end_to_end(tiny_tower, image_folder, tmp_path, capsys):
    out = tmp_path / "energy"
    diagnose_module.main(["energy", "--vision-tower", str(tiny_tower), "--images", str(image_folder), "--out", str(out),
                          "--max-images", "10", "--budgets", "4", "9", "36", "--no-progress"])
    report = json.loads((out / "energy.json").read_text())
    assert report["count"] == 10 and report["grid"] == 6 and report["magnitude_samples"] == 10
    assert {r["basis"] for r in report["table"]} == {"spatial", "dct", "haar", "random", "klt"}
    for row in report["table"]:
        assert 0 <= row["energy"] <= 1 + 1e-9
        if row["K"] == 36:
            assert row["energy"] == pytest.approx(1.0)
    assert report["coherence"]["dct"] <= 2 + 1e-9
    for name in ("energy_curves.png", "energy_maps.png", "energy_table.csv", "energy_curves.csv"):
        assert (out / name).stat().st_size > 100
    assert "structured / magnitude" in capsys.readouterr().out


@pytest.mark.parametrize("labels", ["folders", "jsonl"])
def test_diagnose_probe_end_to_end(labels, tiny_tower, labelled_folder, tmp_path, capsys):
    argv = ["probe", "--vision-tower", str(tiny_tower), "--images", str(labelled_folder), "--out", str(tmp_path / "p"),
            "--budgets", "1", "4", "9", "--bases", "spatial", "dct", "--probe-dim", "16", "--lambda", "0.3", "--no-progress"]
    if labels == "jsonl":
        records = [{"image": f"class{c}/{i}.png", "label": ["a", "b", "c"][c]} for c in range(3) for i in range(10)]
        (tmp_path / "labels.jsonl").write_text("\n".join(json.dumps(r) for r in records))
        argv += ["--labels", str(tmp_path / "labels.jsonl")]
    braco_cli.main(["diagnose"] + argv)
    report = json.loads((tmp_path / "p" / "probe.json").read_text())
    assert report["splits"] == {"train": 18, "val": 6, "test": 6} and len(report["rows"]) == 6
    for row in report["rows"]:
        assert row["compressibility"] == pytest.approx(0.3 * row["energy"] + 0.7 * row["readability"])
    assert (tmp_path / "p" / "probe_curves.png").exists() and (tmp_path / "p" / "probe.csv").exists()


def test_help_documents_the_defaults(capsys):
    with pytest.raises(SystemExit) as info:
        calibrate_module.main(["--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "paper: 1024" in text and "paper: 3, seeds 0/1/2" in text and "(default 0.0005" in text and "(default 0.5)" in text
    with pytest.raises(SystemExit):
        diagnose_module.main(["probe", "--help"])
    assert "(default 0.5)" in " ".join(capsys.readouterr().out.split())


def test_bad_inputs_get_one_clear_sentence(tiny_tower, image_folder, tmp_path, capsys):
    base = ["--out", str(tmp_path / "o"), "--no-progress"]
    calibrate, diagnose = calibrate_module.main, diagnose_module.main
    (tmp_path / "empty").mkdir()
    assert "no images" in _error(capsys, calibrate, ["--vision-tower", str(tiny_tower), "--images", str(tmp_path / "empty")] + base)
    broken = tmp_path / "broken"
    shutil.copytree(image_folder, broken)
    (broken / "zz_truncated.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    line = _error(capsys, calibrate, ["--vision-tower", str(tiny_tower), "--images", str(broken), "--n", "20"] + base)
    assert f"image file '{broken / 'zz_truncated.png'}' is not a readable image" in line
    line = _error(capsys, calibrate, ["--vision-tower", str(tiny_tower), "--images", str(image_folder), "--cutoffs", "2", "7"] + base)
    assert "cutoff C=7 is larger than the 6x6 token grid" in line
    line = _error(capsys, diagnose, ["energy", "--vision-tower", str(tiny_tower), "--images", str(image_folder), "--budgets", "40"] + base)
    assert "budget K=40 is larger than the 6x6 = 36 tokens" in line
    line = _error(capsys, calibrate, ["--vision-tower", str(tmp_path / "no-tower"), "--images", str(image_folder)] + base)
    assert "vision tower path" in line and "does not exist" in line
    line = _error(capsys, diagnose, ["probe", "--vision-tower", str(tiny_tower), "--images", str(image_folder)] + base)
    assert "a probe needs at least 2 classes, found 1" in line  # the one sub-folder, synthetic/, is one class


def test_c03_the_record_holds_the_settings_used_and_the_log_says_so(tiny_tower, image_folder, labelled_folder, tmp_path, caplog):
    # Before: `--n 100` on a folder of fewer images ran on all of them and calibration.json recorded "n": 100.
    count = sum(1 for path in image_folder.rglob("*") if path.is_file())
    with caplog.at_level("WARNING"):
        calibrate_module.main(["--vision-tower", str(tiny_tower), "--images", str(image_folder), "--out", str(tmp_path / "c"),
                               "--n", "1000", "--resamples", "2", "--cutoffs", "2", "--no-progress"])
    report = json.loads((tmp_path / "c" / "calibration.json").read_text())
    assert (report["n"], report["n_requested"], report["images_per_resample"]) == (count, 1000, [count, count])
    assert f"--n 1000 but only {count} images under" in caplog.text and f"using {count} (recorded as such)" in caplog.text
    # The same rule for the probe's channel projection: more channels than the tower has keeps them all.
    braco_cli.main(["diagnose", "probe", "--vision-tower", str(tiny_tower), "--images", str(labelled_folder), "--out",
                    str(tmp_path / "p"), "--budgets", "1", "--bases", "dct", "--probe-dim", "100000", "--no-progress"])
    probe = json.loads((tmp_path / "p" / "probe.json").read_text())
    assert probe["probe_dim"] == probe["dim"] < 100000


def test_a_picture_over_the_pixel_bound_is_refused_as_the_loaders_refuse_it(tiny_tower, image_folder, tmp_path, capsys):
    # C01, C02 (issue 31): calibrate and diagnose decoded a 10240x10240 PNG among the images (1.8 GB, exit 0) that
    # every loader refuses from its header. Between one and two times PIL's bound, PIL only warns; that is refused too.
    from PIL import Image

    from tests.llava.eval.images_faults import warning_range

    folder = tmp_path / "with-bomb"
    shutil.copytree(image_folder, folder)
    bomb = folder / "zz_big.png"
    bomb.write_bytes(warning_range())  # a header claiming 1.5x the bound, a few hundred bytes
    base = ["--vision-tower", str(tiny_tower), "--images", str(folder), "--no-progress"]
    expected = f"image file '{bomb}' has more pixels than the {Image.MAX_IMAGE_PIXELS} PIL decodes safely (a possible decompression bomb)"
    line = _error(capsys, calibrate_module.main, base + ["--out", str(tmp_path / "c"), "--n", "40", "--resamples", "1"])
    assert line.startswith("braco calibrate: error: ") and expected in line
    line = _error(capsys, diagnose_module.main, ["energy"] + base + ["--out", str(tmp_path / "d")])
    assert line.startswith("braco diagnose energy: error: ") and expected in line
