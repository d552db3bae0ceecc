"""The answers file of a loader run: what a run finds in it, and how the run adds to it without losing anything.

* **Opening only reads.** :class:`AnswersFile` scans an existing file (intact answers, damaged lines) and refuses
  two answers with the same identity (:func:`llava.eval.files.answer_identity`, by question id and prompt), naming
  both lines. Nothing is written until :meth:`AnswersFile.begin`, which the loader core calls once the model has
  loaded (or when no model is needed): a run refused for a bad flag, a missing checkpoint or a model that fails to
  load leaves the file and its record as they were.
* **Damaged lines are set aside, never truncated.** On :meth:`~AnswersFile.begin`, lines that are not answer
  objects (a write cut off by a kill, a hand edit) move to ``<answers>.rejected``
  (:func:`llava.outputs.read_jsonl_resumable`); every intact answer stays. A file that holds no answer and is not
  the start of one (a video, a picture, another command's JSONL given as ``--answers-file``) is refused when the
  run opens it, before the model loads, and left as it is.
* **``--overwrite`` replaces old answers only once a new one exists.** The first new answer is written to a
  temporary file that then replaces the old file in one rename; until then the old answers (and their record)
  stay. A run that finishes without any answer (every question skipped) replaces them with an empty file.
* **A full disk is one sentence.** An append that fails (no space, read-only, quota) is undone to the last whole
  answer, and the error says that the answers so far are kept and that the same command resumes.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from llava.eval.files import QUESTION_ID, AnswerIdentity, answer_identity, describe_identity, has_fields
from llava.outputs import atomic_output, read_jsonl_resumable, scan_jsonl
from llava.utils import UserError

logger = logging.getLogger(__name__)

#: Fields every answer line of a loader has (upstream's answers JSONL).
ANSWER_FIELDS = {"question_id": QUESTION_ID, "prompt": str, "text": str}

_DISK_ERRORS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                errno.EROFS: "read-only file system", errno.EACCES: "permission denied"}


def is_answer(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` has the fields of an answer line (:data:`ANSWER_FIELDS`, with their types)."""
    return has_fields(record, ANSWER_FIELDS)


class AnswersFile:
    """An answers JSONL as a loader run finds it, then extends it.

    Args:
        path: The answers file (``~`` expanded); its folder is created on :meth:`begin`.
        overwrite: The run replaces the file: its answers are not read, and stay until the first new one is written.
        accept: Whether a line's object is a record of this file (default :func:`is_answer`); other lines are damaged.
        by_prompt: The identity of a record (:func:`llava.eval.files.answer_identity`): question id and prompt (a
            loader's answers), or question id alone (a judge's reviews).
        what: What the file is, for messages.

    Attributes:
        existing: The intact answers already in the file (empty with ``overwrite``).
        damaged: How many lines are not answers (set aside on :meth:`begin`).
        answered: Identities of the answers in the file, including those this run writes.

    Raises:
        UserError: If two intact answers in the file have the same identity (naming both lines).
    """

    def __init__(self, path: str | os.PathLike[str], *, overwrite: bool = False,
                 accept: Callable[[Mapping[str, Any]], bool] = is_answer, by_prompt: bool = True,
                 what: str = "--answers-file") -> None:
        self.path = Path(os.path.expanduser(os.fspath(path)))
        self.overwrite = overwrite
        self.accept, self.by_prompt, self.what = accept, by_prompt, what
        self.existing: list[dict[str, Any]] = []
        self.damaged = 0
        self.answered: set[AnswerIdentity] = set()
        self.written = 0
        self._begun = False
        self._fd: int | None = None
        self._on_commit: Callable[[], None] | None = None
        if not overwrite:
            scan = scan_jsonl(self.path, accept=accept, what=what)
            self.existing, self.damaged = scan.records, len(scan.damaged)
            lines: dict[AnswerIdentity, int] = {}
            for number, record in zip(scan.numbers, scan.records):
                identity = answer_identity(record, by_prompt=by_prompt)
                if identity in lines:
                    raise UserError(
                        f"{what} {os.fspath(self.path)!r} line {number} repeats the answer on line {lines[identity]} "
                        f"({describe_identity(identity)}); remove one of them, or pass --overwrite to answer again"
                    )
                lines[identity] = number
            self.answered = set(lines)

    def begin(self, on_commit: Callable[[], None] | None = None) -> None:
        """Start writing: set damaged lines aside and open for appending, or (``overwrite``) wait for the first answer.

        Args:
            on_commit: Called once the file holds this run's answers: now when resuming or starting a new file,
                right after the old file is replaced with ``overwrite`` (the loader writes its record there).
        """
        self._on_commit, self._begun = on_commit, True
        if self.overwrite:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _, rejected, count = read_jsonl_resumable(self.path, what=self.what, accept=self.accept)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as error:
            raise UserError(f"cannot write {self.what} {os.fspath(self.path)!r} ({_reason(error)}); nothing was changed") from None
        if count:
            logger.warning("%s %s: %d damaged line(s) set aside in %s; every intact answer is kept", self.what, self.path, count,
                           rejected)
        self._commit()

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one answer line and hand it to the operating system (a later kill cannot lose it).

        Raises:
            UserError: If the disk is full or the file cannot be written; the file keeps every whole answer.
        """
        if not self._begun:
            raise RuntimeError("AnswersFile.write before begin()")
        line = (json.dumps(record) + "\n").encode("utf-8")
        if self._fd is None:
            self._replace_with(line)
        else:
            self._append(line)
        self.written += 1
        self.answered.add(answer_identity(record, by_prompt=self.by_prompt))

    def finish(self) -> None:
        """End the run: with ``overwrite`` and no answer written, the old file is replaced by an empty one."""
        if self._fd is None and self.overwrite and self._begun:
            self._replace_with(b"")
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _replace_with(self, first: bytes) -> None:
        """``overwrite``: the new answers take the old file's place in one rename, then appends follow."""
        with atomic_output(self.path, "wb") as handle:  # a failure leaves the old answers as they were
            handle.write(first)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError as error:
            raise UserError(f"cannot append to {self.what} {os.fspath(self.path)!r} ({_reason(error)})") from None
        self._commit()

    def _append(self, line: bytes) -> None:
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as error:
            try:
                os.ftruncate(self._fd, size)  # undo a partial line; shrinking needs no space
            except OSError:
                pass
            if error.errno not in _DISK_ERRORS:
                raise
            raise UserError(
                f"cannot append to {self.what} {os.fspath(self.path)!r} ({_reason(error)}); the answers written so far "
                "are kept: free some space and run the same command again to resume"
            ) from None

    def _commit(self) -> None:
        if self._on_commit is not None:
            callback, self._on_commit = self._on_commit, None
            callback()

    def __enter__(self) -> "AnswersFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _reason(error: OSError) -> str:
    return _DISK_ERRORS.get(error.errno or 0) or error.strerror or type(error).__name__


__all__ = ["ANSWER_FIELDS", "AnswersFile", "is_answer"]
