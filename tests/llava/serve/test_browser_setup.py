"""The browser test's setup rules (issue 14): CI provides chromium (package lists refreshed first) and the test
fails, never skips, under CI when it cannot run; a developer machine still gets a skip with the reason."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from . import test_browser

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("1", True), ("TRUE", True), ("", False), ("false", False)])
def test_ci_detection(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("CI", value)
    assert test_browser.in_ci() is expected


def test_unavailable_fails_under_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="cannot run under CI: no chromium"):
        test_browser.unavailable("no chromium")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no chromium"):
        test_browser.unavailable("no chromium")


def test_apt_install_refreshes_empty_package_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    lists = {"fresh": False}

    def fake_run(command: list[str], timeout: float) -> tuple[bool, str]:
        calls.append(command)
        if command[:2] == ["apt-get", "update"]:
            lists["fresh"] = True
            return True, ""
        return (True, "") if lists["fresh"] else (False, "E: Unable to locate package chromium")

    monkeypatch.setattr(test_browser, "_run", fake_run)
    ok, _ = test_browser._apt_install_chromium()
    assert ok and [c[:2] for c in calls] == [["apt-get", "install"], ["apt-get", "update"], ["apt-get", "install"]]


def test_ci_script_provides_the_browser() -> None:
    script = (REPO / ".ci" / "run").read_text()
    subprocess.run(["bash", "-n", str(REPO / ".ci" / "run")], check=True)
    assert "export CI=true" in script
    update, install = script.index("apt-get update"), script.index("apt-get install -y --no-install-recommends chromium")
    assert update < install < script.index("make test")
