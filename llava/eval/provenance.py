"""What produced an answers file, kept next to it, so that a resumed run never mixes answers of two setups.

An answers file ``A.jsonl`` gets a sidecar ``A.jsonl.meta.json``::

    {"format": 1,
     "producer": {"model": {"path", "fingerprint", "vision_tower": {"path", "fingerprint"} | {"name"}},
                  "model_base": {"path", "fingerprint"} | null, "model_id": ...,
                  "questions": <hash of this chunk's question records>, "projector_settings": {key: value},
                  "conv_mode": ..., "temperature": ..., "top_p": ..., "num_beams": ..., "max_new_tokens": ...,
                  <the loader's own prompt flags, e.g. "single_pred_prompt", "lang", "all_rounds">},
     "skipped": {"<question id>": "why"}}

The model fingerprint (:func:`folder_fingerprint`) covers every file the loader reads from the checkpoint folder,
from the vision tower folder its ``config.json`` names (``mm_vision_tower``) and from ``--model-base``: the
top-level configs, tokenizer files and weights (``.json``, ``.safetensors``, ``.bin``, ``.pt``, ``.pth``, ``.model``,
``.txt``, ``.jinja``, ``.tiktoken``; not the ``*.meta.json`` sidecars of answers kept there). Files up to 1 MiB
(configs, tokenizers) are hashed by content. Larger ones (weights, many GB) are not read whole: their name, size,
modification time (ns) and inode, and the content of their first and last 64 KiB stand for them, so a re-trained or
re-saved checkpoint, a file replaced by ``mv`` (new inode) or copied over (new time) all change it, while hashing
stays a few milliseconds per file. A model or tower given as a hub id is recorded by name only. ``questions`` is a
hash of the question records this chunk answers (their content, not the file's name or path). ``--image-folder``
is not recorded: images are identified by the names the question records give them.

``skipped`` lists the questions ``--skip-missing`` left out (missing, unreadable or decompression-bomb images), with
the reason, so a resumed run reports them instead of failing on them.

The upstream answers JSONL itself is unchanged: every converter and scorer reads it as before.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llava.eval.files import guard_outputs, write_json
from llava.utils import UserError

SIDECAR_SUFFIX = ".meta.json"
FORMAT = 1

#: Flags that do not change the answers (where they are written, which chunk, how fast, which device); the model
#: paths are recorded through their fingerprints and the question file through the hash of its records.
NEUTRAL_FLAGS = frozenset({
    "answers_file", "question_file", "image_folder", "num_chunks", "chunk_idx", "batch_size", "skip_missing",
    "device", "fast", "overwrite", "model_path", "model_base",
})

#: Files up to this size are fingerprinted by their whole content.
SMALL_FILE_BYTES = 1 << 20
#: How much of the start and of the end of a larger file is read into its fingerprint.
EDGE_BYTES = 64 << 10

# What a checkpoint or tower folder holds that the loader reads: configs, tokenizer files, weights.
_MODEL_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".json", ".model", ".txt", ".jinja", ".tiktoken")


def sidecar_path(answers_file: str | os.PathLike[str]) -> Path:
    return Path(os.fspath(answers_file) + SIDECAR_SUFFIX)


def read_record(answers_file: str | os.PathLike[str]) -> tuple[dict[str, Any], Any] | None:
    """``(producer, skipped)`` of an answers file's record as saved, or ``None`` when the file has no record.

    Raises:
        ValueError: If the record cannot be read, does not parse, or has no ``producer`` object.
    """
    path = sidecar_path(answers_file)
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        producer, skipped = saved["producer"], saved.get("skipped", {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"{os.fspath(path)!r} is not a readable answers record") from None
    if not isinstance(producer, dict):
        raise ValueError(f"{os.fspath(path)!r} is not a readable answers record")
    return producer, skipped


def model_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The files of a checkpoint or tower folder that :func:`folder_fingerprint` covers, sorted by name."""
    return sorted(
        entry for entry in Path(folder).iterdir()
        if entry.is_file() and entry.name.endswith(_MODEL_FILE_SUFFIXES) and not entry.name.endswith(SIDECAR_SUFFIX)
    )


def _file_fingerprint(path: Path) -> bytes:
    """Whole content up to :data:`SMALL_FILE_BYTES`; else size, mtime_ns, inode and both ends of the content."""
    stat = path.stat()
    if stat.st_size <= SMALL_FILE_BYTES:
        return b"content\0" + hashlib.sha256(path.read_bytes()).digest()
    digest = hashlib.sha256(f"{stat.st_size}\0{stat.st_mtime_ns}\0{stat.st_ino}\0".encode())
    with path.open("rb") as handle:
        digest.update(handle.read(EDGE_BYTES))
        handle.seek(-EDGE_BYTES, os.SEEK_END)
        digest.update(handle.read(EDGE_BYTES))
    return b"identity\0" + digest.digest()


