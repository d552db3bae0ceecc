"""What produced an answers file, kept next to it, so that a resumed run never mixes answers of two setups.

An answers file ``A.jsonl`` gets a sidecar ``A.jsonl.meta.json``::

    {"format": 1,
     "producer": {"model": {"path": ..., "fingerprint": ...}, "model_base": ..., "model_id": ...,
                  "conv_mode": ..., "temperature": ..., "top_p": ..., "num_beams": ..., "max_new_tokens": ...,
                  <the loader's own prompt flags, e.g. "single_pred_prompt", "lang", "all_rounds">},
     "skipped": {"<question id>": "why"}}

The model fingerprint is cheap: a hash of ``config.json`` and of the name, size and modification time of every
weight file in the checkpoint folder (a re-trained or re-saved checkpoint changes it; a model given as a hub
id is recorded by name only). ``skipped`` lists the questions ``--skip-missing`` left out (missing, unreadable
or decompression-bomb images), with the reason, so a resumed run reports them instead of failing on them.

The upstream answers JSONL itself is unchanged: every converter and scorer reads it as before.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llava.eval.files import write_json
from llava.utils import UserError

SIDECAR_SUFFIX = ".meta.json"
FORMAT = 1

#: Flags that do not change the answers (where they are written, which chunk, how fast, which device).
NEUTRAL_FLAGS = frozenset({
    "answers_file", "question_file", "image_folder", "num_chunks", "chunk_idx", "batch_size", "skip_missing",
    "device", "overwrite", "model_path", "model_base",
})

# Files whose identity stands for the weights (their content is not read: a checkpoint can be many GB).
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".index.json", ".model")


def sidecar_path(answers_file: str | os.PathLike[str]) -> Path:
    return Path(os.fspath(answers_file) + SIDECAR_SUFFIX)


def model_fingerprint(model_path: str | None) -> dict[str, Any] | None:
    """``{"path", "fingerprint"}`` of a checkpoint folder, ``{"path"}`` for a hub id, None when not given."""
    if not model_path:
        return None
    folder = Path(os.path.expanduser(model_path))
    if not folder.is_dir():
        return {"path": model_path}
    digest = hashlib.sha256()
    config = folder / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and entry.name.endswith(_WEIGHT_SUFFIXES):
            stat = entry.stat()
            digest.update(f"{entry.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return {"path": os.path.realpath(folder), "fingerprint": digest.hexdigest()[:16]}


def producer_record(args: Any, model_id: str) -> dict[str, Any]:
    """The settings of a loader run that determine its answers (everything but :data:`NEUTRAL_FLAGS`)."""
    settings = {key: value for key, value in sorted(vars(args).items()) if key not in NEUTRAL_FLAGS}
    return {
        "model": model_fingerprint(getattr(args, "model_path", None)),
        "model_base": model_fingerprint(getattr(args, "model_base", None)),
        "model_id": model_id,
        **settings,
    }


def _jsonable(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists), so records compare equal after a round trip."""
    return json.loads(json.dumps(value, default=str))


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [f"{key} {old.get(key)!r} -> {new.get(key)!r}" for key in keys if old.get(key) != new.get(key)]


class Provenance:
    """The sidecar of one answers file: checked on resume, written when a file starts, updated on skips.

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

    def start(self) -> None:
        """A new (or overwritten) answers file: record the producer, forget earlier skips."""
        self.skipped = {}
        self._save()

    def resume(self, has_answers: bool) -> None:
        """Check that the existing answers were produced by the same settings.

        Raises:
            UserError: If they were not, or if the file holds answers but no record of their producer.
        """
        if not self.path.is_file():
            if has_answers:
                raise UserError(
                    f"{self.what} file {self.answers_file!r} holds {self.what} but no record of the model and settings "
                    f"that produced them ({self.path.name}); pass --overwrite to start again, or choose another "
                    f"{self.output_flag}"
                )
            self.start()
            return
        try:
            saved = json.loads(self.path.read_text(encoding="utf-8"))
            old, skipped = saved["producer"], saved.get("skipped", {})
        except (ValueError, KeyError, TypeError):
            raise UserError(
                f"{os.fspath(self.path)!r} is not a readable answers record; pass --overwrite to answer again"
            ) from None
        changes = _differences(old, self.producer)
        if changes:
            raise UserError(
                f"{self.what} file {self.answers_file!r} was produced with other settings ({'; '.join(changes)}); "
                f"pass --overwrite to start again with the new ones, or choose another {self.output_flag}"
            )
        self.skipped = dict(skipped)

    def open(self, *, overwrite: bool, has_answers: bool) -> "Provenance":
        """:meth:`start` when the run overwrites its output, else :meth:`resume`; returns ``self``."""
        if overwrite:
            self.start()
        else:
            self.resume(has_answers=has_answers)
        return self

    def record_skip(self, question_id: Any, reason: str) -> None:
        self.skipped[json.dumps(question_id)] = reason
        self._save()

    def clear_skip(self, question_id: Any) -> None:
        if self.skipped.pop(json.dumps(question_id), None) is not None:
            self._save()

    def _save(self) -> None:
        write_json(self.path, {"format": FORMAT, "producer": self.producer, "skipped": self.skipped})


__all__ = ["NEUTRAL_FLAGS", "Provenance", "model_fingerprint", "producer_record", "sidecar_path"]
