"""A key/value cache of fixed size and the attention masks that go with it, for captured generation.

:class:`StaticKV` holds ``[batch, kv_heads, length, head_dim]`` keys and values per decoder layer, allocated once,
and writes each forward's new keys and values at the cache *slots* its caller set (:attr:`StaticKV.slots`, a tensor
the caller updates in place), so a prefill or a decoding step runs on the same tensors every time and can be
captured into a CUDA graph or compiled once. It answers the one call transformers' attention layers make on a cache
(``cache.update(keys, values, layer_idx, ...)``) under every transformers 5.x spelling of that call, and nothing
else of ``transformers.Cache``: positions come from ``position_ids`` and the mask is built here, whole, as a 4-D
tensor, which transformers' mask builders pass through unchanged (:func:`slot_mask`).

Unwritten slots hold zeros and are never visible: a query at slot ``s`` sees the slots ``<= s`` whose key is a
token (not padding). A padding query sees only itself, so no attention row is empty (an empty row would give NaN,
which would then reach the real rows through the padding's keys).
"""

from __future__ import annotations

from typing import Any

import torch

#: The attention implementations whose masks :func:`slot_mask` builds: a boolean mask for SDPA, an additive one for
#: the eager implementation. Others (flash attention, flex attention) take masks of other kinds.
MASK_KINDS = {"sdpa": "bool", "eager": "additive"}


class StaticKV:
    """Keys and values of every decoder layer in fixed tensors (see the module docstring).

    Args:
        layers: Decoder layers.
        batch: Rows.
        kv_heads: Key/value heads per layer.
        length: Slots per row.
        head_dim: Width of one head.
        dtype, device: Of the tensors.
    """

    is_compileable = True

    def __init__(self, *, layers: int, batch: int, kv_heads: int, length: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        shape = (batch, kv_heads, length, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        #: ``[q]`` slot indices that the next forward's ``q`` new keys and values go to; set by the caller.
        self.slots = torch.zeros(1, dtype=torch.long, device=device)
        self.length = length

    @classmethod
    def for_model(cls, config: Any, *, batch: int, length: int, dtype: torch.dtype, device: torch.device) -> StaticKV:
        """Sized from a causal LM's config (``num_hidden_layers``, ``num_key_value_heads``, ``head_dim``)."""
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(layers=config.num_hidden_layers, batch=batch, kv_heads=kv_heads, length=length, head_dim=head_dim,
                   dtype=dtype, device=device)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``[batch, kv_heads, q, head_dim]`` keys and values at :attr:`slots`; returns the whole layer."""
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        keys.index_copy_(2, self.slots, key_states.to(keys.dtype))
        values.index_copy_(2, self.slots, value_states.to(values.dtype))
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """0: the caller always passes ``position_ids`` (asked only by code that would derive positions)."""
        return 0

    def nbytes(self) -> int:
        return sum(tensor.numel() * tensor.element_size() for tensor in (*self.keys, *self.values))


def slot_mask(key_ok: torch.Tensor, query_slots: torch.Tensor, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """The ``[batch, 1, q, length]`` attention mask of queries at ``query_slots`` over a :class:`StaticKV`.

    Args:
        key_ok: ``[batch, length]`` bool, True where the slot holds (or will hold) a token, False for padding.
        query_slots: ``[q]`` the queries' slots.
        kind: ``"bool"`` (True = attend) or ``"additive"`` (0 = attend, the dtype's lowest value = masked).
        dtype: The additive mask's dtype (the model's).
    """
    length = key_ok.shape[1]
    slots = torch.arange(length, device=key_ok.device)
    causal = slots[None, :] <= query_slots[:, None]  # [q, length]
    itself = slots[None, :] == query_slots[:, None]
    allowed = (key_ok[:, None, None, :] & causal[None, None]) | itself[None, None]
    if kind == "bool":
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=key_ok.device).masked_fill_(~allowed, torch.finfo(dtype).min)


__all__ = ["MASK_KINDS", "StaticKV", "slot_mask"]
