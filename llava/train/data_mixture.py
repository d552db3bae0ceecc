"""``--data_path`` beyond one file: LLaVA-NeXT's YAML dataset mixtures and its ``{a,b,c}.json`` file lists.

A YAML mixture (LLaVA-NeXT's format)::

    datasets:
      - json_path: /data/llava_next_fit_mix.json      # .json (a list) or .jsonl; relative paths are read from
        sampling_strategy: "first:50%"                #   the working directory, as LLaVA-NeXT reads them
      - json_path: /data/mavis_math_metagen.json
        sampling_strategy: "random:1000"
      - json_path: /data/ureader_tr_sft.json          # sampling_strategy absent: "all"

Sampling strategies, as NeXT's ``LazySupervisedDataset`` parses them: ``all``; ``first:N``, ``end:N`` and
``random:N`` keep the first, last or N random records; ``N`` is a count or a whole percentage ``P%`` of the file,
rounded up (``ceil(P * len / 100)``). Where NeXT's parser goes quietly wrong this one stops with one sentence:
an unknown strategy or key (NeXT keeps everything), ``first``/``end``/``random`` without a count, a count of 0
(NeXT's ``end:0`` keeps everything) or a percentage over 100. ``random`` draws from a generator seeded by
``--data_seed`` (else ``--seed``) and the entry, so a run and its resumption train on the same records (NeXT's
draw depends on the process's global random state). A count larger than the file keeps the whole file, with a
warning.

``/path/to/{a,b,c}.json`` reads ``/path/to/a.json``, ``b.json`` and ``c.json`` in that order (NeXT's shorthand).
"""

from __future__ import annotations

import logging
import math
import os
import random
import re
from dataclasses import dataclass
from typing import Any

from llava.utils import UserError

logger = logging.getLogger(__name__)

SAMPLING_STRATEGIES = ("all", "first", "end", "random")
MIXTURE_SUFFIXES = (".yaml", ".yml")
#: NeXT's file-list shorthand: ``<prefix>{a,b,c}.json``.
_FILE_LIST = re.compile(r"^(?P<prefix>.*)\{(?P<names>[^{}]*)\}\.json$")
_ENTRY_KEYS = ("json_path", "sampling_strategy")

#: (source file, index of the record in that file) for each record read.
Origin = tuple[str, int]


@dataclass(frozen=True)
class Sampling:
    """One parsed ``sampling_strategy``: ``kind`` in :data:`SAMPLING_STRATEGIES`; ``amount`` a count or percentage."""

    kind: str = "all"
    amount: int | None = None
    percent: bool = False

    def count(self, total: int) -> int:
        """Records kept out of ``total``: the count, or ``ceil(percent x total / 100)`` (NeXT's rounding)."""
        if self.amount is None:
            return total
        wanted = math.ceil(self.amount * total / 100) if self.percent else self.amount
        return min(wanted, total)

    def apply(self, records: list[Any], rng: random.Random) -> list[Any]:
        """The records this strategy keeps, in NeXT's order (``random``: shuffled, then the first N)."""
        count = self.count(len(records))
        if self.kind == "first":
            return records[:count]
        if self.kind == "end":
            return records[len(records) - count:]
        if self.kind == "random":
            shuffled = list(records)
            rng.shuffle(shuffled)
            return shuffled[:count]
        return list(records)


def parse_sampling(text: Any, where: str) -> Sampling:
    """Parse ``all``, ``first:N``, ``end:N``, ``random:N`` (``N`` a count or ``P%``).

    Raises:
        UserError: One sentence naming ``where`` and the accepted forms.
    """
    forms = "'all', 'first:N', 'end:N' or 'random:N' (N a count or a whole percentage such as 50%)"
    if not isinstance(text, str):
        raise UserError(f"{where}: sampling_strategy must be a string, one of {forms}; got {text!r}")
    kind, colon, amount = text.strip().partition(":")
    if kind not in SAMPLING_STRATEGIES:
        raise UserError(f"{where}: unknown sampling_strategy {text!r}; expected {forms}")
    if kind == "all":
        if colon:
            raise UserError(f"{where}: sampling_strategy {text!r}: 'all' takes no count; use 'all' or 'first:N'")
        return Sampling()
    number, percent = amount.strip().removesuffix("%"), amount.strip().endswith("%")
    if not colon or not number.isdigit():
        raise UserError(f"{where}: sampling_strategy {text!r} needs a whole count or percentage; expected {forms}")
    value = int(number)
    if value == 0 or (percent and value > 100):
        raise UserError(f"{where}: sampling_strategy {text!r} must keep between 1 record and 100% of the file")
    return Sampling(kind, value, percent)