def folder_fingerprint(folder: str | os.PathLike[str]) -> str:
    """A short hash of every file :func:`model_files` lists (see the module docstring for what it covers)."""
    digest = hashlib.sha256()
    for path in model_files(folder):
        digest.update(path.name.encode("utf-8", "surrogateescape") + b"\0" + _file_fingerprint(path) + b"\n")
    return digest.hexdigest()[:16]


def _tower_name(folder: Path) -> str | None:
    """The vision tower a checkpoint's ``config.json`` names (``mm_vision_tower``, else ``vision_tower``)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no readable config: loading will name the problem
    if not isinstance(config, dict):
        return None
    name = config.get("mm_vision_tower") or config.get("vision_tower")
    return name if isinstance(name, str) and name else None


def _location(name: str) -> dict[str, Any]:
    """``{"path", "fingerprint"}`` of a local folder, ``{"name"}`` of anything else (a hub id)."""
    folder = Path(os.path.expanduser(name))
    if folder.is_dir():
        return {"path": os.path.realpath(folder), "fingerprint": folder_fingerprint(folder)}
    return {"name": name}


def model_fingerprint(model_path: str | None) -> dict[str, Any] | None:
    """``{"path", "fingerprint", "vision_tower"?}`` of a checkpoint folder, ``{"path"}`` for a hub id, None when not
    given. The tower entry is the folder (or hub name) the checkpoint's ``config.json`` names."""
    if not model_path:
        return None
    folder = Path(os.path.expanduser(model_path))
    if not folder.is_dir():
        return {"path": model_path}
    record: dict[str, Any] = {"path": os.path.realpath(folder), "fingerprint": folder_fingerprint(folder)}
    tower = _tower_name(folder)
    if tower is not None:
        from llava.model.multimodal_encoder.location import resolve_tower_path

        # The folder the loader reads: the working directory's, else the one beside the checkpoint.
        record["vision_tower"] = _location(resolve_tower_path(tower, folder))
    return record


def file_digest(path: str | os.PathLike[str]) -> str:
    """A short hash of a file's bytes (what a judge's reviews or grades depend on)."""
    return hashlib.sha256(Path(os.path.expanduser(os.fspath(path))).read_bytes()).hexdigest()[:16]


