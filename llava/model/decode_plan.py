"""Which ``generate`` calls the fast path runs, and with what: greedy or sampled decoding, a streamer, stop checks.

:func:`decode_plan` reads a ``generate(**options)`` call against the model's ``generation_config`` (as
:func:`llava.model.greedy.greedy_plan` does for the eager loop) and returns a :class:`DecodePlan`, or the reason
the call needs transformers' ``generate`` (beam search, a repetition penalty, a logits processor, ...), which the
caller logs once. Sampling follows transformers' warpers in transformers' order (temperature, top-k, top-p) with
transformers' defaults for unset values (temperature 1, top-k 50, top-p 1); a streamer and stopping criteria
are honoured on the host, between captured steps (:mod:`llava.model.fast_decode`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .greedy import _INERT, _is_count, _is_plain, _token_ids

#: transformers' values for sampling settings a call and the model's generation config leave unset.
SAMPLING_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0}

#: Sampling settings the fast path applies itself (the rest must be off: see :data:`_SAMPLING_OFF`).
_SAMPLING = frozenset({"do_sample", "temperature", "top_k", "top_p"})
#: Other warpers, with the values at which transformers leaves them out.
_SAMPLING_OFF: dict[str, tuple[Any, ...]] = {
    "min_p": (None,), "top_h": (None,), "typical_p": (None, 1.0), "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0),
}
#: Options of a call that are objects, not generation settings, and that the fast path honours.
_HOOKS = ("streamer", "stopping_criteria")


@dataclass(frozen=True)
class DecodePlan:
    """A ``generate`` call as the fast path runs it.

    Attributes:
        max_new_tokens: Token budget.
        eos_token_ids: Ids that finish a row.
        pad_token_id: What a finished row gets from then on (``None`` when there is no EOS id either).
        min_new_tokens: The EOS ids cannot be chosen before this many new tokens.
        sample: Sample (with ``temperature``, ``top_k``, ``top_p``; left at 1, 0, 1 for greedy decoding) instead of
            taking the argmax.
        streamer: transformers' streamer protocol (``put``/``end``), fed one token at a time, or ``None``.
        stopping_criteria: Callables ``(new_ids [B, t], scores) -> bool [B]`` checked after every token.
    """

    max_new_tokens: int
    eos_token_ids: tuple[int, ...]
    pad_token_id: int | None
    min_new_tokens: int = 0
    sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    streamer: Any = None
    stopping_criteria: Sequence[Any] = ()

    @property
    def watches(self) -> bool:
        """Whether the host reads every token (a streamer or stop checks), not only whether all rows finished."""
        return self.streamer is not None or bool(self.stopping_criteria)


def decode_plan(generation_config: Any, options: Mapping[str, Any]) -> tuple[DecodePlan | None, str | None]:
    """``(plan, None)`` for a call the fast path runs, else ``(None, why not)``.

    Args:
        generation_config: The model's ``GenerationConfig`` (defaults for ``options``).
        options: The call's generation keyword arguments (``attention_mask``, ``position_ids`` already taken out).
    """
    fields = vars(generation_config)
    unknown = sorted(key for key in options if key not in fields and key not in _HOOKS)
    if unknown:
        return None, f"generate option {unknown[0]!r}"
    settings = {**fields, **{key: value for key, value in options.items() if key not in _HOOKS}}
    if settings.get("num_beams") not in (None, 1):
        return None, f"beam search (num_beams={settings['num_beams']!r})"
    sample = settings.get("do_sample") is True
    why = _sampling_refusal(settings) if sample else None
    if why is not None:
        return None, why
    rest = {key: value for key, value in settings.items() if key not in _SAMPLING and key not in _SAMPLING_OFF}
    if not _is_plain(rest) or settings.get("cache_implementation") is not None:
        return None, f"a generation setting beyond {'sampling' if sample else 'greedy decoding'} ({_first_active(rest)})"
    budget, floor = settings.get("max_new_tokens"), settings.get("min_new_tokens") or 0
    if not _is_count(budget) or budget < 1 or not _is_count(floor):
        return None, "no max_new_tokens"
    eos, pad = _token_ids(settings.get("eos_token_id")), settings.get("pad_token_id")
    if eos is None or (pad is not None and _token_ids(pad) != (pad,)):
        return None, "eos_token_id or pad_token_id that is not a token id or a list of them"
    if pad is None and eos:
        pad = eos[0]  # transformers' fallback: finished rows are filled with the first EOS id
    criteria = options.get("stopping_criteria") or ()
    warpers = {key: _or_default(settings, key) for key in ("temperature", "top_k", "top_p")} if sample else {}
    return DecodePlan(
        max_new_tokens=budget, eos_token_ids=eos, pad_token_id=pad, min_new_tokens=floor, sample=sample, **warpers,
        streamer=options.get("streamer"), stopping_criteria=tuple(criteria),
    ), None


def _or_default(settings: Mapping[str, Any], key: str) -> Any:
    value = settings.get(key)
    return SAMPLING_DEFAULTS[key] if value is None else value


def _sampling_refusal(settings: Mapping[str, Any]) -> str | None:
    """Why a sampling call is not one the fast path samples like transformers, or ``None``."""
    for key, off in _SAMPLING_OFF.items():
        if settings.get(key) not in off:
            return f"sampling with {key}={settings[key]!r}"
    temperature, top_k, top_p = (_or_default(settings, key) for key in ("temperature", "top_k", "top_p"))
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature <= 0:
        return f"sampling with temperature={temperature!r}"
    if not _is_count(top_k):
        return f"sampling with top_k={top_k!r}"
    if not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        return f"sampling with top_p={top_p!r}"
    return None


def _first_active(settings: Mapping[str, Any]) -> str:
    """The first setting that makes ``settings`` more than plain decoding, as ``key=value``."""
    for key, value in settings.items():
        if key.startswith("_") or key in _INERT or key == "min_new_tokens":
            continue
        if not _is_plain({key: value}):
            return f"{key}={value!r}"
    return f"cache_implementation={settings.get('cache_implementation')!r}"


__all__ = ["DecodePlan", "SAMPLING_DEFAULTS", "decode_plan"]
