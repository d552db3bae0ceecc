"""The output guard (llava.outputs): validate first, refuse output = input and foreign folders, atomic writes with
the user's umask, old results kept until new ones exist, damaged lines set aside instead of dropped."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from llava import outputs
from llava.outputs import (
    MARKER,
    atomic_folder,
    atomic_output,
    check_output_file,
    check_output_folder,
    guard_outputs,
    read_jsonl_resumable,
    scan_jsonl,
    write_text,
)
from llava.utils import UserError


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_output_gives_the_mode_of_a_plain_open(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        with open(tmp_path / "plain.txt", "w") as handle:
            handle.write("x")
        write_text(tmp_path / "atomic.txt", "x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "atomic.txt") == _mode(tmp_path / "plain.txt") == 0o666 & ~umask


def test_atomic_output_keeps_the_old_file_when_the_block_fails(tmp_path: Path) -> None:
    target = tmp_path / "score.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as handle:
            handle.write("half of the new")
            raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["score.json"]  # no temporary left behind


def test_atomic_output_turns_a_full_disk_into_a_sentence_and_keeps_the_old_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "score.json"
    target.write_text("old")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(UserError, match=r"cannot write .*score.json.* \(no space left on the device\); it was left as it was"):
        with atomic_output(target) as handle:
            handle.write("new")
            monkeypatch.setattr(outputs.os, "replace", full)
    assert target.read_text() == "old"


def test_output_equal_to_an_input_is_refused_under_any_spelling(tmp_path: Path) -> None:
    src = tmp_path / "answers.jsonl"
    src.write_text("{}\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(src)
    for spelling in (str(src), str(tmp_path / "." / "answers.jsonl"), str(link)):
        with pytest.raises(UserError, match=r"^--out .* is the same file as --in .*; writing it would destroy the input"):
            guard_outputs(inputs={"--in": src}, files={"--out": spelling})


def test_a_folder_holding_an_input_is_refused_as_output(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(UserError, match=r"is a folder holding --model-path"):
        guard_outputs(inputs={"--model-path": checkpoint / "model.safetensors"}, folders={"--save": checkpoint})


def test_a_file_output_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^--out .* is a folder; pass a file path$"):
        check_output_file(tmp_path, "--out")


def test_a_file_output_under_a_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    with pytest.raises(UserError, match=r"is a file, not a folder"):
        check_output_file(blocker / "out.json", "--out")


def test_an_unwritable_location_is_refused_before_anything_is_written(tmp_path: Path, monkeypatch) -> None:
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(outputs.tempfile, "mkstemp", read_only)
    with pytest.raises(UserError, match=r"^--out .* cannot be written \(read-only file system\); choose a writable location$"):
        check_output_file(tmp_path / "new" / "out.json", "--out")
    assert not (tmp_path / "new").exists()  # nothing created by the check


def test_a_full_disk_is_refused_up_front(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(outputs.shutil, "disk_usage", lambda path: outputs.shutil._ntuple_diskusage(1 << 20, 1 << 20, 0))
    with pytest.raises(UserError, match=r"the disk holding .* is full"):
        check_output_file(tmp_path / "out.json", "--out")


def test_a_foreign_non_empty_folder_is_refused_and_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / "someone-elses"
    folder.mkdir()
    (folder / "notes.txt").write_text("precious")
    with pytest.raises(UserError, match=r"already holds files this command did not write \(notes.txt\)"):
        check_output_folder(folder, "--save-model-path")
    assert (folder / "notes.txt").read_text() == "precious"


def test_empty_absent_and_own_folders_are_accepted(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    check_output_folder(tmp_path / "empty", "--out")
    check_output_folder(tmp_path / "absent" / "deeper", "--out")
    with atomic_folder(tmp_path / "ours", command="test") as staging:
        (staging / "a.txt").write_text("1")
    check_output_folder(tmp_path / "ours", "--out")  # a re-run may replace its own folder


def test_allowed_entries_do_not_make_a_folder_foreign(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-12").mkdir()
    check_output_folder(tmp_path, "--output_dir", allow=("checkpoint-*",))
    with pytest.raises(UserError):
        check_output_folder(tmp_path, "--output_dir")


def test_atomic_folder_replaces_the_old_folder_only_on_success(tmp_path: Path) -> None:
    target = tmp_path / "merged"
    with atomic_folder(target, command="test") as staging:
        (staging / "config.json").write_text("first")
    assert (target / MARKER).is_file() and (target / "config.json").read_text() == "first"
    with pytest.raises(RuntimeError):
        with atomic_folder(target, command="test") as staging:
            (staging / "config.json").write_text("second, unfinished")
            raise RuntimeError("killed")
    assert (target / "config.json").read_text() == "first"
    with atomic_folder(target, command="test") as staging:
        (staging / "config.json").write_text("second")
    assert (target / "config.json").read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged"]


def test_damaged_lines_are_set_aside_and_every_intact_line_kept(tmp_path: Path) -> None:
    path = tmp_path / "reviews.jsonl"
    lines = [json.dumps({"id": i}) + "\n" for i in range(5)]
    lines[1] = '{"id": 1, "tex\n'  # damaged in the middle
    path.write_text("".join(lines) + '{"id": 5')  # and a write cut off at the end
    records, rejected, count = read_jsonl_resumable(path)
    assert [r["id"] for r in records] == [0, 2, 3, 4]
    assert count == 2 and rejected == tmp_path / "reviews.jsonl.rejected"
    assert rejected.read_text() == '{"id": 1, "tex\n{"id": 5\n'
    assert path.read_text() == "".join(lines[i] for i in (0, 2, 3, 4))
    # a second damaged run appends to the rejected file instead of replacing it
    with path.open("a") as handle:
        handle.write("not json\n")
    read_jsonl_resumable(path)
    assert rejected.read_text().endswith("not json\n") and rejected.read_text().startswith('{"id": 1')


def test_an_intact_last_line_without_newline_is_kept_and_terminated(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": 0}\n{"id": 1}')
    records, rejected, count = read_jsonl_resumable(path)
    assert [r["id"] for r in records] == [0, 1] and rejected is None and count == 0
    assert path.read_text() == '{"id": 0}\n{"id": 1}\n'


def test_scan_reads_without_changing_and_accept_marks_more_lines_damaged(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    text = '{"id": 1}\n{"id": 2, "x\n{"other": 3}\n\n{"id": 4}'
    path.write_text(text)
    has_id = lambda record: "id" in record  # noqa: E731
    scan = scan_jsonl(path, accept=has_id)
    assert path.read_text() == text and not (tmp_path / "answers.jsonl.rejected").exists()  # reading changed nothing
    assert scan.records == [{"id": 1}, {"id": 4}] and scan.numbers == [1, 5]
    assert scan.damaged == ['{"id": 2, "x\n', '{"other": 3}\n']
    records, rejected, count = read_jsonl_resumable(path, accept=has_id)
    assert records == scan.records and count == 2
    assert rejected.read_text() == '{"id": 2, "x\n{"other": 3}\n' and path.read_text() == '{"id": 1}\n{"id": 4}\n'
    assert scan_jsonl(tmp_path / "absent.jsonl").records == []


def test_the_write_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    check_output_file(tmp_path / "out.json", "--out")
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_no_output_of_the_command_is_never_set_aside(tmp_path: Path) -> None:
    # Issue 31 (V08): a video given as the answers file was read as "7 damaged lines", moved to .rejected (altered
    # by the text round trip) and replaced; so was any file at that path. Only pieces of records are damage.
    from llava.utils import UserError

    has_id = lambda record: "id" in record  # noqa: E731
    for name, data in (("clip.mp4", b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00mdat\xff\xfe"), ("notes.txt", b"my notes\nmore\n"),
                       ("other.jsonl", b'{"other": 1}\n{"other": 2}\n'), ("list.json", b"[1, 2]\n")):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(UserError, match=rf"^--out '{path}' is not an output of this command \(none of its lines is one of "
                                            r"its records; it starts with .*\), so it is left as it is"):
            read_jsonl_resumable(path, what="--out", accept=has_id)
        assert path.read_bytes() == data and not (tmp_path / f"{name}.rejected").exists()
    # A run killed while writing its first record left a piece of one: that is damage, set aside as before.
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"id": 1, "te')
    assert read_jsonl_resumable(cut, accept=has_id)[2] == 1 and cut.read_text() == ""
    assert (tmp_path / "cut.jsonl.rejected").read_text() == '{"id": 1, "te\n'
