"""``braco demo --image``: a decompression bomb or an undecodable file is one sentence and nothing is written
(issue 14, item 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from braco_patch import demo
from tests.llava.eval.images_faults import write_bad_images


def test_bad_images_exit_with_one_sentence(tmp_path: Path) -> None:
    reasons = write_bad_images(tmp_path / "images")
    for name, reason in reasons.items():
        out = tmp_path / f"out-{name}"
        with pytest.raises(SystemExit) as caught:
            demo.main(["--image", str(tmp_path / "images" / name), "--out", str(out), "--budgets", "4"])
        message = str(caught.value.code)
        assert message.startswith(f"braco demo: image file '{tmp_path / 'images' / name}'") and reason in message
        assert "\n" not in message and not out.exists()