def check_data_file(path: str, label: str = "--data_path") -> None:
    """The one check of a training data file, for a plain ``--data_path``, a file list's names and a mixture's
    ``json_path`` entries alike.

    Args:
        path: The file as given.
        label: What names it in messages (``"--data_path"``, ``"mix.yaml: dataset 1: json_path"``).

    Raises:
        UserError: For a folder, or a path that does not exist (a relative one names the working directory).
    """
    if os.path.isdir(path):
        raise UserError(f"{label} {path!r} is a folder, not a JSON file; pass the training file (a JSON list or .jsonl) inside it")
    if not os.path.isfile(path):
        shown = f" (relative paths are read from the working directory, {os.getcwd()!r})" if not os.path.isabs(path) else ""
        raise UserError(f"{label} {path!r} does not exist{shown}")


def file_list(data_path: str) -> list[str] | None:
    """The files of NeXT's ``<prefix>{a,b,c}.json`` shorthand, or ``None`` when ``data_path`` is not one."""
    match = _FILE_LIST.match(data_path)
    if match is None:
        return None
    names = [name.strip() for name in match.group("names").split(",")]
    if not all(names):
        raise UserError(f"--data_path {data_path!r}: the file list between braces has an empty name")
    return [f"{match.group('prefix')}{name}.json" for name in names]


def is_mixture(data_path: str) -> bool:
    return data_path.endswith(MIXTURE_SUFFIXES)


def _read_yaml(path: str) -> Any:
    import yaml

    check_data_file(path)
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"--data_path {path!r} is not valid YAML{at}; expected a 'datasets:' list") from None


def mixture_entries(path: str) -> list[tuple[str, Sampling]]:
    """``(json_path, sampling)`` for each entry of a YAML mixture, checked.

    Raises:
        UserError: For a file that is not a ``datasets`` list of ``{json_path, sampling_strategy}`` entries, or
            an entry whose file is missing or is neither ``.json`` nor ``.jsonl``.
    """
    document = _read_yaml(path)
    datasets = document.get("datasets") if isinstance(document, dict) else None
    if not isinstance(datasets, list) or not datasets:
        raise UserError(f"--data_path {path!r} has no 'datasets:' list; see LLaVA-NeXT's scripts/train/*.yaml for the format")
    entries = []
    for number, entry in enumerate(datasets, start=1):
        where = f"{path}: dataset {number}"
        if not isinstance(entry, dict) or not isinstance(entry.get("json_path"), str):
            raise UserError(f"{where} needs a 'json_path' (a .json or .jsonl file), got {entry!r}")
        unknown = sorted(set(entry) - set(_ENTRY_KEYS))
        if unknown:
            raise UserError(f"{where} has unknown key {unknown[0]!r}; an entry has {' and '.join(_ENTRY_KEYS)}")
        json_path = entry["json_path"]
        if not json_path.endswith((".json", ".jsonl")):
            raise UserError(f"{where}: json_path {json_path!r} must be a .json or .jsonl file")
        check_data_file(json_path, f"{where}: json_path")
        entries.append((json_path, parse_sampling(entry.get("sampling_strategy", "all"), where)))
    return entries


def read_data_path(data_path: str, read_file: Any, *, seed: int = 0) -> tuple[list[Any], list[Origin]]:
    """Every record ``--data_path`` names, with where each came from.

    Args:
        data_path: One JSON/JSONL file, a YAML mixture, or NeXT's ``{a,b}.json`` list.
        read_file: Reads one JSON list or JSONL file (``supervised_data.read_records``).
        seed: Seeds the ``random:N`` draws (with each entry's position and path).

    Returns:
        ``(records, origins)``, one origin per record.
    """
    if is_mixture(data_path):
        sources = mixture_entries(data_path)
    else:
        files = file_list(data_path)
        sources = [(path, Sampling()) for path in files] if files is not None else [(data_path, Sampling())]
    records: list[Any] = []
    origins: list[Origin] = []
    for number, (path, sampling) in enumerate(sources):
        found = list(read_file(path))
        indexed = list(enumerate(found))
        if sampling.amount is not None and not sampling.percent and sampling.amount > len(found):
            logger.warning("%s: %s asks for %d records, the file has %d; keeping all of them",
                           data_path, path, sampling.amount, len(found))
        kept = sampling.apply(indexed, random.Random(f"{seed}:{number}:{path}"))
        records.extend(record for _, record in kept)
        origins.extend((path, index) for index, _ in kept)
        if len(sources) > 1:
            logger.info("%s: %d of %d records from %s (%s)", data_path, len(kept), len(found), path,
                        sampling.kind + (f":{sampling.amount}{'%' if sampling.percent else ''}" if sampling.amount else ""))
    return records, origins


def source_files(data_path: str) -> list[str]:
    """The data files ``--data_path`` reads (itself for a plain file), for the resume record."""
    if is_mixture(data_path):
        return [data_path] + [path for path, _ in mixture_entries(data_path)]
    return file_list(data_path) or [data_path]


__all__ = [
    "SAMPLING_STRATEGIES",
    "Sampling",
    "check_data_file",
    "file_list",
    "is_mixture",
    "mixture_entries",
    "parse_sampling",
    "read_data_path",
    "source_files",
]
