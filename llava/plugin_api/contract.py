"""What a projector-kind method is built from and returns: the factory's typed context (:class:`BuildContext`), its
result (:class:`BuiltProjector`), a type's declaration (:class:`ProjectorType`), and what a compressor needs from the
model (:class:`ModelNeeds`) and gets at run time (:class:`CompressorInputs`). The standard library only (torch for
type checkers)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .names import NameForm

if TYPE_CHECKING:  # for annotations only: importing the API must not import torch
    import torch
    import torch.nn as nn

Boundary = Literal["pre", "post"]
#: Where a projector-kind method sits: ``pre`` compresses tower features then projects, ``post`` runs on projected tokens.
BOUNDARIES = ("pre", "post")


# ---------------------------------------------------------------------------------------------- building


@dataclass(frozen=True)
class TowerShape:
    """What a factory may know of the vision tower: one view's patch grid, its encoder layers, its CLS token."""

    grid: tuple[int, int]
    layers: int
    has_cls: bool


@dataclass(frozen=True)
class BuildContext:
    """What a factory gets, and what the cost model of the same type gets (one function builds both:
    :func:`llava.model.multimodal_projector.registry.build_context`).

    A factory is ``factory(context) -> BuiltProjector``: it reads the config (read only), the widths and the tower's
    shape, and returns the module with the config keys it wants saved (the values it resolved, so ``config.json``
    rebuilds the same module). It reads no files and writes nothing into the config: the builder does both, once.

    Attributes:
        projector_type: ``config.mm_projector_type``.
        match: The registered pattern's ``re.fullmatch`` of it (groups: K, C, S, ...; named for :class:`NameForm` types).
        config: The model config, **read only** (plugin keys already checked and normalised).
        mm_hidden: The tower's feature width (the projector's input).
        hidden: The LLM's width (the projector's output).
        select_layer: ``mm_vision_select_layer``.
        select_feature: ``mm_vision_select_feature`` (``patch`` or ``cls_patch``).
        tower_loader: Gives the tower's shape (``None`` when it is unknown); called the first time :attr:`tower` is
            read, so a type that needs no tower never reads a tower's config.
    """

    projector_type: str
    match: re.Match[str]
    config: Any
    mm_hidden: int
    hidden: int
    select_layer: int = -2
    select_feature: str = "patch"
    tower_loader: Callable[[], TowerShape | None] = field(default=lambda: None, repr=False, compare=False)

    @functools.cached_property
    def tower(self) -> TowerShape | None:
        """The tower's shape, or ``None`` when it cannot be told (a config that names no tower)."""
        return self.tower_loader()

    def setting(self, key: str, default: Any = None) -> Any:
        """The config's value of ``key``, or ``default`` when it is absent or ``None``."""
        value = getattr(self.config, key, None)
        return default if value is None else value

    def require_tower(self, why: str) -> TowerShape:
        """The tower's shape.

        Raises:
            ValueError: When it cannot be told, naming ``why`` the type needs it.
        """
        if self.tower is None:
            raise ValueError(
                f"mm_projector_type {self.projector_type!r} {why}, but the config names no vision tower "
                "(mm_vision_tower); set it to the tower's directory or hub name"
            )
        return self.tower


@dataclass(frozen=True)
class BuiltProjector:
    """What a factory returns.

    Attributes:
        module: The projector.
        config_keys: Keys to save into the model config (and so ``config.json``), e.g. the values it resolved.
        needs: What it needs from the model when that depends on its settings (e.g. the tower layers it resolved);
            ``None`` means the plugin's declared ``needs``.
    """

    module: nn.Module
    config_keys: Mapping[str, Any] = field(default_factory=dict)
    needs: ModelNeeds | None = None


ProjectorFactory = Callable[[BuildContext], BuiltProjector]


def mlp_projector(in_features: int, out_features: int, depth: int) -> list[nn.Module]:
    """Upstream's ``mlp{depth}x_gelu`` layers: Linear, then (depth-1) x [GELU (exact), Linear] (weights at the even
    ``Sequential`` indices, the layout every ``mlp2x_gelu`` checkpoint has)."""
    import torch.nn as nn

    if depth < 1:
        raise ValueError(f"mlp projector depth must be at least 1, got {depth}")
    layers: list[nn.Module] = [nn.Linear(in_features, out_features)]
    for _ in range(depth - 1):
        layers += [nn.GELU(), nn.Linear(out_features, out_features)]
    return layers


