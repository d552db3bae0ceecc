"""``braco demo --image``: a decompression bomb or an undecodable file is one sentence and nothing is written
(issue 14, item 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from braco_patch import demo
from tests.llava.eval.images_faults import write_bad_images


def test_bad_images_exit_with_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reasons = {**write_bad_images(tmp_path / "images"), "missing.png": "does not exist"}
    for name, reason in reasons.items():
        out = tmp_path / f"out-{name}"
        capsys.readouterr()
        with pytest.raises(SystemExit) as caught:
            demo.main(["--image", str(tmp_path / "images" / name), "--out", str(out), "--budgets", "4"])
        assert caught.value.code == 2  # a user error, as every other refusal of the command (it was 1)
        message = capsys.readouterr().err.splitlines()[-1]
        assert message.startswith(f"braco demo: error: image file '{tmp_path / 'images' / name}'") and reason in message
        assert not out.exists()
