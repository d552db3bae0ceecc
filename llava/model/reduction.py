"""The in-LLM seam: reducers (:class:`llava.plugin_api.Reducer`) run at their decoder layers and the rows they keep
stay consistent through the rest of the forward and through cached decoding.

How it works, without replacing any transformers code. A forward pre-hook on every decoder layer (installed by
:func:`install_hooks`) receives the layer's call, the full-length keyword arguments the language model's layer loop
passes to every layer, and the :class:`ReductionState` of the prompt (the LLaVA forward hands it down as the keyword
argument :data:`STATE_KEY`, which the hook removes before the layer runs). For the prompt (the prefill):

- the layers before the first reducer run unchanged (their key/value cache keeps every position);
- at a reducer's layer the hook builds a :class:`~llava.plugin_api.ReducerContext`, calls the reducer, checks its
  :class:`~llava.plugin_api.Reduction` and cuts the layer's input to the kept rows;
- from there on every layer gets the kept rows of the causal/padding mask (queries and keys), of RoPE's cos/sin and of
  ``position_ids``: positions are the original ones, never shifted; the layer's cache stores only the kept rows.

For a decoding step (one new token, the state found on the cache), each layer after a reduction gets the mask columns
of its cached rows plus the new tokens' columns. With SDPA and no padding the model passes no mask at all (causal by
``is_causal``), which stays right: kept rows are sorted, so row order is position order.

The attention a reducer reads (:meth:`ReducerContext.attention`) is computed here explicitly for the requested query
rows only (:func:`attention_rows`); the model's own kernel (SDPA, flash) is never switched to eager. The keys
(:meth:`ReducerContext.keys`) are recomputed the same way (:func:`layer_keys`), and the LLM's final norm is handed
through as :attr:`ReducerContext.final_norm`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from llava.plugin_api import REDUCER_QUERIES, Reducer, ReducerContext, Reduction

#: The keyword argument that carries the prompt's :class:`ReductionState` down to the decoder layers.
STATE_KEY = "llava_reduction"
#: The attribute of a key/value cache that holds the state of the prompt it caches (for the decoding steps).
CACHE_ATTRIBUTE = "llava_reduction"


@dataclass
class ReductionState:
    """One prompt's reduction: its token roles at full length and the rows each layer runs on.

    Attributes:
        steps: The reducers, by layer.
        visual: ``[B, T0]`` bool image tokens of the prompt batch.
        text: ``[B, T0]`` bool instruction tokens (after the last image, answer tokens excluded).
        padding: ``[B, T0]`` 1 token / 0 padding, or ``None``.
        length: ``T0``, the prefill's length.
        rows: ``{layer: [B, T_l] original row indices}`` for each layer from the first reduction on (filled by the
            prefill, read by the decoding steps).
        kept: ``{layer: [B, T_l]}`` the rows after each reducing layer (the demo panel and tests read it).
        done: The prefill has passed every layer.
    """

    steps: Mapping[int, Sequence[Reducer]]
    visual: torch.Tensor
    text: torch.Tensor
    padding: torch.Tensor | None
    length: int
    rows: dict[int, torch.Tensor] = field(default_factory=dict)
    kept: dict[int, torch.Tensor] = field(default_factory=dict)
    done: bool = False
    _current: torch.Tensor | None = None
    _stash: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]] = field(default_factory=dict)

    @property
    def stash_layers(self) -> set[int]:
        """Layers whose input a reducer reads the attention of (kept until the prefill ends)."""
        return {step.attention_layer for steps in self.steps.values() for step in steps if step.attention_layer != step.layer}


def prompt_state(
    steps: Mapping[int, Sequence[Reducer]], visual: torch.Tensor, padding: torch.Tensor | None, generated: int = 0
) -> ReductionState:
    """The state of a spliced prompt batch.

    Args:
        steps: The model's reducers by layer.
        visual: ``[B, T]`` bool image-token positions of the spliced batch.
        padding: ``[B, T]`` attention mask (1 token, 0 padding) or ``None``.
        generated: The last ``generated`` tokens of each row are answer tokens (a full re-forward during decoding):
            they are no instruction and no query, so the reduction equals the one cached decoding made.
    """
    tokens = torch.ones_like(visual) if padding is None else padding.bool()
    after_image = (visual.long().cumsum(1) == visual.long().sum(1, keepdim=True)) & ~visual
    remaining = tokens.long().flip(1).cumsum(1).flip(1)  # tokens from here to the row's end
    text = after_image & tokens & (remaining > generated)
    return ReductionState(steps, visual, text, padding, visual.shape[1])


# ---------------------------------------------------------------------------------------------- slicing


def _rows_of(tensor: torch.Tensor, rows: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """``tensor`` at ``rows`` ([B, T']) along ``dim`` (1 or 2), per batch row; a batch of one is broadcast."""
    if tensor.shape[0] != rows.shape[0]:
        tensor = tensor.expand(rows.shape[0], *tensor.shape[1:])
    shape = [rows.shape[0]] + [1] * (tensor.ndim - 1)
    shape[dim] = rows.shape[1]
    index = rows.reshape(shape).expand(*[rows.shape[1] if d == dim else s for d, s in enumerate(tensor.shape)])
    return tensor.gather(dim, index)


def _slice_prefill(kwargs: dict[str, Any], rows: torch.Tensor) -> None:
    """Cut the layer's full-length mask, RoPE cos/sin and position ids to ``rows`` (in place on ``kwargs``)."""
    mask = kwargs.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        if mask.ndim == 4:  # [B, 1, Q, K]: the kept queries and the kept keys
            kwargs["attention_mask"] = _rows_of(_rows_of(mask, rows, 2), rows, 3)
        elif mask.ndim == 2:  # flash attention's padding mask
            kwargs["attention_mask"] = _rows_of(mask, rows, 1)
    cos_sin = kwargs.get("position_embeddings")
    if cos_sin is not None:
        kwargs["position_embeddings"] = tuple(_rows_of(part, rows) for part in cos_sin)
    if isinstance(kwargs.get("position_ids"), torch.Tensor):
        kwargs["position_ids"] = _rows_of(kwargs["position_ids"], rows)


def _slice_decoding(kwargs: dict[str, Any], rows: torch.Tensor, length: int) -> None:
    """Cut a decoding step's mask columns to this layer's cached rows plus every position from ``length`` on."""
    mask = kwargs.get("attention_mask")
    if not isinstance(mask, torch.Tensor) or mask.ndim not in (2, 4):
        return
    later = torch.arange(length, mask.shape[-1], device=rows.device).expand(rows.shape[0], -1)
    columns = torch.cat([rows, later], dim=1)
    kwargs["attention_mask"] = _rows_of(mask, columns, mask.ndim - 1)


# ---------------------------------------------------------------------------------------------- attention rows


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE as the Llama family applies it (``x cos + rotate_half(x) sin``); cos/sin ``[B, T, d]``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


def query_rows(queries: torch.Tensor | str, text: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``[B, Q]`` row indices of ``queries`` (``"last"``, ``"text"`` or a ``[B, T]`` bool mask).

    ``"last"`` is each row's last instruction token, or its last token when it has no instruction.

    Raises:
        ValueError: For another name, or a mask with different counts per row.
    """
    if isinstance(queries, str):
        if queries not in REDUCER_QUERIES:
            raise ValueError(f"unknown attention queries {queries!r}; expected one of {list(REDUCER_QUERIES)} or a [B, T] bool mask")
        if queries == "last":
            chosen = torch.where(text.any(1, keepdim=True), text, tokens)
            index = torch.arange(chosen.shape[1], device=chosen.device).expand_as(chosen)
            return torch.where(chosen, index, -1).amax(1, keepdim=True)
        queries = text
    counts = queries.sum(1)
    if bool((counts != counts[0]).any()) or int(counts[0]) == 0:
        raise ValueError(f"attention queries must select the same number (> 0) of rows in each sample, got {counts.tolist()}")
    return queries.nonzero()[:, 1].view(queries.shape[0], -1)


def _heads_keys(attn: nn.Module, normed: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``[B, H_kv, T, d]`` keys of the attention module ``attn`` from its normed input ``[B, T, D]``: ``k_proj``,
    ``k_norm`` where the model has one, RoPE with ``cos_sin`` of the same rows."""
    batch, length, _ = normed.shape
    k = attn.k_proj(normed).view(batch, length, -1, attn.head_dim).transpose(1, 2)
    if hasattr(attn, "k_norm"):
        k = attn.k_norm(k)
    return _rotate(k, *cos_sin)


def layer_keys(layer: nn.Module, hidden: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``[B, T, H_kv * d]`` post-RoPE keys (heads concatenated) decoder ``layer`` computes from its input ``hidden``
    ``[B, T, D]`` with RoPE's ``cos_sin`` of the same rows."""
    k = _heads_keys(layer.self_attn, layer.input_layernorm(hidden), cos_sin)
    return k.transpose(1, 2).flatten(2)


def attention_rows(
    layer: nn.Module, hidden: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor], tokens: torch.Tensor,
    queries: torch.Tensor,
) -> torch.Tensor:
    """Softmaxed attention ``[B, heads, Q, T]`` (float32) of decoder ``layer`` for the query rows ``queries`` ``[B, Q]``.

    From the layer's ``input_layernorm``, ``q_proj``, ``k_proj`` (and ``q_norm``/``k_norm`` where the model has them)
    on its input ``hidden`` ``[B, T, D]``, RoPE's ``cos_sin`` of the same rows, keys masked causally (rows are in
    position order) and where ``tokens`` ``[B, T]`` is padding.
    """
    attn = layer.self_attn
    normed = layer.input_layernorm(hidden)
    batch, length, _ = normed.shape
    picked = _rows_of(normed, queries)
    q = attn.q_proj(picked).view(batch, queries.shape[1], -1, attn.head_dim).transpose(1, 2)
    if hasattr(attn, "q_norm"):
        q = attn.q_norm(q)
    cos, sin = cos_sin
    q = _rotate(q, _rows_of(cos, queries), _rows_of(sin, queries))
    k = _heads_keys(attn, normed, cos_sin)
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = (q.float() @ k.float().transpose(-1, -2)) * attn.scaling
    keys = torch.arange(length, device=hidden.device)
    allowed = (keys.view(1, 1, -1) <= queries.unsqueeze(-1)) & tokens.bool().unsqueeze(1)  # [B, Q, T]
    scores = scores.masked_fill(~allowed.unsqueeze(1), float("-inf"))
    return scores.softmax(dim=-1)


# ---------------------------------------------------------------------------------------------- the hooks


def _context(state: ReductionState, layer_index: int, layers: Sequence[nn.Module], hidden: torch.Tensor,
             cos_sin: tuple[torch.Tensor, torch.Tensor], rows: torch.Tensor, positions: torch.Tensor,
             final_norm: Callable[[torch.Tensor], torch.Tensor] | None) -> ReducerContext:
    tokens = _rows_of(state.padding.bool(), rows) if state.padding is not None else torch.ones_like(rows, dtype=torch.bool)
    text = _rows_of(state.text, rows)

    def source(at: int, what: str) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The input hidden states and cos/sin of layer ``at`` (this one, or a stashed one on the same rows)."""
        if at == layer_index:
            return hidden, cos_sin
        if at not in state._stash:
            raise ValueError(f"a reducer at layer {layer_index} may read the {what} of layer {layer_index} or of the "
                             f"layer its attention_layer names, not {at}")
        source_hidden, source_cos_sin, source_rows = state._stash[at]
        if not torch.equal(source_rows, rows):
            raise ValueError(f"the {what} of layer {at} covers other rows than layer {layer_index}'s input; "
                             "a reducer reads it only when nothing is dropped in between")
        return source_hidden, source_cos_sin

    def attend(queries: Any, at: int) -> torch.Tensor:
        chosen = queries if isinstance(queries, str) else queries.bool()
        return attention_rows(layers[at], *source(at, "attention"), tokens, query_rows(chosen, text, tokens))

    def keys_of(at: int) -> torch.Tensor:
        return layer_keys(layers[at], *source(at, "keys"))

    return ReducerContext(
        layer=layer_index, hidden_states=hidden, visual=_rows_of(state.visual, rows), text=text,
        attention_mask=None if state.padding is None else _rows_of(state.padding, rows), position_ids=positions,
        attend=attend, prompt_visual=state.visual.sum(1), keys_of=keys_of, final_norm=final_norm,
    )


def check_reduction(reduction: Reduction, visual: torch.Tensor, hidden: torch.Tensor, layer: int) -> None:
    """Refuse a :class:`Reduction` that breaks the contract (a plugin's bug, so it names the rule it broke)."""
    keep = reduction.keep
    if not isinstance(keep, torch.Tensor) or keep.ndim != 2 or keep.shape[0] != visual.shape[0] or keep.dtype != torch.long:
        raise ValueError(f"the reducer at layer {layer} must return keep as a [B, T'] long tensor, got {keep!r:.80}")
    if keep.numel() and (int(keep.min()) < 0 or int(keep.max()) >= visual.shape[1] or bool((keep.diff(dim=1) <= 0).any())):
        raise ValueError(f"the reducer at layer {layer} must return sorted, distinct row indices below {visual.shape[1]}")
    if bool(((~visual).sum(1) != (~_rows_of(visual, keep)).sum(1)).any()):
        raise ValueError(f"the reducer at layer {layer} dropped rows that are not image tokens; a reducer drops image tokens only")
    replaced = reduction.hidden_states
    if replaced is not None and tuple(replaced.shape) != (*keep.shape, hidden.shape[-1]):
        raise ValueError(f"the reducer at layer {layer} returned hidden_states {tuple(replaced.shape)}; expected {(*keep.shape, hidden.shape[-1])}")


def _prefill(state: ReductionState, index: int, layers: Sequence[nn.Module], hidden: torch.Tensor,
             kwargs: dict[str, Any], final_norm: Callable[[torch.Tensor], torch.Tensor] | None) -> torch.Tensor:
    """One layer of the prompt: cut to the rows so far, run the layer's reducers, record the rows."""
    full = dict(kwargs)
    rows = state._current
    if rows is None:
        rows = torch.arange(hidden.shape[1], device=hidden.device).expand(hidden.shape[0], -1)
    else:
        _slice_prefill(kwargs, rows)
    for step in state.steps.get(index, ()):
        cos_sin = _rows_of(full["position_embeddings"][0], rows), _rows_of(full["position_embeddings"][1], rows)
        positions = _rows_of(_positions(full, hidden), rows)
        ctx = _context(state, index, layers, hidden, cos_sin, rows, positions, final_norm)
        reduction = step(ctx)
        check_reduction(reduction, ctx.visual, hidden, index)
        hidden = _rows_of(hidden, reduction.keep) if reduction.hidden_states is None else reduction.hidden_states.to(hidden.dtype)
        rows = _rows_of(rows, reduction.keep)
        state.kept[index] = rows
        kwargs.clear()
        kwargs.update(full)
        _slice_prefill(kwargs, rows)
    if index in state.stash_layers:
        state._stash[index] = (hidden, (_rows_of(full["position_embeddings"][0], rows), _rows_of(full["position_embeddings"][1], rows)), rows)
    if index >= min(state.steps, default=index):
        state.rows[index] = rows
        state._current = rows
    if index == len(layers) - 1:
        state.done, state._stash = True, {}
    return hidden


def _positions(kwargs: Mapping[str, Any], hidden: torch.Tensor) -> torch.Tensor:
    positions = kwargs.get("position_ids")
    if positions is None:
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
    return positions.expand(hidden.shape[0], -1)


def _before_layer(index: int, layers: Sequence[nn.Module], final_norm: Callable[[torch.Tensor], torch.Tensor] | None) -> Any:
    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        state = kwargs.pop(STATE_KEY, None)
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if state is None:
            state = getattr(cache, CACHE_ATTRIBUTE, None)
            if state is None:
                return args, kwargs
        hidden = args[0] if args else kwargs.pop("hidden_states")
        if not state.done:
            if cache is not None:
                setattr(cache, CACHE_ATTRIBUTE, state)
            hidden = _prefill(state, index, layers, hidden, kwargs, final_norm)
        elif index in state.rows:
            _slice_decoding(kwargs, state.rows[index], state.length)
        return (hidden, *args[1:]), kwargs

    return hook


def install_hooks(layers: Sequence[nn.Module], final_norm: Callable[[torch.Tensor], torch.Tensor] | None = None) -> list[Any]:
    """Put the seam's pre-hook on every decoder layer (it does nothing for a forward without a reduction state);
    ``final_norm`` is the LLM's norm before its head, handed to reducers as :attr:`ReducerContext.final_norm`.
    Returns the hook handles."""
    return [layer.register_forward_pre_hook(_before_layer(index, layers, final_norm), with_kwargs=True)
            for index, layer in enumerate(layers)]


def steps_by_layer(steps: Sequence[Reducer], layers: int, name: str) -> dict[int, list[Reducer]]:
    """The reducers of ``name`` grouped by layer, each checked to lie inside the LLM's ``layers``.

    Raises:
        ValueError: One sentence when a step names a layer the LLM does not have.
    """
    grouped: dict[int, list[Reducer]] = {}
    for step in steps:
        if not 0 <= step.attention_layer <= step.layer < layers or step.layer - step.attention_layer > 1:
            raise ValueError(f"reducer {name!r} acts at decoder layer {step.layer} (reading layer {step.attention_layer}), "
                             f"but this LLM has layers 0..{layers - 1}; choose a layer below {layers}")
        grouped.setdefault(step.layer, []).append(step)
    return dict(sorted(grouped.items()))


__all__ = [
    "CACHE_ATTRIBUTE", "STATE_KEY", "ReductionState", "attention_rows", "check_reduction", "install_hooks",
    "layer_keys", "prompt_state", "query_rows", "steps_by_layer",
]