@dataclass(frozen=True)
class ProjectorType:
    """One name pattern of a plugin (``re.fullmatch`` on ``mm_projector_type``) and its factory.

    Declare it with :meth:`named` (a :class:`NameForm` template: the pattern and spelling are derived). A regular
    expression still works for plugins written before the grammar (then ``spelling`` says how users write it).

    Args:
        pattern: A plain name (``"identity"``) or an anchored regular expression (``r"mlp(\\d+)x_gelu"``).
        factory: ``factory(BuildContext) -> BuiltProjector``.
        description: One line for listings and ``--help``.
        examples: Concrete names of this pattern that build on a tiny test tower (a 6 x 6 grid); the test suite
            builds, runs, saves and reloads every one (tests/llava/test_registered_projectors.py). A plain name
            is its own example.
        example_settings: Config keys the examples need on that tiny tower.
        spelling: How users write the names (``"mlp{N}x_gelu"``); a plain name is its own spelling, and a pattern
            without one is shown as is.
        form: The :class:`NameForm` the pattern and spelling came from (:meth:`named`), else ``None``.
    """

    pattern: str
    factory: ProjectorFactory
    description: str = ""
    examples: tuple[str, ...] = ()
    example_settings: Mapping[str, Any] = field(default_factory=dict)
    spelling: str = ""
    form: NameForm | None = None

    @classmethod
    def named(cls, template: str | NameForm, factory: ProjectorFactory, description: str = "", *,
              examples: tuple[str, ...] = (), example_settings: Mapping[str, Any] | None = None) -> ProjectorType:
        """The type of the names of ``template`` (see :class:`NameForm`)."""
        form = template if isinstance(template, NameForm) else NameForm(template)
        return cls(form.regex, factory, description, examples, dict(example_settings or {}), form.spelling, form)

    def __post_init__(self) -> None:
        regex = re.compile(self.pattern)
        examples = self.examples or ((self.pattern,) if self.exact else ())
        if not examples:
            raise ValueError(f"projector pattern {self.pattern!r} must declare examples (concrete names it builds)")
        bad = [name for name in examples if regex.fullmatch(name) is None]
        if bad:
            raise ValueError(f"examples {bad} do not match their projector pattern {self.pattern!r}")
        object.__setattr__(self, "examples", tuple(examples))
        object.__setattr__(self, "spelling", self.spelling or self.pattern)

    @property
    def exact(self) -> bool:
        """Whether the pattern is a plain name (resolved before every regular expression)."""
        return re.escape(self.pattern) == self.pattern

    def budget_name(self, budget: int) -> str | None:
        """The type of this pattern sending ``budget`` tokens per view (its form's ``{K}``), else ``None``."""
        return None if self.form is None else self.form.budget_name(budget)


@dataclass(frozen=True)
class RunInfo:
    """What a plugin's ``run_defaults`` may depend on.

    Attributes:
        stage: ``"pretrain"`` (only the projector trains, ``--tune_mm_mlp_adapter True``) or ``"finetune"``.
        total_steps: The run's planned optimizer steps, as the transformers ``Trainer`` counts them.
        projector_type: ``--mm_projector_type``.
    """

    stage: str
    total_steps: int
    projector_type: str


# ---------------------------------------------------------------------------------------------- what a method needs and gets

#: The text a compressor may ask for (:attr:`ModelNeeds.text`): each sample's question (the first user turn,
#: image markers removed, tokenized on its own as the tokenizer encodes a text), its instruction (the question
#: without the answer-format line LLaVA's evaluation prompts append, :func:`llava.conversation.instruction_of`),
#: or the whole prompt (every non-target token of the sample: system text, roles, every turn).
TEXT_NEEDS = ("question", "instruction", "prompt")
#: Who encodes that text (:attr:`ModelNeeds.text_encoder`): the LLM (its tokenizer and input embedding) or the
#: vision tower's paired text encoder (CLIP's text tower: its tokenizer and projected text embedding).
TEXT_ENCODERS = ("llm", "tower")


