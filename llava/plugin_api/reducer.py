"""The in-LLM reducer kind (docs/PLUGINS.md, "The reducer kind"): what a reducer sees at its decoder layer
(:class:`ReducerContext`), returns (:class:`Reduction`) and is (:class:`Reducer`), what its factory gets
(:class:`ReducerBuild`), its types (:class:`ReducerType`) and its declaration (:class:`ReducerPlugin`). The standard
library only (torch for type checkers)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .cost import CostModel, LMDims
from .names import NameForm, _check_kind, _check_method_name
from .view import CompressorView, ViewInputs

if TYPE_CHECKING:  # for annotations only: importing the API must not import torch
    import torch


#: The query rows a reducer may ask :meth:`ReducerContext.attention` for by name: ``last`` is each row's last
#: instruction token (the query of a method ranking image tokens by the instruction's attention), ``text`` every instruction token (the same count per row).
REDUCER_QUERIES = ("last", "text")


@dataclass(frozen=True)
class ReducerContext:
    """What a reducer sees at its decoder layer (built by :mod:`llava.model.reduction` for one prefill).

    Rows are the sequence as this layer runs it: every position an earlier reducer dropped is gone, so ``T`` here
    may be shorter than the prompt. Decoding steps never reach a reducer: it acts on the prompt once.

    Attributes:
        layer: The decoder layer (0-based) whose input this is; the kept rows are what this layer and every later
            one run on (this layer's key/value cache holds only them).
        hidden_states: ``[B, T, D]`` the layer's input hidden states.
        visual: ``[B, T]`` bool, the image tokens.
        text: ``[B, T]`` bool, the instruction: the prompt's tokens after its last image token (answer tokens of a
            re-forward and padding excluded).
        attention_mask: ``[B, T]`` 1 for tokens, 0 for padding, or ``None`` (no padding).
        position_ids: ``[B, T]`` each row's original position (RoPE's position; dropping never shifts it).
        attend: The seam's ``attend(queries, layer) -> [B, H, Q, T]``; call :meth:`attention` instead.
        prompt_visual: ``[B]`` each row's image tokens in the prompt, before any reducer dropped some (a budget taken
            as a fraction of the image, as a method of stages takes it).
        keys_of: The seam's ``keys_of(layer) -> [B, T, H_kv * d]``; call :meth:`keys` instead.
        final_norm: The LLM's final norm (``model.norm``, the one before the LM head) as a function of ``[..., D]``
            hidden states, for a method that compares states the way the LM head sees them; ``None`` outside the seam.
    """

    layer: int
    hidden_states: torch.Tensor
    visual: torch.Tensor
    text: torch.Tensor
    attention_mask: torch.Tensor | None
    position_ids: torch.Tensor
    attend: Callable[[Any, int], torch.Tensor] = field(repr=False, compare=False)
    prompt_visual: torch.Tensor | None = None
    keys_of: Callable[[int], torch.Tensor] | None = field(default=None, repr=False, compare=False)
    final_norm: Callable[[torch.Tensor], torch.Tensor] | None = field(default=None, repr=False, compare=False)

    def keys(self, layer: int | None = None) -> torch.Tensor:
        """The keys ``[B, T, H_kv * d]`` (heads concatenated, after ``k_norm`` where the model has one, and after RoPE at
        the original positions) that ``layer`` computes from its input: this layer's (``None``) or, for a reducer whose
        :attr:`Reducer.attention_layer` says so, the one before it. Same rows and dtype as ``hidden_states``.
        """
        return self.keys_of(self.layer if layer is None else layer)

    def attention(self, queries: torch.Tensor | str = "last", layer: int | None = None) -> torch.Tensor:
        """Softmaxed attention rows ``[B, heads, Q, T]`` (float32) of the query positions ``queries``.

        Computed explicitly from the layer's own ``input_layernorm``, ``q_proj`` and ``k_proj`` on its input, RoPE at
        the original positions, causal and padding masked, for the requested rows only (the model keeps its own
        attention kernel, SDPA or flash, for the layer itself).

        Args:
            queries: ``"last"`` / ``"text"`` (:data:`REDUCER_QUERIES`), or a ``[B, T]`` bool mask with the same count
                of ``True`` per row.
            layer: ``None`` for this layer, or the one before it (``layer - 1``, whose input the seam keeps for a
                reducer whose :attr:`Reducer.attention_layer` says so: a method may rank by the attention of the layer
                before the one it prunes at).
        """
        return self.attend(queries, self.layer if layer is None else layer)


@dataclass(frozen=True)
class Reduction:
    """What a reducer returns.

    Attributes:
        keep: ``[B, T']`` sorted row indices into the context's ``T`` rows, the same count ``T'`` per row; every
            row that is not an image token must be kept (a reducer drops image tokens only).
        hidden_states: ``[B, T', D]`` replacement hidden states for the kept rows (a method that merges dropped
            tokens into kept ones), or ``None`` to keep the rows as they are.
    """

    keep: torch.Tensor
    hidden_states: torch.Tensor | None = None


class Reducer:
    """One reduction step at one decoder layer; a reducer type builds one or more (a method of stages: one per stage).

    Subclasses set :attr:`layer` (and :attr:`attention_layer` when they read the attention of the layer before) and
    implement ``__call__(ctx) -> Reduction``. :attr:`query_rows` is for the cost count: the query rows one selection
    computes attention for (``None``: every instruction token).
    """

    layer: int = 0
    query_rows: int | None = 1

    @property
    def attention_layer(self) -> int:
        """The layer whose attention :meth:`__call__` reads: ``layer`` or ``layer - 1``."""
        return self.layer

    def __call__(self, ctx: ReducerContext) -> Reduction:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class ReducerBuild:
    """What a reducer type's factory (and its cost count) gets.

    Attributes:
        name: The type, as the user wrote it (``mydrop_k2_r50``).
        values: Its :class:`NameForm` values (``{"K": 2, "R": 50}``).
        lm: The LLM's dimensions (its ``layers`` bound every layer a reducer names).
    """

    name: str
    values: Mapping[str, int]
    lm: LMDims

    def refuse(self, why: str) -> ValueError:
        """One sentence naming the type and what is wrong, to raise."""
        return ValueError(f"reducer {self.name!r} {why}")


@dataclass(frozen=True)
class ReducerType:
    """One name form of a reducer plugin and its factory ``factory(ReducerBuild) -> [Reducer, ...]``.

    Args:
        form: The names (``NameForm("mydrop_k{K}_r{R}")``).
        factory: Builds the steps; refuses a name it cannot run (a layer past the LLM's last) with ``build.refuse``.
        description: One line for listings and ``--help``.
        examples: Names the test suite runs on a tiny LLM (2 decoder layers) through the real seam.
    """

    form: NameForm
    factory: Callable[[ReducerBuild], Sequence[Reducer]]
    description: str = ""
    examples: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = [name for name in self.examples if self.form.parse(name) is None]
        if not self.examples or bad:
            raise ValueError(f"reducer form {self.form.spelling!r} must declare examples of its own form, got {list(self.examples)}")


@dataclass(frozen=True)
class ReducerPlugin:
    """The declaration of one in-LLM method (docs/PLUGINS.md, "The reducer kind").

    Args:
        name: The method's one name (lower-case letters and digits): its cost rows, ``compare`` rows, panel, messages.
        reducers: Its reducer types.
        cost: Its :class:`CostModel` (``layer_tokens``: the image tokens per decoder layer).
        view: ``view(name, kept, ViewInputs) -> CompressorView | None`` for the demo panel: ``name`` the type,
            ``kept`` ``{layer: [row-major grid indices of the first image kept before that layer]}``.
        showcase: Types a first comparison should show (the quickstart's ``--reducers all``).
        reference_scores: Published benchmark scores by name, as :class:`CompressorPlugin`'s.
    """

    name: str
    reducers: tuple[ReducerType, ...]
    cost: CostModel | None = None
    view: Callable[[str, Mapping[int, Any], ViewInputs], CompressorView | None] | None = None
    showcase: tuple[str, ...] = ()
    reference_scores: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_method_name(self.name, "mydrop")
        unknown = [name for name in self.showcase if self.match(name) is None]
        if unknown:
            raise ValueError(f"reducer plugin {self.name!r} showcases {unknown}, which none of its forms matches")

    def types(self, kind: str = "reducer") -> tuple[ReducerType, ...]:
        _check_kind(kind)
        return self.reducers if kind == "reducer" else ()

    def match(self, name: str) -> tuple[ReducerType, dict[str, int]] | None:
        """The type ``name`` is of and its values, or ``None``."""
        for entry in self.reducers:
            values = entry.form.parse(name)
            if values is not None:
                return entry, values
        return None
