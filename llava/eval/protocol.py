"""The one recipe per benchmark under which rows of a comparison are comparable, and what a run was measured under.

A score is only comparable with another when both answers were produced the same way: the same conversation
template and prompt flags, greedy decoding with the same answer length, and the same split of the benchmark's
score. The recipe pinned here is the one ``scripts/v1_5/eval/*.sh`` run (upstream LLaVA-1.5's)::

    every benchmark   greedy decoding (temperature 0, one beam); conv mode and max new tokens as the reference row's
    sqa               --single-pred-prompt
    mmbench           --single-pred-prompt, --lang en, one round
    mmbench_cn        --single-pred-prompt, --lang cn, one round
    mme               the score is perception + cognition (the paper's MME All)

What a run was measured under comes from its answers' record (``<answers>.meta.json``, :mod:`llava.eval.provenance`):
the scorers copy it into their score file as ``"protocol"`` (:func:`answers_protocol`), split into the prompt
(``conv_mode`` and the loader's prompt flags), the decoding settings, and the method (``projector_type``,
``projector_settings``, ``reducer``). :func:`differences` lists where a benchmark's protocol departs from the recipe
or from the reference row's; :mod:`llava.eval.compare` labels (or, with ``--strict-protocol``, refuses) such a row.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llava.eval.provenance import read_record
from llava.utils import UserError

#: Loader flags that shape the prompt the model sees.
PROMPT_KEYS = ("conv_mode", "single_pred_prompt", "all_rounds", "lang")
#: Loader flags that shape how an answer is decoded.
DECODING_KEYS = ("temperature", "top_p", "num_beams", "max_new_tokens")
#: Loader flags that choose the compression method run on the checkpoint.
METHOD_KEYS = ("projector_type", "projector_settings", "reducer")
#: Prompt and decoding settings that must equal the reference row's, benchmark by benchmark.
RELATIVE_KEYS = ("conv_mode", "max_new_tokens")
#: How far an MME total may sit from perception + cognition (the scorers round nothing; this allows float noise).
MME_TOLERANCE = 0.01


@dataclass(frozen=True)
class Recipe:
    """The pinned recipe of one benchmark: prompt flags that must hold, and the score's split (MME)."""

    prompt: Mapping[str, Any] = field(default_factory=dict)
    split: str | None = None


GREEDY: Mapping[str, Any] = {"temperature": 0.0, "num_beams": 1}
RECIPES: dict[str, Recipe] = {
    "sqa": Recipe(prompt={"single_pred_prompt": True}),
    "mmbench": Recipe(prompt={"single_pred_prompt": True, "lang": "en", "all_rounds": False}),
    "mmbench_cn": Recipe(prompt={"single_pred_prompt": True, "lang": "cn", "all_rounds": False}),
    "mme": Recipe(split="perception + cognition"),
}


def recipe_text(benchmarks: Sequence[str] | None = None) -> str:
    """The pinned recipe in one sentence, for a comparison's notes (only ``benchmarks``' own flags when given)."""
    shown = [key for key in RECIPES if benchmarks is None or key in benchmarks]
    flags = "".join(
        f"; {key}: " + ", ".join(f"{name}={value}" for name, value in RECIPES[key].prompt.items())
        for key in shown if RECIPES[key].prompt
    )
    split = "; MME scored as perception + cognition" if "mme" in shown else ""
    return f"greedy decoding (temperature 0, one beam) with the reference row's conv mode and max new tokens{flags}{split}"


# -- what a run was measured under ----------------------------------------------------------------------
def _producer(answers: Path) -> dict[str, Any] | None:
    """The ``producer`` of an answers file's record, or ``None`` when it has none (answers from elsewhere)."""
    try:
        record = read_record(answers)
    except ValueError as exc:
        raise UserError(f"{exc}; answer again with --overwrite") from None
    return None if record is None else record[0]