@dataclass(frozen=True)
class ModelNeeds:
    """What a compressor needs from the model besides the select layer's features.

    Resolved once, when the projector is built, and kept on the built module
    (:func:`llava.model.multimodal_projector.needs.projector_needs`); ``encode_images`` reads it from there.

    Args:
        tower_layers: Hidden-state indices of the vision tower (as ``mm_vision_select_layer``, negative from
            the end) whose features the compressor reads (e.g. multi-level features).
        attention: The encoder layer whose self-attention the compressor reads (its queries, keys and
            probabilities), **relative to the select layer**: ``0`` is the layer that produced the select
            layer's features, ``1`` the next layer, whose input they are (with ``mm_vision_select_layer -2`` on
            CLIP-L that is the last layer, index 23 of 24); ``None`` for no attention.
        text: ``"question"``, ``"instruction"`` or ``"prompt"`` (see :data:`TEXT_NEEDS`), or ``None`` for no text.
        square_grid: The tower's patch grid must be square.
        text_encoder: ``"llm"`` (default): the text is tokenized by the LLM's tokenizer and embedded by its input
            embedding; ``"tower"``: tokenized and encoded by the vision tower's paired text encoder (one projected
            embedding per context-length segment), and the compressor also gets the select layer's patches in
            that image–text space (:attr:`CompressorInputs.paired_features`). ``"tower"`` reads the question or
            the instruction, not the prompt (which is cut from the LLM's ids).
    """

    tower_layers: tuple[int, ...] = ()
    attention: int | None = None
    text: str | None = None
    square_grid: bool = False
    text_encoder: str = "llm"

    def __post_init__(self) -> None:
        if self.attention is not None and (isinstance(self.attention, bool) or not isinstance(self.attention, int)):
            raise ValueError(
                f"ModelNeeds.attention is a layer offset from the select layer (0: the layer that produced its "
                f"features, 1: the next layer) or None, got {self.attention!r}"
            )
        if self.text is not None and self.text not in TEXT_NEEDS:
            raise ValueError(f"ModelNeeds.text must be one of {list(TEXT_NEEDS)} or None, got {self.text!r}")
        if self.text_encoder not in TEXT_ENCODERS:
            raise ValueError(f"ModelNeeds.text_encoder must be one of {list(TEXT_ENCODERS)}, got {self.text_encoder!r}")
        if self.text_encoder == "tower" and self.text not in ("question", "instruction"):
            raise ValueError(f"ModelNeeds.text_encoder 'tower' encodes the question or the instruction, so text must be one of them, got {self.text!r}")

    @property
    def prompt(self) -> bool:
        """Whether the compressor reads any text (``text`` is set), so the model runs a text pass for it."""
        return self.text is not None

    @property
    def extra(self) -> bool:
        """Whether the projector takes a :class:`CompressorInputs` (anything beyond the select layer)."""
        return bool(self.tower_layers) or self.attention is not None or self.text is not None


@dataclass
class CompressorInputs:
    """Everything a plugin asked for, passed as ``projector(features, inputs)``.

    Attributes:
        features: ``[N, T, D]`` the select layer's features (the same tensor as the first argument).
        grid_shape: ``(H, W)`` patch grid of the tower.
        has_cls_token: Whether the tower has a CLS token (position 0 of ``queries``/``keys``/``attention``;
            in ``features`` only with ``mm_vision_select_feature cls_patch``).
        layers: ``{index: [N, T', D]}`` for each requested ``tower_layers`` index, as the tower returns them.
        attention: ``[N, heads, T', T']`` float32 attention probabilities of the layer ``ModelNeeds.attention``
            names, or ``None``.
        queries: ``[N, T', D]`` that layer's query projections (``q_proj`` outputs, all heads, before scaling).
        keys: ``[N, T', D]`` that layer's key projections (``k_proj`` outputs, all heads).
        prompt: The text the plugin asked for (``ModelNeeds.text``), one ``[L_i, hidden_size]`` tensor per image,
            embedded by the LLM's input embedding: the question (or instruction) of the image's sample (its ids as
            the caller tokenized it, e.g. with BOS), or the whole prompt (the sample's non-target tokens, padding and
            image markers removed). With ``text_encoder="tower"``: one ``[M_i, C]`` float32 tensor per image, the
            tower's projected text embedding of each ``M_i`` context-length segment. ``None`` when the images come
            without text (``encode_images`` on its own).
        prompt_ids: The token ids of the same tokens, ``[L_i]`` each.
        run_language_model: ``run_language_model(embeds [1, L, hidden]) -> [1, L, hidden]``, the LLM's last
            hidden states (an extra pass over the text, for text-conditioned compressors).
        cls_token: ``[N, D]`` the CLS token's features at the select layer (towers with one; whatever
            ``mm_vision_select_feature``), given whenever the tower's layers or attention are asked for.
        paired_features: ``[N, T, C]`` float32, the select layer's features mapped into the tower's image–text
            space (CLIP: ``visual_projection(post_layernorm(x))``), for ``text_encoder="tower"``.
    """

    features: torch.Tensor
    grid_shape: tuple[int, int]
    has_cls_token: bool
    layers: dict[int, torch.Tensor] = field(default_factory=dict)
    attention: torch.Tensor | None = None
    queries: torch.Tensor | None = None
    keys: torch.Tensor | None = None
    prompt: list[torch.Tensor] | None = None
    prompt_ids: list[torch.Tensor] | None = None
    run_language_model: Callable[[torch.Tensor], torch.Tensor] | None = None
    cls_token: torch.Tensor | None = None
    paired_features: torch.Tensor | None = None