def records_fingerprint(records: Sequence[Mapping[str, Any]]) -> str:
    """A hash of question records' content (key order and the file's name do not matter)."""
    text = json.dumps(list(records), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def producer_record(args: Any, model_id: str, *, questions: str | None = None) -> dict[str, Any]:
    """The settings of a loader run that determine its answers (everything but :data:`NEUTRAL_FLAGS`).

    Args:
        args: The parsed flags (runtime projector settings already normalised into ``projector_settings``).
        model_id: Written as ``model_id``.
        questions: :func:`records_fingerprint` of the chunk's question records.
    """
    settings = {key: value for key, value in sorted(vars(args).items()) if key not in NEUTRAL_FLAGS}
    record = {
        "model": model_fingerprint(getattr(args, "model_path", None)),
        "model_base": model_fingerprint(getattr(args, "model_base", None)),
        "model_id": model_id,
        **settings,
    }
    if questions is not None:
        record["questions"] = questions
    return record


def _jsonable(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists), so records compare equal after a round trip."""
    return json.loads(json.dumps(value, default=str))


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [f"{key} {old.get(key)!r} -> {new.get(key)!r}" for key in keys if old.get(key) != new.get(key)]


class Provenance:
    """The sidecar of one answers file: checked on resume, written when a file starts, updated on skips.

    A loader checks first (:meth:`check`, read-only) and commits (:meth:`commit`) only once its model has loaded
    and its first answer is due, so a run refused before that leaves no record behind. Until then, skips are kept
    in memory.

    Args:
        answers_file: The answers JSONL.
        producer: What produces the answers now (see :func:`producer_record`).
        output_flag: The flag that names ``answers_file``, for the messages.
        what: What the file holds, for the messages.
    """

    def __init__(self, answers_file: str | os.PathLike[str], producer: Mapping[str, Any], *, output_flag: str = "--answers-file",
                 what: str = "answers") -> None:
        self.output_flag, self.what = output_flag, what
        self.path = sidecar_path(answers_file)
        self.answers_file = os.fspath(answers_file)
        self.producer = _jsonable(dict(producer))
        self.skipped: dict[str, str] = {}
        self.committed = False

    def check(self, has_answers: bool) -> None:
        """Check, without writing, that existing answers were produced by the same settings; keep their skips.

        A file without answers has nothing to mix: a record left next to it (by a run that stopped before its
        first answer) is replaced on :meth:`commit`.

        Raises:
            UserError: If the answers were produced by other settings, or the file holds answers but no record.
        """
        self.skipped = {}
        if not has_answers:
            return
        if not self.path.is_file():
            raise UserError(
                f"{self.what} file {self.answers_file!r} holds {self.what} but no record of the model and settings "
                f"that produced them ({self.path.name}); pass --overwrite to start again, or choose another "
                f"{self.output_flag}"
            )
        try:
            old, skipped = read_record(self.answers_file)
        except ValueError as exc:
            raise UserError(f"{exc}; pass --overwrite to answer again") from None
        changes = _differences(old, self.producer)
        if changes:
            raise UserError(
                f"{self.what} file {self.answers_file!r} was produced with other settings ({'; '.join(changes)}); "
                f"pass --overwrite to start again with the new ones, or choose another {self.output_flag}"
            )
        self.skipped = dict(skipped) if isinstance(skipped, dict) else {}

    def commit(self) -> None:
        """Write the record (the producer and the skips so far); later skips are saved as they happen."""
        self.committed = True
        self._save()

    def start(self) -> None:
        """A new (or overwritten) answers file: record the producer, forget earlier skips."""
        self.skipped = {}
        self.commit()

    def resume(self, has_answers: bool) -> None:
        """:meth:`check`, then record the producer when the file holds no answers yet.

        Raises:
            UserError: See :meth:`check`.
        """
        self.check(has_answers)
        if has_answers:
            self.committed = True
        else:
            self.start()

    def open(self, *, overwrite: bool, has_answers: bool) -> "Provenance":
        """:meth:`start` when the run overwrites its output, else :meth:`resume`; returns ``self``."""
        if overwrite:
            self.start()
        else:
            self.resume(has_answers=has_answers)
        return self

    def record_skip(self, question_id: Any, reason: str) -> None:
        self.skipped[json.dumps(question_id)] = reason
        if self.committed:
            self._save()

    def clear_skip(self, question_id: Any) -> None:
        if self.skipped.pop(json.dumps(question_id), None) is not None and self.committed:
            self._save()

    def _save(self) -> None:
        write_json(self.path, {"format": FORMAT, "producer": self.producer, "skipped": self.skipped})


def _holds_answers(answers: str | os.PathLike[str]) -> bool:
    try:
        with open(answers, "rb") as handle:
            return any(line.strip() for line in handle)
    except FileNotFoundError:
        return False


def merge_records(merged: str | os.PathLike[str], chunks: Sequence[str | os.PathLike[str]]) -> Path:
    """Write the record of ``merged``, the concatenation of the answers files ``chunks`` (one per chunk of a run).

    The chunks' producers must agree on everything but the questions they answered; the merged record keeps the
    common producer with ``questions`` as the list of the chunks' question hashes, and every chunk's skips. A chunk
    without answers and without a record (more devices than questions) is left out.

    Raises:
        UserError: If a chunk has no readable record, or two chunks were produced by different settings.
    """
    if not chunks:
        raise UserError("give the chunk answers files whose records to merge")
    producers, skipped = [], {}
    chunks = [chunk for chunk in chunks if sidecar_path(chunk).is_file() or _holds_answers(chunk)]  # empty chunks made none
    if not chunks:
        raise UserError("none of the chunk answers files holds answers; run the loaders first")
    for chunk in chunks:
        try:
            producer, chunk_skipped = read_record(chunk)
            skipped.update(chunk_skipped or {})
        except (ValueError, TypeError):  # no record (None does not unpack), a broken one, or skips that are no mapping
            raise UserError(f"chunk answers {os.fspath(chunk)!r} have no readable record {sidecar_path(chunk).name}; "
                            "answer that chunk again with the loader") from None
        producers.append(dict(producer))
    hashes = [producer.pop("questions", None) for producer in producers]
    for chunk, producer in zip(chunks[1:], producers[1:]):
        changes = _differences(producers[0], producer)
        if changes:
            raise UserError(f"chunk answers {os.fspath(chunks[0])!r} and {os.fspath(chunk)!r} were produced with other "
                            f"settings ({'; '.join(changes)}); answer the chunks again with one setting")
    target = sidecar_path(merged)
    write_json(target, {"format": FORMAT, "producer": {**producers[0], "questions": hashes}, "skipped": skipped})
    return target


def main(argv: Sequence[str] | None = None) -> Path:
    """``python -m llava.eval.provenance MERGED CHUNK...``: the record of answers merged from chunks."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m llava.eval.provenance",
                                     description="write the record (.meta.json) of an answers file merged from chunks")
    parser.add_argument("merged", help="the merged answers file (its record is written next to it)")
    parser.add_argument("chunks", nargs="+", help="the chunk answers files, each with its record")
    args = parser.parse_args(argv)
    if any(os.path.abspath(chunk) == os.path.abspath(args.merged) for chunk in args.chunks):
        raise UserError(f"the merged answers {args.merged!r} is also given as a chunk; name the merged file first")
    guard_outputs(inputs={f"chunk {chunk}": sidecar_path(chunk) for chunk in args.chunks},
                  files={"the merged record": sidecar_path(args.merged)})
    return merge_records(args.merged, args.chunks)


if __name__ == "__main__":
    from llava.utils import cli_main

    raise SystemExit(cli_main(main))


__all__ = [
    "NEUTRAL_FLAGS", "Provenance", "file_digest", "folder_fingerprint", "merge_records", "read_record", "model_files", "model_fingerprint", "producer_record",
    "records_fingerprint", "sidecar_path",
]
