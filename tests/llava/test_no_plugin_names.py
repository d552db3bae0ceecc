"""``llava/`` knows no compressor by name: every compressor declares itself through the plugin seam.

Strict: code, strings, docstrings and comments all count. The only exceptions are listed below, each an exact
line fragment with the reason it must name a compressor.
"""

from __future__ import annotations

import re
from pathlib import Path

LLAVA = Path(__file__).resolve().parents[2] / "llava"
FORBIDDEN = re.compile(r"braco|fourier", re.IGNORECASE)

#: (file relative to llava/, fragment of the line) -> why the line may name a compressor.
ALLOWED: dict[tuple[str, str], str] = {
    ("serve/model_worker.py", 'LEGACY_VIEW_ROUTE = "/worker_get_braco_view"'):
        "compatibility alias of the panel endpoint for pages of earlier releases",
    ("quickstart/run.py", 'DEFAULT_PROJECTORS = ("mlp2x_gelu", "braco_c2s5")'):
        "the quickstart's default comparison names a projector type as a string (no import)",
    ("quickstart/run.py", 'VIDEO_PROJECTORS = ("mlp2x_gelu", "braco_k16", "divprune_k16", "tokenpacker_k16")'):
        "the video quickstart's default comparison names projector types as strings (no import)",
}


def offending_lines(root: Path = LLAVA) -> list[str]:
    """``path:line: text`` for every line under ``root`` that names a compressor and is not allowed."""
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.suffix not in (".py", ".md", ".txt", ".json", ".sh", ".cfg", ".toml", ".yaml", ".yml"):
            continue
        relative = path.relative_to(root).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if FORBIDDEN.search(line) and not any(file == relative and fragment in line for file, fragment in ALLOWED):
                found.append(f"llava/{relative}:{number}: {line.strip()}")
    return found


def test_llava_names_no_compressor():
    assert offending_lines() == []


def test_every_exception_is_still_needed():
    """An allow-list entry whose line is gone must be removed (the list stays short and true)."""
    for (file, fragment), reason in ALLOWED.items():
        assert fragment in (LLAVA / file).read_text(encoding="utf-8"), f"stale exception ({reason}): {file}: {fragment}"


def test_the_check_catches_a_name(tmp_path: Path):
    (tmp_path / "module.py").write_text('"""Uses the Fourier trick."""\nx = 1  # see BRACO\ny = 2\n')
    assert [line.split(": ", 1)[0] for line in offending_lines(tmp_path)] == ["llava/module.py:1", "llava/module.py:2"]
