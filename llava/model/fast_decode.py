"""Prefill and decoding on fixed shapes: a static key/value cache, prompt-length buckets, captured steps.

A prompt of ``L`` tokens is left-padded to its bucket ``Lb`` (:func:`bucket`; a handful of lengths serve a whole
benchmark) and runs in a :class:`DecodeState`: the fixed tensors of one ``(batch, cache length)`` pair, a
:class:`~llava.model.static_cache.StaticKV` of ``cache_length(Lb + max_new_tokens)`` slots and the decoding state
(the last token, each row's next position, whether it finished, the tokens so far). Two functions run on that
state and nothing else, so each is captured once (a CUDA graph) or compiled once (``torch.compile``) and then
replayed:

- the **prefill** of one bucket: the prompt through the LLM into slots ``0..Lb-1``, then the first token;
- the **decoding step**: the last token through the LLM into the next slot, then the next token.

Choosing a token happens inside both (argmax, or transformers' temperature / top-k / top-p sampling), as does
transformers' greedy bookkeeping: a row that chose an EOS id is finished and gets the pad id from then on, and
the EOS ids are masked before ``min_new_tokens``. The host replays steps and reads the state only now and then
(after 1, 2, 4, then every 8 steps) to see whether every row finished; the tokens past the step where they all
did are trimmed, so the answer equals eager decoding's. With a streamer or stopping criteria (batch 1) the host
hands over and checks each token of the steps it read.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from .cache_argument import cache_argument
from .decode_plan import DecodePlan
from .static_cache import StaticKV, slot_mask

logger = logging.getLogger(__name__)

#: Smallest bucket and step: lengths round up to a multiple of a quarter of the power of two below them (at least
#: 16): 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, ..., 512, 640, 768, 896, 1024, 1280, ...
MIN_BUCKET = 16
#: Host reads of the state: after this many steps, then doubling up to :data:`MAX_READ_INTERVAL`.
FIRST_READ_INTERVAL = 1
MAX_READ_INTERVAL = 8
#: Bounds on what is kept: caches (one per batch size and cache length) and prefills per cache.
MAX_STATES = 2
MAX_PREFILLS = 8

#: ``capture(fn, *example_inputs) -> fast fn``: makes a step function fast (a CUDA graph, ``torch.compile``, or ``fn``
#: itself); it may run ``fn`` on the example inputs (or on the state as it is) while doing so.
Capture = Callable[..., Callable[..., Any]]


def bucket(length: int) -> int:
    """``length`` rounded up to a multiple of a quarter of the power of two below it (at least :data:`MIN_BUCKET`):
    a padded prompt is at most a quarter longer than the prompt, or 16 tokens."""
    if length <= MIN_BUCKET:
        return MIN_BUCKET
    step = max(MIN_BUCKET, (1 << ((length - 1).bit_length() - 1)) // 4)
    return -(-length // step) * step


def cache_length(needed: int, model_max: int | None) -> int:
    """Slots for ``needed`` tokens: :func:`bucket` of it (so calls with nearby budgets share a cache), but not past
    the model's maximum length when ``needed`` fits in it."""
    length = bucket(needed)
    if model_max is not None and needed <= model_max < length:
        return model_max
    return length


class CaptureFailed(RuntimeError):
    """Making a step fast (allocating its state, capturing or compiling it) failed, before a call's work began."""


