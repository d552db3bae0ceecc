"""The output guard: the one rule that every command which writes files follows.

1. **Validate before writing.** :func:`guard_outputs` checks, before any heavy work and before anything is
   touched, that every output can be written: no output is one of the command's inputs (or a folder holding
   them), a file output is not a folder, its folder is writable and its disk not full, and a folder output is
   empty, absent or one this project made (it carries :data:`MARKER`).
2. **Write atomically, with the user's umask.** :func:`atomic_output` writes a file next to the target and
   renames it over the target only when the write finished; :func:`atomic_folder` does the same for a folder.
   The new file gets the permissions an ordinary ``open(path, "w")`` would give (``0666 & ~umask``), not
   ``mkstemp``'s 0600.
3. **Replace old results only once new ones exist.** Both context managers leave the old file or folder as it
   was when the block fails or the process is killed.
4. **Name a disk that fills up midway.** :func:`disk_errors` turns a full or read-only disk met while a long
   command writes into its output location (training checkpoints, the quickstart's data) into one sentence.
5. **Never truncate long or paid work.** :func:`set_aside` moves damaged lines of a resumable JSONL file into
   ``<file>.rejected`` (appended, never overwritten) and rewrites the file with the intact lines only; a file with
   no record of the command in it and lines that are not pieces of one (a video, a picture, another file) is not
   taken for a damaged output: it is refused, untouched (:func:`scan_jsonl`).

Errors are :class:`~llava.utils.UserError` sentences naming the flag, the path and the fix. Nothing here imports
torch, so scorers and converters use it on machines without a model stack.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from llava.utils import UserError

PathLike = str | os.PathLike[str]

#: The file that marks a folder as written by one of this project's commands (so a re-run may replace it).
MARKER = ".llava-output"

#: Suffix of the file that keeps the damaged lines of a resumable JSONL output.
REJECTED_SUFFIX = ".rejected"

_UMASK_LOCK = threading.Lock()


def _path(path: PathLike) -> Path:
    return Path(os.path.expanduser(os.fspath(path)))


def current_umask() -> int:
    """The process umask (read by setting and restoring it, under a lock)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def same_file(first: PathLike, second: PathLike) -> bool:
    """Whether two paths name the same file or folder, whatever their spelling (``./a``, ``~``, links)."""
    one, two = os.path.realpath(_path(first)), os.path.realpath(_path(second))
    if one == two:
        return True
    try:
        return os.path.samefile(one, two)
    except OSError:  # one of them does not exist yet, so they differ
        return False


def _inside(path: PathLike, folder: PathLike) -> bool:
    """Whether ``path`` lies inside (or is) ``folder``, after resolving links."""
    inner, outer = os.path.realpath(_path(path)), os.path.realpath(_path(folder))
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_outputs(inputs: Mapping[str, PathLike | None], outputs: Mapping[str, PathLike | None]) -> None:
    """Refuse an output that is one of the inputs, or a folder that holds one of them.

    Give every file the command reads: the flags' files and the files they name (a question's image or video, a
    results folder's cost file). Many inputs cost little: an existing output is compared with each by its device
    and inode (one ``stat`` each; links and other spellings included), a new one with the inputs that do not exist
    either (by their resolved path).

    Args:
        inputs: Flag name (or a description) -> a path the command reads; ``None`` entries are ignored.
        outputs: Flag name -> a path the command writes.

    Raises:
        UserError: Naming both flags and the path.
    """
    for out_flag, out_path in outputs.items():
        if out_path is None:
            continue
        target = _path(out_path)
        try:
            out_stat: os.stat_result | None = os.stat(target)
        except OSError:
            out_stat = None
        folder = out_stat is not None and target.is_dir()
        for in_flag, in_path in inputs.items():
            if in_path is None:
                continue
            same = _same_as_output(in_path, target, out_stat)
            if same or (folder and _inside(in_path, out_path)):
                relation = ("the same folder as" if _path(in_path).is_dir() else "the same file as") if same else "a folder holding"
                raise UserError(
                    f"{out_flag} {os.fspath(out_path)!r} is {relation} "
                    f"{in_flag} {os.fspath(in_path)!r}; writing it would destroy the input, so pass another {out_flag}"
                )


def _same_as_output(path: PathLike, output: Path, output_stat: os.stat_result | None) -> bool:
    """:func:`same_file` of an input and an output whose ``stat`` (``None``: it does not exist) is known."""
    try:
        found = os.stat(_path(path))
    except OSError:
        found = None
    if output_stat is not None:
        return found is not None and (found.st_dev, found.st_ino) == (output_stat.st_dev, output_stat.st_ino)
    return found is None and os.path.realpath(_path(path)) == os.path.realpath(output)


