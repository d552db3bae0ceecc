"""The quickstart's output folder: arguments are checked before anything is touched, and only folders the
quickstart created itself are ever replaced (issue 14, item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llava.quickstart.run import MARKER, QuickstartConfig, main, prepare_out, run_quickstart


def _user_folder(root: Path) -> Path:
    """A folder laid out like upstream's ``playground`` with the user's own data in it."""
    for name in ("data", "models", "runs"):
        (root / name).mkdir(parents=True)
        (root / name / "keep.txt").write_text(name)
    return root


def test_bad_projector_touches_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = _user_folder(tmp_path / "playground")
    with pytest.raises(ValueError, match="unknown mm_projector_type 'not_a_projector'"):
        run_quickstart(out, QuickstartConfig(projectors=("not_a_projector",)))
    assert sorted(p.read_text() for p in out.glob("*/keep.txt")) == ["data", "models", "runs"]


def test_foreign_non_empty_folder_is_refused(tmp_path: Path) -> None:
    out = _user_folder(tmp_path / "playground")
    with pytest.raises(ValueError, match="was not created by the quickstart"):
        prepare_out(out)
    assert sorted(p.read_text() for p in out.glob("*/keep.txt")) == ["data", "models", "runs"]


def test_own_folder_is_reused_and_only_its_parts_replaced(tmp_path: Path) -> None:
    out = tmp_path / "qs"
    prepare_out(out)  # fresh: created and marked
    assert (out / MARKER).is_file()
    (out / "data").mkdir()
    (out / "data" / "old.txt").write_text("old run")
    (out / "notes.txt").write_text("user notes")  # not one of the quickstart's folders
    prepare_out(out)
    assert not (out / "data").exists()
    assert (out / "notes.txt").read_text() == "user notes"


def test_empty_existing_folder_is_adopted(tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    prepare_out(out)
    assert (out / MARKER).is_file()


def test_out_that_is_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "file.txt"
    target.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        prepare_out(target)
    assert target.read_text() == "x"


def test_command_line_refuses_in_one_sentence(tmp_path: Path) -> None:
    out = _user_folder(tmp_path / "playground")
    with pytest.raises(ValueError, match="was not created by the quickstart"):
        main(["--out", str(out), "--reduced"])
    assert (out / "data" / "keep.txt").read_text() == "data"


def test_read_only_out_is_one_sentence_before_anything_runs(tmp_path: Path, read_only_under, capsys) -> None:
    # Q01: a raw "OSError: [Errno 30] Read-only file system" before.
    from llava.utils import cli_main

    read_only = read_only_under(tmp_path / "ro")
    assert cli_main(main, ["--out", str(read_only / "qs"), "--reduced"]) == 2
    error = capsys.readouterr().err.strip()
    assert f"--out '{read_only / 'qs'}' cannot be written (read-only file system)" in error and "\n" not in error
    assert list(read_only.iterdir()) == []


def test_disk_full_midway_is_one_sentence(tmp_path: Path, monkeypatch, capsys) -> None:
    # Q04: a raw "OSError: [Errno 28] No space left on device" from PIL's save before.
    import errno

    from llava.quickstart import run
    from llava.utils import cli_main

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")  # a write on an open handle names no file

    monkeypatch.setattr(run, "write_dataset", full)
    out = tmp_path / "small-disk" / "qs"
    assert cli_main(main, ["--out", str(out), "--reduced"]) == 2
    error = capsys.readouterr().err.strip()
    assert f"--out '{out}' cannot be written (no space left on the device); free space" in error and "\n" not in error
