"""``llava.outputs`` extensions for commands that write into a folder over a long run (training, the quickstart):
an up-front writability check of the folder, and a full or read-only disk met midway named in one sentence."""

from __future__ import annotations

import errno
import tempfile
from pathlib import Path

import pytest

from llava.outputs import check_writable_folder, disk_errors
from llava.utils import UserError


def test_a_writable_folder_passes_and_nothing_is_left(tmp_path: Path) -> None:
    assert check_writable_folder(tmp_path / "new" / "run", "--output_dir") == tmp_path / "new" / "run"
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_location_is_one_sentence(tmp_path: Path, monkeypatch) -> None:
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(UserError, match=r"^--output_dir '.*run' cannot be written \(read-only file system\)"):
        check_writable_folder(tmp_path / "run", "--output_dir")


def test_a_file_is_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "run").write_text("x")
    with pytest.raises(UserError, match=r"--output_dir '.*run' is a file; pass a folder path"):
        check_writable_folder(tmp_path / "run", "--output_dir")


@pytest.mark.parametrize("code, reason", [(errno.ENOSPC, "no space left on the device"), (errno.EROFS, "read-only file system")])
def test_a_disk_error_inside_the_folder_becomes_a_sentence(tmp_path: Path, code: int, reason: str) -> None:
    with pytest.raises(UserError, match=rf"^--out '.*' cannot be written \({reason} while writing '.*ckpt.bin'\); free space"):
        with disk_errors("--out", tmp_path):
            raise OSError(code, "boom", str(tmp_path / "sub" / "ckpt.bin"))
    with pytest.raises(UserError, match=r"\(no space left on the device\); free space"):
        with disk_errors("--out", tmp_path):
            raise OSError(errno.ENOSPC, "No space left on device")  # a write on an open handle names no file


def test_other_errors_pass_through(tmp_path: Path) -> None:
    with pytest.raises(OSError) as error:
        with disk_errors("--out", tmp_path / "run"):
            raise OSError(errno.ENOSPC, "full", "/elsewhere/cache.bin")  # another disk: not this folder's fault
    assert not isinstance(error.value, UserError)
    with pytest.raises(PermissionError):
        with disk_errors("--out", tmp_path):
            raise PermissionError(errno.EACCES, "denied", str(tmp_path / "x"))