def check_distinct_outputs(outputs: Mapping[str, PathLike]) -> None:
    """Refuse two output flags that name the same path (the second write would replace the first).

    Raises:
        UserError: Naming both flags and the path.
    """
    flags = list(outputs)
    for i, first in enumerate(flags):
        for second in flags[i + 1 :]:
            if same_file(outputs[first], outputs[second]):
                raise UserError(
                    f"{first} and {second} both name {os.fspath(outputs[second])!r}; one would replace the other, "
                    f"so pass a different path to one of them"
                )


def _nearest_existing(path: Path) -> Path:
    current = path
    while not current.exists():
        if current.parent == current:
            break
        current = current.parent
    return current


def _check_writable_folder(folder: Path, flag: str, shown: PathLike) -> None:
    """Raise ``UserError`` unless a file can be created in ``folder`` (or the nearest folder that exists)."""
    base = _nearest_existing(folder)
    if not base.is_dir():
        raise UserError(f"{flag} {os.fspath(shown)!r} cannot be written: {os.fspath(base)!r} is a file, not a folder")
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".llava-write-probe.", dir=base)
    except OSError as error:
        raise UserError(f"{flag} {os.fspath(shown)!r} cannot be written ({_reason(error)}); choose a writable location") from None
    os.close(descriptor)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    try:
        free = shutil.disk_usage(base).free
    except OSError:
        return
    if free == 0:
        raise UserError(f"{flag} {os.fspath(shown)!r} cannot be written: the disk holding {os.fspath(base)!r} is full")


def _reason(error: OSError) -> str:
    if error.errno == errno.EROFS:
        return "read-only file system"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if error.errno == errno.ENOSPC:
        return "no space left on the device"
    return error.strerror or type(error).__name__


def check_writable_folder(folder: PathLike, flag: str) -> Path:
    """Check that files can be created in ``folder`` (or the nearest folder of it that exists) and its disk is
    not full, for a command that writes into a folder it does not replace as a whole (a training ``--output_dir``).

    Returns:
        The expanded path.

    Raises:
        UserError: One sentence naming the flag, the path and why.
    """
    target = _path(folder)
    if target.exists() and not target.is_dir():
        raise UserError(f"{flag} {os.fspath(folder)!r} is a file; pass a folder path")
    _check_writable_folder(target, flag, folder)
    return target


#: errno values that mean "this location cannot take more data", whichever file was being written.
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


@contextlib.contextmanager
def disk_errors(flag: str, folder: PathLike) -> Iterator[None]:
    """Turn a full or read-only disk met while writing into ``folder`` into one sentence naming ``flag``.

    An ``OSError`` counts when its errno is ENOSPC, EDQUOT or EROFS and it names a file inside ``folder`` (or
    names no file: a write or close on an open handle, which only the writer in this block makes). Other
    errors pass through unchanged.

    Raises:
        UserError: ``"<flag> '<folder>': the disk ... (no space left on the device) while writing ...; ..."``.
    """
    try:
        yield
    except OSError as error:
        inside = error.filename is None or _inside(os.fspath(error.filename), folder)
        if error.errno not in _DISK_ERRNOS or not inside:
            raise
        where = f" while writing {os.fspath(error.filename)!r}" if error.filename else ""
        raise UserError(
            f"{flag} {os.fspath(folder)!r} cannot be written ({_reason(error)}{where}); free space or choose another "
            "location, then run again"
        ) from None


def check_output_file(path: PathLike, flag: str) -> Path:
    """Check that ``path`` can be written as a file: it is not a folder and its folder is writable.

    Returns:
        The expanded path.

    Raises:
        UserError: One sentence naming the flag, the path and why.
    """
    target = _path(path)
    if target.is_dir():
        raise UserError(f"{flag} {os.fspath(path)!r} is a folder; pass a file path")
    _check_writable_folder(target.parent, flag, path)
    return target


def is_ours(folder: PathLike) -> bool:
    """Whether ``folder`` was written by one of this project's commands (it holds :data:`MARKER`)."""
    return (_path(folder) / MARKER).is_file()