def protocol_of(producer: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A producer record split into ``{"prompt", "decoding", "method"}`` (keys the loader did not record are left out)."""
    def pick(keys: Sequence[str]) -> dict[str, Any]:
        return {key: producer[key] for key in keys if key in producer}

    return {"prompt": pick(PROMPT_KEYS), "decoding": pick(DECODING_KEYS), "method": pick(METHOD_KEYS)}


def answers_protocol(answers: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None) -> dict[str, Any] | None:
    """The protocol the answers in ``answers`` (one file or several chunks) were produced under, or ``None``.

    ``None`` when no file is given or a file has no record (produced by upstream LLaVA or by hand).

    Raises:
        UserError: If the files were produced under different protocols, or a record does not parse.
    """
    if answers is None:
        return None
    files = [Path(answers)] if isinstance(answers, (str, os.PathLike)) else [Path(path) for path in answers]
    protocols = []
    for path in files:
        producer = _producer(path)
        if producer is None:
            return None
        protocols.append(protocol_of(producer))
    for path, protocol in zip(files[1:], protocols[1:]):
        if protocol != protocols[0]:
            raise UserError(f"answers {os.fspath(files[0])!r} and {os.fspath(path)!r} were produced under different settings "
                            f"({protocols[0]} vs {protocol}); answer them again with one setting")
    return protocols[0] if protocols else None


# -- checking a run against the recipe -------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(float(a), float(b), abs_tol=1e-9)
    return a == b


def recipe_differences(benchmark: str, protocol: Mapping[str, Any]) -> list[str]:
    """Where ``protocol`` (of ``benchmark``'s answers) departs from the pinned recipe, in words."""
    prompt, decoding = protocol.get("prompt", {}), protocol.get("decoding", {})
    out = [f"{key}={decoding.get(key)!r} (pinned {value!r})" for key, value in GREEDY.items()
           if key in decoding and not _same(decoding[key], value)]
    recipe = RECIPES.get(benchmark, Recipe())
    out += [f"{key}={prompt.get(key)!r} (pinned {value!r})" for key, value in recipe.prompt.items()
            if not _same(prompt.get(key, False if isinstance(value, bool) else None), value)]
    return out


def relative_differences(protocol: Mapping[str, Any], reference: Mapping[str, Any]) -> list[str]:
    """Where ``protocol`` departs from the reference row's protocol of the same benchmark (conv mode, answer length)."""
    def flat(record: Mapping[str, Any]) -> dict[str, Any]:
        return {**record.get("prompt", {}), **record.get("decoding", {})}

    mine, theirs = flat(protocol), flat(reference)
    return [f"{key}={mine.get(key)!r} (reference {theirs.get(key)!r})" for key in RELATIVE_KEYS
            if key in mine and key in theirs and not _same(mine[key], theirs[key])]


def mme_split(record: Mapping[str, Any] | None) -> dict[str, float] | None:
    """``{"perception", "cognition", "total"}`` of an MME score record, or ``None`` when it does not say."""
    if not isinstance(record, Mapping):
        return None
    values = {key: record.get(key) for key in ("perception", "cognition")}
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in values.values()):
        return None
    return {"perception": float(values["perception"]), "cognition": float(values["cognition"]), "total": float(record["score"])}


def split_differences(split: Mapping[str, float] | None) -> list[str]:
    """How an MME score departs from the pinned split (perception + cognition); nothing when it cannot be told."""
    if split is None:
        return []
    whole = split["perception"] + split["cognition"]
    if math.isclose(split["total"], whole, abs_tol=MME_TOLERANCE):
        return []
    if math.isclose(split["total"], split["perception"], abs_tol=MME_TOLERANCE):
        return ["MME score is perception only (pinned perception + cognition)"]
    return [f"MME score {split['total']:.1f} is not perception + cognition ({whole:.1f})"]


def row_differences(protocols: Mapping[str, Mapping[str, Any] | None], mme: Mapping[str, float] | None,
                    reference: Mapping[str, Mapping[str, Any] | None] | None = None) -> list[str]:
    """Every departure of one row from the pinned recipe (and from the reference row's protocol), benchmark by
    benchmark, as ``"<benchmark>: <what>"``. Benchmarks whose protocol was not recorded have none."""
    out: list[str] = []
    for benchmark, protocol in protocols.items():
        if protocol is None:
            continue
        found = recipe_differences(benchmark, protocol)
        theirs = (reference or {}).get(benchmark)
        if theirs is not None:
            found += relative_differences(protocol, theirs)
        out += [f"{benchmark}: {text}" for text in found]
    return out + [f"mme: {text}" for text in split_differences(mme)]


def method_of(protocols: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """The method (``projector_type``, ``reducer``) a row's recorded answers were produced with, the same on every
    benchmark.

    Raises:
        UserError: If two benchmarks' answers were produced with different methods.
    """
    methods = {benchmark: {key: protocol.get("method", {}).get(key) for key in ("projector_type", "reducer")}
               for benchmark, protocol in protocols.items() if protocol is not None}
    distinct = {json.dumps(method, sort_keys=True) for method in methods.values()}
    if len(distinct) > 1:
        listed = "; ".join(f"{benchmark} {method}" for benchmark, method in methods.items())
        raise UserError(f"the answers of one run were produced with different methods ({listed}); answer every benchmark "
                        "with one --projector-type/--reducer, or give them as separate runs")
    return next(iter(methods.values()), {})


def prompt_cell(protocols: Mapping[str, Mapping[str, Any] | None]) -> str:
    """A row's prompt format in a few words: its conv mode(s) and decoding, and the benchmarks not recorded."""
    known = {b: p for b, p in protocols.items() if p is not None}
    if not known:
        return "not recorded"
    modes = sorted({str(p.get("prompt", {}).get("conv_mode")) for p in known.values()})
    greedy = all(not recipe_differences("", {"decoding": p.get("decoding", {})}) for p in known.values())
    cell = f"{'/'.join(modes)}, {'greedy' if greedy else 'sampled'}"
    missing = [b for b, p in protocols.items() if p is None]
    return cell + (f" ({', '.join(missing)} not recorded)" if missing else "")


__all__ = [
    "DECODING_KEYS", "GREEDY", "METHOD_KEYS", "PROMPT_KEYS", "RECIPES", "Recipe", "answers_protocol", "method_of", "mme_split",
    "prompt_cell", "protocol_of", "recipe_differences", "recipe_text", "relative_differences", "row_differences",
    "split_differences",
]
