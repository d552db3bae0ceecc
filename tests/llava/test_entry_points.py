"""``llava.utils.load_entry_points``: the one loader behind the projector, tower and language-model registries."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from llava.utils import load_entry_points

GROUP = "llava.test_entry_points"


@pytest.fixture()
def installed_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real distribution on sys.path whose entry points name one working and one broken plugin module."""
    (tmp_path / "good_plugin.py").write_text("import builtins\nbuiltins.good_plugin_imports = getattr(builtins, 'good_plugin_imports', 0) + 1\n")
    (tmp_path / "broken_plugin.py").write_text("raise ImportError('needs a package that is not installed')\n")
    dist = tmp_path / "fake_plugins-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugins\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\ngood = good_plugin\nbroken = broken_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("good_plugin", "broken_plugin"):
        sys.modules.pop(name, None)


def test_each_plugin_is_imported_once_and_a_broken_one_is_only_logged(installed_plugins, caplog):
    import builtins

    builtins.good_plugin_imports = 0
    with caplog.at_level(logging.WARNING):
        load_entry_points(GROUP, "test")
        load_entry_points(GROUP, "test")
    assert builtins.good_plugin_imports == 1
    warnings = [record.getMessage() for record in caplog.records if "could not load test plugin" in record.getMessage()]
    assert len(warnings) == 1 and "'broken'" in warnings[0] and "not installed" in warnings[0]