def check_output_folder(path: PathLike, flag: str, *, allow: Iterable[str] = ()) -> Path:
    """Check that ``path`` can be written as a folder that this command owns.

    Accepted: a path that does not exist, an empty folder, or a folder holding :data:`MARKER` (written by an
    earlier run of one of our commands). ``allow`` names entries that may be present besides those (for
    example the ``checkpoint-*`` folders a resumed training run continues from; shell-style patterns).

    Raises:
        UserError: For a file, a non-empty folder this project did not make, or a place that cannot be written.
    """
    import fnmatch

    target = _path(path)
    if target.exists() and not target.is_dir():
        raise UserError(f"{flag} {os.fspath(path)!r} is a file; pass a folder path")
    if target.is_dir() and not is_ours(target):
        foreign = sorted(entry.name for entry in target.iterdir() if not any(fnmatch.fnmatch(entry.name, p) for p in allow))
        if foreign:
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise UserError(
                f"{flag} {os.fspath(path)!r} already holds files this command did not write ({shown}); "
                f"choose an empty or new folder so nothing of yours is overwritten"
            )
    _check_writable_folder(target, flag, path)
    return target


def guard_outputs(
    *,
    inputs: Mapping[str, PathLike | None] | None = None,
    files: Mapping[str, PathLike | None] | None = None,
    folders: Mapping[str, PathLike | None] | None = None,
) -> None:
    """The up-front check of a command that writes: call it after parsing flags, before any heavy work.

    Args:
        inputs: Flag -> path the command reads (files or folders).
        files: Flag -> file the command writes.
        folders: Flag -> folder the command writes (see :func:`check_output_folder`).

    Raises:
        UserError: The first problem found, as one sentence.
    """
    inputs = dict(inputs or {})
    files = {flag: path for flag, path in (files or {}).items() if path is not None}
    folders = {flag: path for flag, path in (folders or {}).items() if path is not None}
    check_outputs(inputs, {**files, **folders})
    check_distinct_outputs({**files, **folders})
    for flag, path in files.items():
        check_output_file(path, flag)
    for flag, path in folders.items():
        check_output_folder(path, flag)


def _apply_umask(path: PathLike, directory: bool = False) -> None:
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


@contextlib.contextmanager
def atomic_output(path: PathLike, mode: str = "w") -> Iterator[IO[Any]]:
    """Write ``path`` through a temporary file next to it that replaces ``path`` only when the block succeeds.

    A run that fails or is killed midway leaves ``path`` as it was. The file gets the permissions of a plain
    ``open(path, "w")`` under the current umask.

    Args:
        path: The final file; its parent folder is created.
        mode: ``"w"`` (UTF-8 text) or ``"wb"``.

    Raises:
        UserError: If the folder cannot be written or the disk fills up (the old file stays).
    """
    target = _path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as error:
        raise UserError(f"cannot write {os.fspath(path)!r} ({_reason(error)}); choose a writable location") from None
    try:
        with os.fdopen(descriptor, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
        _apply_umask(temporary)
        os.replace(temporary, target)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if error.errno in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT):
            raise UserError(f"cannot write {os.fspath(path)!r} ({_reason(error)}); it was left as it was") from None
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_text(path: PathLike, text: str) -> Path:
    """Write UTF-8 text atomically (see :func:`atomic_output`)."""
    with atomic_output(path) as handle:
        handle.write(text)
    return _path(path)


def write_json(path: PathLike, payload: Any, *, indent: int | None = 2) -> Path:
    """Write JSON atomically (see :func:`atomic_output`)."""
    text = json.dumps(payload, indent=indent, ensure_ascii=False)
    return write_text(path, text + ("\n" if indent is not None else ""))


