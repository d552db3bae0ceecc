"""``llava/`` knows no compressor by name: every compressor declares itself through the plugin seam.

The names come from the registry, not from a list kept here: every installed plugin's name and the word of each
config-key prefix it owns (``mm_fourier_`` -> ``fourier``), so a new plugin is covered the day it registers. Strict:
code, strings, docstrings and comments all count. The only exceptions are listed below, each an exact line
fragment with the reason it must name a compressor.
"""

from __future__ import annotations

import re
from pathlib import Path

from llava.model.multimodal_projector import builtin
from llava.model.multimodal_projector.plugins import CompressorPlugin, list_plugins
from llava.model.reducers import reducer_plugins

LLAVA = Path(__file__).resolve().parents[2] / "llava"

#: (file relative to llava/, fragment of the line) -> why the line may name a compressor.
ALLOWED: dict[tuple[str, str], str] = {}


def plugin_words(plugins: list[CompressorPlugin]) -> set[str]:
    """The words that name a compressor: each plugin's name and its key prefixes without ``mm_`` and ``_``."""
    words = set()
    for plugin in plugins:
        if plugin is builtin.PLUGIN:
            continue
        words.add(plugin.name.lower())
        words.update(prefix.removeprefix("mm_").strip("_").lower() for prefix in getattr(plugin, "key_prefixes", ()))
    return {word for word in words if word}


def forbidden() -> re.Pattern[str]:
    """Every projector plugin's words and every in-LLM reducer plugin's name."""
    return re.compile("|".join(sorted(map(re.escape, plugin_words([*list_plugins(), *reducer_plugins()])))), re.IGNORECASE)


def offending_lines(root: Path = LLAVA, pattern: re.Pattern[str] | None = None) -> list[str]:
    """``path:line: text`` for every line under ``root`` that names a compressor and is not allowed."""
    pattern = pattern or forbidden()
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.suffix not in (".py", ".md", ".txt", ".json", ".sh", ".cfg", ".toml", ".yaml", ".yml"):
            continue
        relative = path.relative_to(root).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if pattern.search(line) and not any(file == relative and fragment in line for file, fragment in ALLOWED):
                found.append(f"llava/{relative}:{number}: {line.strip()}")
    return found


def test_the_words_come_from_every_installed_plugin():
    words = plugin_words(list_plugins())
    # this project's plugins are installed in the test environment (setup.py's entry points)
    assert {"braco", "fourier", "prumerge", "divprune", "mqt", "quecc", "tokenpacker", "fouriervlm"} <= words
    assert "builtin" not in words and "mlp2x_gelu" not in words
    assert {"fastv", "pyramiddrop"} <= plugin_words(list(reducer_plugins()))


def test_llava_names_no_compressor():
    assert offending_lines() == []


def test_every_exception_is_still_needed():
    """An allow-list entry whose line is gone must be removed (the list stays short and true)."""
    for (file, fragment), reason in ALLOWED.items():
        assert fragment in (LLAVA / file).read_text(encoding="utf-8"), f"stale exception ({reason}): {file}: {fragment}"


def test_the_check_catches_a_name(tmp_path: Path):
    (tmp_path / "module.py").write_text('"""Uses the Fourier trick."""\nx = 1  # see PRUMERGE\ny = 2\n')
    assert [line.split(": ", 1)[0] for line in offending_lines(tmp_path)] == ["llava/module.py:1", "llava/module.py:2"]
