"""``braco export --official IN OUT``: a checkpoint trained here, in the official Braco code's format.

What the official code requires is written out from its sources (braco-official §2 and examples/infer.py): the
projector type ``fourier_mlp2x_gelu``, ``mm_fourier_C >= 1``, ``mm_fourier_spatial_keep >= 1`` and
``mm_fourier_use_polar_pe`` true for infer.py; the builder's defaults for absent keys (C 16, no polar embedding,
temp 1.5 -> 0.3 over 2000 steps) are why every key must be written. A side-by-side run of the official builder on
exports is recorded in docs/TRAINING.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from braco_patch.export import export_official, main
from llava.utils import UserError

from ..llava.model._support import load


def _official_infer_accepts(folder: Path) -> int:
    """examples/infer.py's checkpoint test, restated: the budget it reads, or an AssertionError."""
    config = json.loads((folder / "config.json").read_text())
    assert config["mm_projector_type"] == "fourier_mlp2x_gelu"
    cutoff, residual = int(config["mm_fourier_C"]), int(config["mm_fourier_spatial_keep"])
    assert cutoff >= 1 and residual >= 1 and config["mm_fourier_use_polar_pe"] is True
    return cutoff * cutoff + residual


@pytest.mark.parametrize("projector_type, cutoff, residual, idct", [("braco_c2s5", 2, 5, False), ("braco_c4s9", 4, 9, True),
                                                                      ("braco_k16", 3, 7, False)])
def test_export_is_what_the_official_code_reads_and_loads_back_equal(tiny_llava_checkpoint, tmp_path, projector_type, cutoff,
                                                                     residual, idct):
    source = tiny_llava_checkpoint(projector_type)
    out = tmp_path / "official"
    result = export_official(source, out)
    config = json.loads((out / "config.json").read_text())
    assert _official_infer_accepts(out) == cutoff * cutoff + residual == result["tokens"]
    assert (config["mm_fourier_C"], config["mm_fourier_spatial_keep"], config["mm_fourier_low_idct"]) == (cutoff, residual, idct)
    assert (config["mm_fourier_temperature"], config["mm_fourier_K_high"], config["mm_fourier_spatial_method"]) == (0.8, 0, "learned")
    assert config["mm_fourier_polar_include_raw"] is False and config["mm_fourier_spatial_hidden_mult"] == 1
    assert not any(key.startswith("mm_braco_") for key in config)
    assert config["torch_dtype"] == config["dtype"]
    assert os.path.samefile(out / "model.safetensors", source / "model.safetensors") or result["files"]["model.safetensors"] == "copied"

    _, original, _, _ = load(source)
    _, exported, _, _ = load(out)
    features = torch.randn(2, 36, original.config.mm_hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(exported.get_model().mm_projector(features), original.get_model().mm_projector(features),
                                   rtol=0, atol=0)


def test_a_relative_tower_becomes_absolute(tiny_llava_checkpoint, tiny_tower_dir, tmp_path):
    source = tmp_path / "runs" / "ckpt"
    shutil.copytree(tiny_llava_checkpoint("braco_c2s5"), source)
    shutil.copytree(tiny_tower_dir, tmp_path / "clip")
    config = json.loads((source / "config.json").read_text())
    config["mm_vision_tower"] = "../../clip"
    (source / "config.json").write_text(json.dumps(config))
    export_official(source, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["mm_vision_tower"] == str(tmp_path / "clip")


@pytest.mark.parametrize("projector_type, message", [
    ("mlp2x_gelu", "mm_projector_type 'mlp2x_gelu' is not a Braco projector"),
    ("braco_c2s5_randrot", "this checkpoint uses 'randrot' coordinates"),
])
def test_what_has_no_official_form_is_one_sentence(tiny_llava_checkpoint, tmp_path, projector_type, message):
    with pytest.raises(UserError, match=message):
        export_official(tiny_llava_checkpoint(projector_type), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_outputs_that_would_lose_data_are_refused(tiny_llava_checkpoint, tmp_path):
    source = tmp_path / "ckpt"
    shutil.copytree(tiny_llava_checkpoint("braco_c2s5"), source)
    before = {p.name: p.read_bytes() for p in source.iterdir() if p.is_file()}
    with pytest.raises(UserError, match="is the same folder as IN"):
        export_official(source, source)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(UserError, match="already holds files this command did not write"):
        export_official(source, mine)
    assert (mine / "notes.txt").read_text() == "keep"
    assert {p.name: p.read_bytes() for p in source.iterdir() if p.is_file()} == before
    with pytest.raises(UserError, match="has no config.json"):
        export_official(tmp_path / "mine", tmp_path / "out")
    export_official(source, tmp_path / "out")
    export_official(source, tmp_path / "out")  # its own earlier export is replaced


def test_command_line(tiny_llava_checkpoint, tmp_path, capsys):
    main(["--official", str(tiny_llava_checkpoint("braco_c2s5")), str(tmp_path / "out")])
    assert "mm_projector_type fourier_mlp2x_gelu (c2s5, 9 visual tokens)" in capsys.readouterr().out
    result = subprocess.run([sys.executable, "-m", "braco_patch.cli", "export", str(tmp_path / "out"), str(tmp_path / "x")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "the following arguments are required: --official" in result.stderr
    result = subprocess.run([sys.executable, "-m", "braco_patch.cli", "export", "--official", str(tmp_path / "nowhere"),
                             str(tmp_path / "x")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stderr.strip().endswith("is not a folder; pass a Braco checkpoint folder (stage 1 or stage 2)")
    assert "Traceback" not in result.stderr