class DecodeState:
    """The fixed tensors of one ``(batch, cache length)`` pair and the captured steps that run on them.

    Args:
        model: The LLaVA causal LM (its base model and ``lm_head`` run here).
        batch, length: Rows and cache slots.
        mask_kind: ``"bool"`` or ``"additive"`` (:data:`llava.model.static_cache.MASK_KINDS`).
        capture: How a step function is made fast.
        sample, top_k: Fixed per captured step: whether it samples, and top-k (0: off).
    """

    def __init__(self, model: Any, batch: int, length: int, mask_kind: str, capture: Capture, *, sample: bool,
                 top_k: int) -> None:
        device, dtype = model.device, model.dtype
        vocab = model.lm_head.out_features
        self.model, self.batch, self.length, self.mask_kind, self.capture = model, batch, length, mask_kind, capture
        self.sample, self.top_k = sample, min(top_k, vocab)
        self.cache = StaticKV.for_model(model.config, batch=batch, length=length, dtype=dtype, device=device)
        self.cache_name = cache_argument(type(model.get_model()).forward)
        long = {"dtype": torch.long, "device": device}
        self.key_ok = torch.zeros((batch, length), dtype=torch.bool, device=device)
        self.token = torch.zeros(batch, **long)
        self.position = torch.zeros((batch, 1), **long)
        self.slot = torch.zeros(1, **long)
        self.step = torch.zeros(1, **long)
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)
        self.tokens = torch.zeros((batch, length), **long)
        self.eos_columns = torch.zeros(vocab, dtype=torch.bool, device=device)
        self.pad = torch.zeros(1, **long)
        self.min_new = torch.zeros(1, **long)
        self.temperature = torch.ones(1, device=device)
        self.top_p = torch.ones(1, device=device)
        self.decode_step = capture(self._decode)
        self.prefills: OrderedDict[int, tuple[Callable[[], None], torch.Tensor, torch.Tensor]] = OrderedDict()

    # ------------------------------------------------------------------------------------------ captured steps

    def _llm_logits(self, slots: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
        """``[B, vocab]`` logits of the last query after the LLM wrote the queries' keys and values at ``slots``."""
        self.cache.slots = slots
        mask = slot_mask(self.key_ok, slots, self.mask_kind, self.model.dtype)
        out = self.model.get_model()(attention_mask=mask, use_cache=True, **{self.cache_name: self.cache}, **inputs)
        return self.model.lm_head(out.last_hidden_state[:, -1])

    def _choose(self, logits: torch.Tensor) -> None:
        """Choose every row's next token from ``logits`` and record it (see the module docstring)."""
        early = (self.step < self.min_new) & self.eos_columns
        logits = logits.masked_fill(early, float("-inf"))
        if self.sample:
            chosen = _sample(logits, self.temperature, self.top_k, self.top_p)
        else:
            chosen = logits.argmax(dim=-1)
        chosen = torch.where(self.finished, self.pad, chosen)
        self.finished |= self.eos_columns[chosen]
        self.tokens.index_copy_(1, self.step, chosen[:, None])
        self.token.copy_(chosen)
        self.step += 1

    def _decode(self) -> None:
        logits = self._llm_logits(self.slot, input_ids=self.token[:, None], position_ids=self.position)
        self._choose(logits)
        self.position += 1
        self.slot += 1

    def prefill(self, width: int) -> tuple[Callable[[], None], torch.Tensor, torch.Tensor]:
        """``(run, embeds [B, width, hidden], positions [B, width])`` of the bucket ``width``: fill the two tensors,
        then ``run()``. Made on first use (the least recently used beyond :data:`MAX_PREFILLS` is dropped)."""
        if width in self.prefills:
            self.prefills.move_to_end(width)
            return self.prefills[width]
        model = self.model
        embeds = torch.zeros((self.batch, width, model.config.hidden_size), dtype=model.dtype, device=model.device)
        positions = torch.zeros((self.batch, width), dtype=torch.long, device=model.device)
        slots = torch.arange(width, device=model.device)

        def run() -> None:
            self._choose(self._llm_logits(slots, inputs_embeds=embeds, position_ids=positions))

        self.prefills[width] = (self.capture(run), embeds, positions)
        if len(self.prefills) > MAX_PREFILLS:
            self.prefills.popitem(last=False)
        return self.prefills[width]

    # ------------------------------------------------------------------------------------------ one call

    def load(self, embeds: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None,
             plan: DecodePlan, buffers: tuple[torch.Tensor, torch.Tensor]) -> None:
        """Put a prompt ``[B, L, hidden]`` (left-padded as ``mask`` says) into the bucket's ``buffers`` and reset the
        state for ``plan``."""
        embeds_buffer, positions_buffer = buffers
        length, width = embeds.shape[1], embeds_buffer.shape[1]
        pad = width - length
        embeds_buffer[:, :pad].zero_()
        embeds_buffer[:, pad:].copy_(embeds)
        if positions is None:
            positions = torch.arange(length, device=embeds.device).expand(embeds.shape[0], length)
        positions_buffer[:, :pad].zero_()
        positions_buffer[:, pad:].copy_(positions)
        self.key_ok.fill_(True)
        self.key_ok[:, :pad] = False
        if mask is not None:
            self.key_ok[:, pad:width] = mask.bool()
        self.position.copy_(positions_buffer[:, -1:] + 1)
        self.slot.fill_(width)
        self.step.zero_()
        self.finished.zero_()
        self.eos_columns.zero_()
        if plan.eos_token_ids:
            self.eos_columns[list(plan.eos_token_ids)] = True
        self.pad.fill_(plan.pad_token_id if plan.pad_token_id is not None else 0)
        self.min_new.fill_(plan.min_new_tokens)
        self.temperature.fill_(plan.temperature)
        self.top_p.fill_(plan.top_p)


def _sample(logits: torch.Tensor, temperature: torch.Tensor, top_k: int, top_p: torch.Tensor) -> torch.Tensor:
    """One token per row by transformers' warpers (temperature, top-k, top-p) and a categorical draw.

    The draw is ``argmax(p / E)`` with ``E ~ Exp(1)`` i.i.d. per token: the same distribution as
    ``multinomial(p, 1)``, with no host read and a fixed shape, so it runs inside a CUDA graph.
    """
    scores = logits.float() / temperature
    if top_k > 0:
        kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    ordered, order = torch.sort(scores, dim=-1)
    dropped = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
    dropped[:, -1] = False
    scores = scores.masked_fill(dropped.scatter(1, order, dropped), float("-inf"))
    probs = scores.softmax(dim=-1)
    return (probs / torch.empty_like(probs).exponential_()).argmax(dim=-1)


class StaticDecoder:
    """Runs :class:`~llava.model.decode_plan.DecodePlan` s on a model through cached :class:`DecodeState` s.

    Args:
        model: The LLaVA causal LM.
        mask_kind: See :class:`DecodeState`.
        capture: How step functions are made fast.
    """

    def __init__(self, model: Any, mask_kind: str, capture: Capture) -> None:
        self.model, self.mask_kind, self.capture = model, mask_kind, capture
        self.model_max = getattr(model.config, "max_position_embeddings", None)
        self.states: OrderedDict[tuple[int, int, bool, int], DecodeState] = OrderedDict()

    def state_for(self, batch: int, width: int, plan: DecodePlan) -> DecodeState:
        """The state for ``batch`` rows of the bucket ``width`` and ``plan``'s budget (made on first use)."""
        key = (batch, cache_length(width + plan.max_new_tokens, self.model_max), plan.sample, plan.top_k if plan.sample else 0)
        if key in self.states:
            self.states.move_to_end(key)
            return self.states[key]
        while len(self.states) >= MAX_STATES:
            self.states.popitem(last=False)  # frees its cache before the next one is allocated
        logger.debug("fast path: a static cache for batch %d, %d slots", batch, key[1])
        self.states[key] = DecodeState(self.model, batch, key[1], self.mask_kind, self.capture, sample=key[2], top_k=key[3])
        return self.states[key]

    def decode(self, embeds: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None,
               plan: DecodePlan) -> torch.LongTensor:
        """New tokens ``[B, T]`` after the prompt ``embeds`` ``[B, L, hidden]``, as :func:`llava.model.greedy.greedy_decode`
        returns them (``T <= plan.max_new_tokens``; fewer when every row finished)."""
        batch, length = embeds.shape[:2]
        width = bucket(length)
        try:  # capturing (or compiling) happens here, before the prompt goes in
            state = self.state_for(batch, width, plan)
            run_prefill, *buffers = state.prefill(width)
        except Exception as error:  # noqa: BLE001 - the caller logs it and generates eagerly
            raise CaptureFailed(f"{type(error).__name__}: {error}") from error
        state.load(embeds, mask, positions, plan, tuple(buffers))
        run_prefill()
        return _drive(state, plan)


def _drive(state: DecodeState, plan: DecodePlan) -> torch.LongTensor:
    """Replay decoding steps until every row finished or the budget is spent; the new tokens, trimmed."""
    done, interval, watched = 1, FIRST_READ_INTERVAL, 0
    eos = torch.tensor(plan.eos_token_ids, dtype=torch.long) if plan.eos_token_ids else None
    if plan.streamer is not None:
        plan.streamer.put(state.tokens.new_zeros((state.batch, 0)).cpu())  # the (empty) prompt ids, as transformers
    while True:
        tokens = state.tokens[:, :done].to("cpu", copy=True)
        end = _finish_point(tokens, eos, watched, plan)
        if plan.watches:
            watched = _watch(tokens, watched, end, plan)
        if end is not None or done == plan.max_new_tokens:
            break
        steps = min(interval, plan.max_new_tokens - done)
        for _ in range(steps):
            state.decode_step()
        done += steps
        interval = min(interval * 2, MAX_READ_INTERVAL)
    if plan.streamer is not None:
        plan.streamer.end()
    return state.tokens[:, : end or done].clone()  # the next call overwrites the state


def _finish_point(tokens: torch.Tensor, eos: torch.Tensor | None, start: int, plan: DecodePlan) -> int | None:
    """How many tokens to keep when every row finished within ``tokens`` ``[B, t]`` (by an EOS id, or by a stopping
    criterion at a position from ``start`` on: earlier ones were checked at an earlier read), else ``None``."""
    hits = torch.isin(tokens, eos) if eos is not None else torch.zeros_like(tokens, dtype=torch.bool)
    for index in range(start, tokens.shape[1]) if plan.stopping_criteria else ():
        for criterion in plan.stopping_criteria:
            hits[:, index] |= criterion(tokens[:, : index + 1], None).to(torch.bool).cpu()
    finished = hits.to(torch.int8).cummax(dim=1).values.bool().all(dim=0)  # [t]: every row finished by then
    found = finished.nonzero()
    return int(found[0]) + 1 if len(found) else None


def _watch(tokens: torch.Tensor, start: int, end: int | None, plan: DecodePlan) -> int:
    """Hand tokens ``start`` up to ``end`` (or all) to the streamer; returns how many it has now."""
    stop = tokens.shape[1] if end is None else end
    if plan.streamer is not None:
        for index in range(start, stop):
            plan.streamer.put(tokens[:, index])
    return stop


__all__ = ["CaptureFailed", "DecodeState", "StaticDecoder", "bucket", "cache_length"]