@contextlib.contextmanager
def atomic_folder(path: PathLike, *, command: str) -> Iterator[Path]:
    """Build a folder under a temporary name next to ``path``; it replaces ``path`` only when the block succeeds.

    The block writes into the yielded temporary folder. On success the folder gets :data:`MARKER` (naming
    ``command``), an old folder at ``path`` is moved aside, the new one renamed into place and the old one
    removed. On failure the temporary folder is removed and ``path`` is untouched. Call
    :func:`check_output_folder` first: this function does not judge whether replacing ``path`` is allowed.

    Yields:
        The temporary folder to write into.
    """
    target = _path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    except OSError as error:
        raise UserError(f"cannot write {os.fspath(path)!r} ({_reason(error)}); choose a writable location") from None
    try:
        _apply_umask(staging, directory=True)
        yield staging
        (staging / MARKER).write_text(f"written by {command}; a re-run of it may replace this folder\n", encoding="utf-8")
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{os.getpid()}"
            os.replace(target, old)
        os.replace(staging, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def rejected_path(path: PathLike) -> Path:
    """Where :func:`set_aside` keeps the damaged lines of ``path``."""
    return Path(os.fspath(_path(path)) + REJECTED_SUFFIX)


def set_aside(path: PathLike, keep: list[str], damaged: list[str]) -> Path | None:
    """Move the ``damaged`` lines of a resumable JSONL file to ``<path>.rejected`` and keep only ``keep``.

    The damaged lines are appended to the ``.rejected`` file (and flushed to disk) before ``path`` is rewritten
    atomically with the ``keep`` lines, so no line is ever lost, even if the process dies in between.

    Args:
        path: The JSONL file.
        keep: Its intact lines, in order.
        damaged: Its damaged lines.

    Returns:
        The ``.rejected`` file, or ``None`` when nothing was damaged.
    """
    rejected = None
    if damaged:
        rejected = rejected_path(path)
        with open(rejected, "a", encoding="utf-8", errors="surrogateescape") as handle:
            for line in damaged:
                handle.write(line if line.endswith("\n") else line + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    with atomic_output(path, "wb") as handle:
        for line in keep:
            handle.write((line if line.endswith("\n") else line + "\n").encode("utf-8", "surrogateescape"))
    return rejected


@dataclass
class JsonlScan:
    """A resumable JSONL output as :func:`scan_jsonl` found it.

    Attributes:
        records: The intact JSON objects, in file order.
        lines: Their lines (with line ends as found).
        numbers: Their line numbers, counting from 1.
        damaged: The damaged lines, in file order.
    """

    records: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)


def scan_jsonl(path: PathLike, *, accept: Callable[[dict[str, Any]], bool] | None = None, what: str = "output file") -> JsonlScan:
    """Read a resumable JSONL output without changing it (the read-only half of :func:`read_jsonl_resumable`).

    Args:
        path: The JSONL file; a missing file reads as empty.
        accept: Also counts a JSON object as damaged when it returns False (e.g. an object without the id a
            resumable run keys its lines by).
        what: How errors name the file (the flag, e.g. ``"--answers-file"``).

    Raises:
        UserError: For a file that is not an output of this kind (:func:`_check_ours`): it is never set aside.
    """
    target = _path(path)
    scan = JsonlScan()
    if not target.is_file():
        return scan
    with target.open(encoding="utf-8", errors="surrogateescape") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict) and (accept is None or accept(record)):
                scan.records.append(record)
                scan.lines.append(line)
                scan.numbers.append(number)
            else:
                scan.damaged.append(line)
    _check_ours(target, scan, what)
    return scan


def _check_ours(path: Path, scan: JsonlScan, what: str) -> None:
    """Refuse to take a file for a damaged output of this kind when nothing in it says it is one.

    A resumable output is damaged only by a write cut short: its lines are whole records and at most pieces of
    one, which start with ``{``. A file without a single accepted record that holds any other line (a video, a
    picture, a text, another command's JSONL) is someone's input, and "recovering" it would move all of it aside.

    Raises:
        UserError: Naming the file and the flag.
    """
    if scan.records or not scan.damaged:
        return
    cut_short = all(line.lstrip().startswith("{") and _parse_object(line) is None for line in scan.damaged)
    if not cut_short:
        shown = scan.damaged[0].strip()[:40].encode("ascii", "backslashreplace").decode()
        raise UserError(
            f"{what} {os.fspath(path)!r} is not an output of this command (none of its lines is one of its records; it "
            f"starts with {shown!r}), so it is left as it is; pass another path, or move that file away"
        )


def _parse_object(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def read_jsonl_resumable(
    path: PathLike, *, what: str = "output file", accept: Callable[[dict[str, Any]], bool] | None = None
) -> tuple[list[dict[str, Any]], Path | None, int]:
    """Read a JSONL output that a run appends to, setting damaged lines aside instead of dropping them.

    A line that is not a JSON object (a write cut off by a kill, a hand edit), or one ``accept`` refuses, moves to
    ``<path>.rejected`` (:func:`set_aside`); every intact line, before and after it, stays.

    Returns:
        ``(records, the .rejected file or None, number of lines set aside)``; ``([], None, 0)`` for a missing file.
    """
    target = _path(path)
    if not target.is_file():
        return [], None, 0
    scan = scan_jsonl(target, accept=accept, what=what)
    rejected = None
    if scan.damaged or (scan.lines and not scan.lines[-1].endswith("\n")):  # a next append must start on a line of its own
        rejected = set_aside(target, scan.lines, scan.damaged)
    return scan.records, rejected, len(scan.damaged)


__all__ = [
    "JsonlScan",
    "MARKER",
    "REJECTED_SUFFIX",
    "atomic_folder",
    "atomic_output",
    "check_output_file",
    "check_output_folder",
    "check_outputs",
    "check_writable_folder",
    "current_umask",
    "disk_errors",
    "guard_outputs",
    "is_ours",
    "read_jsonl_resumable",
    "rejected_path",
    "same_file",
    "scan_jsonl",
    "set_aside",
    "write_json",
    "write_text",
]
