"""Plain greedy decoding as a short loop, for the ``generate`` calls that need nothing else.

Why a loop of our own: on transformers 5, ``GenerationMixin.generate`` copies and validates its generation
config, inspects the model's signature, builds logits processors and stopping criteria on every call, and on
every token runs ``prepare_inputs_for_generation`` (which reads the model's ``device`` by iterating its
parameters, and several config attributes through the per-layer config hook) and
``_update_model_kwargs_for_generation``. For a small model at batch 1 that Python work is about a quarter of
a 16-token answer (``benchmarks/decode_batch1.py``; docs/BENCHMARKS.md). Greedy decoding itself is a prefill,
then one argmax and one cached forward per token.

:func:`greedy_plan` decides from the call's options and the model's ``generation_config`` whether a call is
plain greedy decoding (no sampling, one beam, no logits processors, stopping criteria, streamer or extra
outputs); :func:`greedy_decode` runs it with transformers' greedy semantics: a row that produced an EOS token
is finished and gets ``pad_token_id`` from then on, and decoding ends when every row finished or after
``max_new_tokens`` tokens. Every other call goes to transformers' ``generate`` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

#: Generation settings that cannot change greedy tokens: ids the loop reads itself, settings read only when
#: sampling or beam searching, compilation switches and bookkeeping.
_INERT = frozenset(
    {
        "max_new_tokens", "max_length", "pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id",
        "temperature", "top_p", "top_k", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h",
        "length_penalty", "early_stopping", "diversity_penalty", "disable_compile", "compile_config",
        "transformers_version",
    }
)

#: Settings whose non-``None`` values are allowed when they are the "off" value, as checkpoints often write them.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "do_sample": (None, False),
    "num_beams": (None, 1),
    "num_beam_groups": (None, 1),
    "num_return_sequences": (None, 1),
    "use_cache": (None, True),
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "guidance_scale": (None, 1.0),
    "min_length": (None, 0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "output_attentions": (None, False),
    "output_hidden_states": (None, False),
    "output_scores": (None, False),
    "output_logits": (None, False),
    "return_dict_in_generate": (None, False),
    "renormalize_logits": (None, False),
    "remove_invalid_values": (None, False),
    "low_memory": (None, False),
}


@dataclass(frozen=True)
class GreedyPlan:
    """What the loop needs: the token budget and the ids that finish a row / fill a finished row."""

    max_new_tokens: int
    eos_token_ids: tuple[int, ...]
    pad_token_id: int | None
    #: The EOS ids cannot be chosen before this many new tokens (transformers' ``min_new_tokens``).
    min_new_tokens: int = 0


def _token_ids(value: Any) -> tuple[int, ...] | None:
    """``None``/int/list of ints → a tuple; anything else (a tensor, nested lists) → ``None`` (not handled)."""
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        return tuple(value)
    return None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_off(value: Any, off: Any) -> bool:
    """``value`` is the "off" value ``off``: the same object for ``None``/booleans, else same type and equal
    (so ``True`` never passes for ``num_beams=1``)."""
    if off is None or isinstance(off, bool):
        return value is off
    return type(value) is type(off) and value == off


def _is_plain(settings: Mapping[str, Any]) -> bool:
    """True if no setting asks for more than greedy decoding (see ``_INERT`` and ``_NEUTRAL``)."""
    for key, value in settings.items():
        if key.startswith("_") or key in _INERT or key == "min_new_tokens":
            continue
        if not any(_is_off(value, off) for off in _NEUTRAL.get(key, (None,))):
            return False
    return True


def greedy_plan(generation_config: Any, options: Mapping[str, Any]) -> GreedyPlan | None:
    """The plan for a ``generate(**options)`` call that is plain greedy decoding, else ``None``.

    Args:
        generation_config: The model's ``GenerationConfig`` (its values are the defaults of ``options``).
        options: The generation keyword arguments of the call (``attention_mask``, ``position_ids``,
            ``inputs_embeds`` already taken out). An option that is not a generation setting (``streamer``,
            ``stopping_criteria``, ``logits_processor``, ``generation_config``, ...) means "not plain".

    Returns:
        A :class:`GreedyPlan`, or ``None`` when the call needs transformers' ``generate``: sampling, beams,
        penalties, extra outputs, a cache implementation, no ``max_new_tokens``, or any option it does not know.
        ``min_new_tokens`` is honoured (EOS ids are masked until then, as transformers' processor does).
    """
    fields = vars(generation_config)
    if any(key not in fields for key in options):
        return None
    settings = {**fields, **options}
    if not _is_plain(settings) or settings.get("cache_implementation") is not None:
        return None
    budget, floor = settings.get("max_new_tokens"), settings.get("min_new_tokens") or 0
    if not _is_count(budget) or budget < 1 or not _is_count(floor):
        return None
    eos = _token_ids(settings.get("eos_token_id"))
    pad = settings.get("pad_token_id")
    if eos is None or (pad is not None and _token_ids(pad) != (pad,)):
        return None
    if pad is None and eos:
        pad = eos[0]  # transformers' fallback too: finished rows are filled with the first EOS id
    return GreedyPlan(max_new_tokens=budget, eos_token_ids=eos, pad_token_id=pad, min_new_tokens=floor)


#: ``step(inputs_embeds | input_ids, attention_mask, position_ids, past_key_values) -> (logits [B, vocab] at
#: the last position, past_key_values)``: one forward of the causal LM with a cache.
DecodeStep = Callable[..., tuple[torch.Tensor, Any]]


def greedy_decode(
    step: DecodeStep,
    inputs_embeds: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.LongTensor | None,
    plan: GreedyPlan,
) -> torch.LongTensor:
    """Greedy tokens after the prompt ``inputs_embeds``, with transformers' greedy-search semantics.

    Args:
        step: One cached forward, see :data:`DecodeStep` (the LLaVA mixin's ``_last_logits``).
        inputs_embeds: ``[B, L, hidden]`` prompt embeddings (left-padded when ``B > 1`` and lengths differ).
        attention_mask: ``[B, L]`` (1 = token) or ``None``; dropped when it masks nothing.
        position_ids: ``[B, L]`` or ``None`` (then ``0..L-1``); each new token takes its row's last + 1.
        plan: From :func:`greedy_plan`.

    Returns:
        ``[B, T]`` new token ids, ``T <= plan.max_new_tokens`` (fewer when every row produced an EOS id);
        a row that finished earlier holds ``plan.pad_token_id`` after its EOS.
    """
    batch, device = inputs_embeds.shape[0], inputs_embeds.device
    # An all-ones mask is the same as none, and without one the LLM skips building the 4-D mask every step.
    mask = None if attention_mask is None or bool(attention_mask.all()) else attention_mask
    eos = torch.tensor(plan.eos_token_ids, device=device) if plan.eos_token_ids else None
    finished: torch.Tensor | None = None  # [B] bool, created at the first EOS (most answers need no fill)
    logits, cache = step(inputs_embeds=inputs_embeds, attention_mask=mask, position_ids=position_ids, past_key_values=None)
    tokens: list[torch.Tensor] = []
    for index in range(plan.max_new_tokens):
        if eos is not None and index < plan.min_new_tokens:
            logits = logits.index_fill(-1, eos, float("-inf"))
        next_tokens = logits.argmax(dim=-1)
        if finished is not None:
            next_tokens = next_tokens.masked_fill(finished, plan.pad_token_id)
        tokens.append(next_tokens)
        if eos is not None:
            hit = torch.isin(next_tokens, eos)
            # One host sync per token, as transformers' stopping check makes.
            if bool(hit.any()):
                finished = hit if finished is None else finished | hit
                if bool(finished.all()):
                    break
        if index + 1 == plan.max_new_tokens:
            break
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones((batch, 1))], dim=1)
        if position_ids is not None:
            position_ids = position_ids[:, -1:] + 1
        logits, cache = step(input_ids=next_tokens[:, None], attention_mask=mask, position_ids=position_ids, past_key_values=cache)
    return torch.stack(tokens, dim=1)


__all__ = ["DecodeStep", "GreedyPlan", "greedy_decode", "greedy_plan"]
