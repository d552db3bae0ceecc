"""The plugin API: everything a method plugin declares and everything it is handed, in one module.

A *method* (a visual-token compressor, upstream's projectors, your own) is one plugin, and an in-repo method is one
file: its module, its factory,
its cost, its view and its :class:`CompressorPlugin` declaration, all written against this module alone. The
registry (:mod:`llava.model.multimodal_projector.registry`) holds the declarations; the model builds from them, the
cost engine (:mod:`llava.cost`) counts them, the demo (:mod:`llava.serve.panels`) draws them, and none of those
names a method. docs/PLUGINS.md is the guide.

**Imports.** The standard library only, at run time; torch for type checkers (tensors and modules are what plugins
hand back, and :func:`mlp_projector` imports ``torch.nn`` when it is called). So importing the API is free, any
layer may build on it, and no import cycle can pass through it (tests/test_import_seams.py holds all three).

**One name grammar.** A method's one name is its plugin's ``name`` (lower-case letters and digits: ``mypool``):
the rows of the cost tables (:mod:`llava.cost`) and of ``llava.eval.compare``, the demo panel, messages, docs. Its
type names are written once, as :class:`NameForm` templates (``mypool_k{K}``), and every other spelling is derived
from them: the pattern the registry matches (``mypool_k(?P<K>\\d+)``), the spelling in messages and ``--help``, the
names a budget gives (``{K}`` is the visual tokens per view: ``mypool_k16``), and a name's values (``{"K": 16}``).

**Two kinds, one shape.** :data:`PLUGIN_KINDS` are the places a method acts. ``projector`` types run between the
vision tower and the LLM (``mm_projector_type``), with a ``pre`` or ``post`` boundary. The in-LLM *reducer* (issue
32: runs at a chosen decoder layer, sees the hidden states and what it needs of that layer's attention, returns the
positions it keeps) is the second kind, in the same shape: name forms (:class:`ReducerType`), a factory of a typed
context (:class:`ReducerBuild`), a :class:`CostModel` (``layer_tokens``: per decoder layer), a view and a declaration
(:class:`ReducerPlugin`); it sees a :class:`ReducerContext` and returns a :class:`Reduction`. Its registry is
:mod:`llava.model.reducers`, its seam in the LLM :mod:`llava.model.reduction` (docs/PLUGINS.md, "The reducer kind").

**Import layers** (tests/test_import_seams.py; a unit imports only its own layer's or lower layers' units, and no
import cycle exists, module-level and function-level imports alike):

0. ``llava.plugin_api`` (this module);
1. the shared utilities: ``llava`` (the package), ``constants``, ``utils``, ``devices``, ``outputs``, ``net``,
   ``video``, ``mm_utils``, ``conversation``, ``visual_tokens``, ``numeric``, ``pixels``, ``endpoints``,
   ``openai_client``, ``capture`` (compiled and CUDA-graph callables);
2. ``llava.model`` (registries, the model, the loader): never ``llava.cost`` or anything above;
3. ``llava.cost``, ``llava.generation``;
4. ``llava.eval``, ``llava.serve``, ``llava.train``, ``llava.testing`` (the tiny-model builders and test helpers; never
   one another);
5. ``llava.quickstart``;

and above them the plugin packages, which import llava only from their seam modules (tests/test_import_seams.py).
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # for annotations only: importing the API must not import torch
    import torch
    import torch.nn as nn

__all__ = [
    "BOOLEAN_WORDS", "BOUNDARIES", "ELEMENTWISE_PARTS", "FALSE_WORDS", "PLUGIN_KINDS", "SETTING_TYPES", "TEXT_ENCODERS",
    "TEXT_NEEDS", "TRUE_WORDS", "BuildContext", "BuiltProjector", "CompressorInputs", "CompressorPlugin", "CompressorView",
    "CostModel", "CostSetting", "LMDims", "ModelNeeds", "ModuleCost", "NameForm", "Picture", "ProjectorFactory",
    "ProjectorType", "REDUCER_QUERIES", "Reducer", "ReducerBuild", "ReducerContext", "ReducerPlugin", "ReducerType",
    "Reduction", "RunInfo", "Setting", "TowerShape", "ViewInputs", "attention_score_flops", "elementwise",
    "linear_flops", "llm_prefill_flops", "mlp_projector", "parse_bool", "projector_flops", "total",
]

#: The kinds of method a plugin declares types of (see the module docstring); the registry keeps one section each.
PLUGIN_KINDS = ("projector", "reducer")
Boundary = Literal["pre", "post"]
#: Where a projector-kind method sits: ``pre`` compresses tower features then projects, ``post`` runs on projected tokens.
BOUNDARIES = ("pre", "post")


# ---------------------------------------------------------------------------------------------- booleans

#: The one spelling of booleans in flags and config files (any case): what :func:`parse_bool` accepts.
TRUE_WORDS = ("true", "yes", "t", "y", "1", "on")
FALSE_WORDS = ("false", "no", "f", "n", "0", "off")
BOOLEAN_WORDS = "true/false, yes/no, t/f, y/n, 1/0, on/off"


def parse_bool(value: Any) -> bool | None:
    """``value`` as a boolean, or ``None`` when it is not one: the one boolean rule of flags and config files
    (:mod:`llava.utils` exports it to the rest of llava; a plugin's boolean settings are parsed by it).

    Accepted: a bool; the integers 0 and 1; the strings of :data:`TRUE_WORDS` / :data:`FALSE_WORDS` in any case,
    surrounding spaces ignored. Anything else (``"maybe"``, ``2``, ``None``) is not a boolean.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    return None


# ---------------------------------------------------------------------------------------------- the name grammar

_TOKEN = re.compile(r"\{([A-Za-z]\w*)\}|\[([^\[\]]*)\]|([A-Za-z0-9_.\-]+)")


@dataclass(frozen=True)
class NameForm:
    """One form of a method's type names, in the one grammar: literal text (letters, digits, ``_ . -``), ``{X}`` a
    whole number named X, ``[a|b]`` an optional part with alternatives (no nesting; an alternative written ``~a`` is
    an alias: accepted, not shown in the :attr:`spelling`). ``{K}`` is, by convention, the visual tokens per view, so
    the form gives the type of a budget (:meth:`budget_name`).

    ``NameForm("mypool[_k{K}]")`` matches ``mypool`` and ``mypool_k16`` (its :attr:`regex` is
    ``mypool(?:_k(?P<K>\\d+))?``), gives ``mypool_k16`` for ``format(K=16)`` and ``{"K": 16}`` for
    ``parse("mypool_k16")``.
    """

    template: str

    def __post_init__(self) -> None:
        if not isinstance(self.template, str) or not self.template:
            raise ValueError(f"a name form is literal text, {{X}} numbers and [a|b] options, got {self.template!r}")
        names = [name for part in self._parts for name in part[1]]  # reading the template checks it
        if len(set(names)) != len(names):
            raise ValueError(f"name form {self.template!r} names a placeholder twice")

    @functools.cached_property
    def _parts(self) -> tuple[tuple[str, tuple[str, ...], bool], ...]:
        """``(regex, placeholders, optional)`` per piece of the template."""
        parts, position = [], 0
        while position < len(self.template):
            match = _TOKEN.match(self.template, position)
            if match is None:
                raise ValueError(f"name form {self.template!r}: cannot read {self.template[position:]!r}; use letters, digits, "
                                 "'_', '.', '-', {X} and [a|b]")
            number, option, literal = match.groups()
            if number is not None:
                parts.append((rf"(?P<{number}>\d+)", (number,), False))
            elif option is not None:
                alternatives = [NameForm(text.removeprefix("~")) for text in option.split("|")]
                regex = "(?:" + "|".join(form.regex for form in alternatives) + ")?"
                parts.append((regex, tuple(name for form in alternatives for name in form.placeholders), True))
            else:
                parts.append((re.escape(literal), (), False))
            position = match.end()
        return tuple(parts)

    @property
    def regex(self) -> str:
        """The pattern the registry matches (``re.fullmatch``), one named group per placeholder."""
        return "".join(part[0] for part in self._parts)

    @property
    def spelling(self) -> str:
        """How users write the names (the template without its aliases), for messages and ``--help``."""
        out = []
        for piece in _TOKEN.finditer(self.template):
            option = piece.group(2)
            shown = None if option is None else "|".join(text for text in option.split("|") if not text.startswith("~"))
            out.append(piece.group(0) if option is None else (f"[{shown}]" if shown else ""))
        return "".join(out)

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(name for part in self._parts for name in part[1])

    @property
    def required(self) -> tuple[str, ...]:
        """The placeholders every name of the form has (outside ``[...]``)."""
        return tuple(name for part in self._parts if not part[2] for name in part[1])

    def parse(self, name: str) -> dict[str, int] | None:
        """The values of ``name`` (``{"K": 16}``; an absent optional part gives none), or ``None`` when it is not of the form."""
        match = re.fullmatch(self.regex, name)
        return None if match is None else {key: int(value) for key, value in match.groupdict().items() if value is not None}

    def format(self, **values: int) -> str:
        """The name with these values: optional parts are written when all their placeholders are given.

        Raises:
            ValueError: For a missing required value, an unknown placeholder or a value that is not a whole number >= 0.
        """
        unknown = sorted(set(values) - set(self.placeholders))
        missing = [name for name in self.required if name not in values]
        bad = {key: value for key, value in values.items() if isinstance(value, bool) or not isinstance(value, int) or value < 0}
        if unknown or missing or bad:
            raise ValueError(f"name form {self.template!r} takes whole numbers for {list(self.placeholders)}; got {values!r}")
        return "".join(self._format_piece(piece, values) for piece in _TOKEN.finditer(self.template))

    @staticmethod
    def _format_piece(piece: re.Match[str], values: Mapping[str, int]) -> str:
        number, option, literal = piece.groups()
        if number is not None:
            return str(values[number])
        if literal is not None:
            return literal
        for alternative in (NameForm(text.removeprefix("~")) for text in option.split("|")):
            if alternative.placeholders and all(name in values for name in alternative.placeholders):
                return alternative.format(**{name: values[name] for name in alternative.placeholders})
        return ""

    def budget_name(self, budget: int) -> str | None:
        """The type of this form that sends ``budget`` tokens per view (its ``{K}``), or ``None`` when it has no ``{K}``
        or needs other values too."""
        if "K" not in self.placeholders or set(self.required) - {"K"}:
            return None
        return self.format(K=budget)

    def __str__(self) -> str:
        return self.spelling


# ---------------------------------------------------------------------------------------------- settings

SETTING_TYPES = (bool, int, float, str)


@dataclass(frozen=True)
class Setting:
    """One plugin setting: a ``config.json`` key and the training flag of the same name.

    Args:
        key: e.g. ``"mm_tiny_gain"``; must start with ``mm_``.
        type: ``bool``, ``int``, ``float`` or ``str``.
        help: Shown in ``--help``.
        default: What the plugin uses when the key is absent (documentation only: an unset flag stays ``None``
            and is not written, so the plugin's own default applies).
        choices: Accepted values (``str`` settings).
        minimum, maximum: Inclusive bounds (numeric settings).
        runtime: The setting may change after loading, without retraining (e.g. the token count of a nested
            query compressor); see :func:`llava.model.multimodal_projector.registry.apply_runtime_settings`.
    """

    key: str
    type: type
    help: str = ""
    default: Any = None
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    runtime: bool = False

    def __post_init__(self) -> None:
        if not self.key.startswith("mm_") or not self.key.isidentifier():
            raise ValueError(f"a plugin setting key must be an identifier starting with 'mm_', got {self.key!r}")
        if self.type not in SETTING_TYPES:
            raise ValueError(f"setting {self.key!r} has type {self.type!r}; expected one of bool, int, float, str")

    def parse(self, value: Any) -> Any:
        """``value`` (from a flag or ``config.json``) as this setting's type, checked; ``None`` stays ``None``.

        Strings are converted (booleans by :func:`parse_bool`); a bool is never an int or float, and a float with a
        fraction is never an int.

        Raises:
            ValueError: One sentence naming the key, the value and what is accepted.
        """
        if value is None:
            return None
        parsed = _convert(self.type, value)
        if parsed is None:
            raise ValueError(f"{self.key} must be {_TYPE_WORDS[self.type]}, got {value!r}")
        if self.choices is not None and parsed not in self.choices:
            raise ValueError(f"{self.key} must be one of {list(self.choices)}, got {value!r}")
        if self.type in (int, float):
            low = -math.inf if self.minimum is None else self.minimum
            high = math.inf if self.maximum is None else self.maximum
            if not low <= parsed <= high:
                raise ValueError(f"{self.key} must be between {low:g} and {high:g}, got {value!r}")
        return parsed

    @property
    def description(self) -> str:
        """``help`` plus the default and accepted values, for ``--help``."""
        parts = [self.help] if self.help else []
        if self.default is not None:
            parts.append(f"default: {self.default}")
        if self.choices is not None:
            parts.append("one of " + ", ".join(map(str, self.choices)))
        return "; ".join(parts)


_TYPE_WORDS = {bool: f"a boolean ({BOOLEAN_WORDS})", int: "an integer", float: "a number", str: "a string"}


def _convert(kind: type, value: Any) -> Any:
    """``value`` as ``kind``, or ``None`` when it is not one."""
    if kind is bool:
        return parse_bool(value)
    if kind is int:
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
            return int(value)
        return None
    if kind is float:
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            return float(value) if math.isfinite(value) else None
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return None
            return number if math.isfinite(number) else None
        return None
    return value if isinstance(value, str) else None


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


# ---------------------------------------------------------------------------------------------- cost
# Counted in llava's FLOP convention (the statement: llava.cost.flops.CONVENTION): 1 multiply-add = 2 FLOPs for every
# matrix product, attention scores only when asked, elementwise add/mul (1 per element) inside a compressor only.

LMHead = Literal["all", "last"]


@dataclass(frozen=True)
class LMDims:
    """What the FLOPs of a decoder-only LLM (Llama, Qwen2) depend on."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_config(cls, cfg: Any) -> LMDims:
        """From a ``LlamaConfig`` or ``Qwen2Config`` (grouped-query attention via ``num_key_value_heads``)."""
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        return cls(
            hidden=cfg.hidden_size, intermediate=cfg.intermediate_size, layers=cfg.num_hidden_layers, heads=heads,
            kv_heads=getattr(cfg, "num_key_value_heads", None) or heads, head_dim=head_dim, vocab=cfg.vocab_size,
        )

    def capped(self, layers: int | None) -> LMDims:
        return self if layers is None else replace(self, layers=min(layers, self.layers))


def linear_flops(tokens: int, d_in: int, d_out: int) -> int:
    """``Linear(d_in, d_out)`` on ``tokens`` rows: ``2·T·d_in·d_out`` (bias add not counted)."""
    return 2 * tokens * d_in * d_out


def attention_score_flops(q_tokens: int, k_tokens: int, heads: int, head_dim: int) -> int:
    """``QKᵀ`` and ``A·V`` over the full ``Tq x Tk`` matrix: ``2 · 2·Tq·Tk·heads·head_dim``."""
    return 4 * q_tokens * k_tokens * heads * head_dim


def projector_flops(tokens: int, d_in: int, d_hidden: int, depth: int = 2) -> dict[str, int]:
    """``mlp{depth}x_gelu`` on ``tokens`` tokens: ``Linear(d_in, h)`` then ``depth-1`` x ``Linear(h, h)``."""
    out = {"linear_1": linear_flops(tokens, d_in, d_hidden)}
    for i in range(2, depth + 1):
        out[f"linear_{i}"] = linear_flops(tokens, d_hidden, d_hidden)
    return out


def llm_prefill_flops(dims: LMDims, tokens: int, *, count_attention: bool = False, lm_head: LMHead = "all") -> dict[str, int]:
    """One prefill forward over ``tokens`` positions.

    Per layer: q and o ``2·T·h·(heads·hd)``, k and v ``2·T·h·(kv_heads·hd)`` (grouped-query attention),
    SwiGLU gate/up/down ``3·2·T·h·m``; with ``count_attention`` the scores over all query heads
    ``4·T²·heads·hd`` (full matrix, as dense kernels compute it). ``lm_head``: logits for ``all`` positions
    (what transformers 4.37's prefill computed, so what a profiler of that era saw) or the ``last`` one.
    """
    if lm_head not in ("all", "last"):
        raise ValueError(f"unknown lm_head accounting {lm_head!r}; expected 'all' or 'last'")
    h, q_width, kv_width = dims.hidden, dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
    per_layer_proj = 2 * linear_flops(tokens, h, q_width) + 2 * linear_flops(tokens, h, kv_width)
    return {
        "attention_proj": dims.layers * per_layer_proj,
        "attention_scores": dims.layers * attention_score_flops(tokens, tokens, dims.heads, dims.head_dim) if count_attention else 0,
        "mlp": dims.layers * 3 * linear_flops(tokens, h, dims.intermediate),
        "lm_head": linear_flops(tokens if lm_head == "all" else 1, h, dims.vocab),
    }


def total(costs: Mapping[str, Any]) -> int:
    """Sum of a flat or nested ``{name: FLOPs}`` mapping."""
    return sum(total(v) if isinstance(v, Mapping) else int(v) for v in costs.values())


#: Compressor parts that are elementwise arithmetic (every other part is a matrix product).
ELEMENTWISE_PARTS = frozenset({"gate", "add", "prior", "selection", "scale"})


def elementwise(costs: Mapping[str, Any]) -> int:
    """The elementwise share of a (nested) cost mapping; ``total(costs) - elementwise(costs)`` is matrix products."""
    return sum(elementwise(v) if isinstance(v, Mapping) else (int(v) if k in ELEMENTWISE_PARTS else 0) for k, v in costs.items())


@dataclass(frozen=True)
class CostSetting:
    """What a module's FLOPs depend on besides its own config.

    Attributes:
        mm_hidden: Vision feature width D (the projector's input).
        lm: The LLM's dimensions (its width is the projector's output; prompt-conditioned modules run it).
        grid: ``(H, W)`` patch grid of one view.
        projector_depth: Linear layers of the ``mlp{N}x_gelu`` projector.
        prompt_tokens: Question tokens a prompt-conditioned module runs through the LLM.
        count_attention: Count attention-score products (``QKᵀ``, ``A·V``) inside the module.
        computation: ``official`` (as the method's authors compute it) or ``ours`` (this project's module, where
            it computes the same result with less work); a count without such a difference ignores it.
        variant: One of the cost model's :attr:`CostModel.variants` (another way to count the same module, e.g. a
            release's own computation), or ``None`` for the method's own count.
        tower_layers: The tower's encoder layers, when the pipeline knows them (the context's tower then has them).
        tower_cls: Whether the tower has a CLS token.
    """

    mm_hidden: int
    lm: LMDims
    grid: tuple[int, int]
    projector_depth: int = 2
    prompt_tokens: int = 7
    count_attention: bool = False
    computation: Literal["official", "ours"] = "official"
    variant: str | None = None
    tower_layers: int | None = None
    tower_cls: bool = True

    @property
    def tokens(self) -> int:
        """N = H·W patch tokens of one view."""
        return self.grid[0] * self.grid[1]

    @property
    def tower(self) -> TowerShape | None:
        """The tower's shape as the cost context gives it to a cost function (``None`` when the depth is unknown)."""
        return None if self.tower_layers is None else TowerShape(tuple(self.grid), self.tower_layers, self.tower_cls)


@dataclass(frozen=True)
class ModuleCost:
    """One type's cost for one view: K, boundary and FLOPs by part (``{part: FLOPs}``, nestable).

    ``module`` is the method and any extra work it causes (a question pass through the LLM); ``projector`` the
    ``mlp{N}x_gelu`` it feeds or follows (empty when the module ends in the LLM's width). The pre-projector figure
    is ``module``, the post-projector figure ``module + projector``. ``method`` is filled in by the cost engine.
    """

    projector_type: str
    tokens: int
    boundary: Boundary
    module: Mapping[str, Any] = field(default_factory=dict)
    projector: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""
    method: str = ""

    @property
    def pre(self) -> int:
        """Pre-projector figure: the module alone."""
        return total(self.module)

    @property
    def post(self) -> int:
        """Post-projector figure: the module plus the projector it feeds or follows."""
        return total(self.module) + total(self.projector)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pre": self.pre, "post": self.post}


@dataclass(frozen=True)
class CostModel:
    """A plugin's cost declaration.

    Attributes:
        module_flops: ``module_flops(context, setting) -> ModuleCost``: the type's FLOPs for one view. ``context`` is
            the :class:`BuildContext` its factory would get for the same config (the match, ``context.setting(key)``),
            ``setting`` the pipeline's :class:`CostSetting`. Refuse a type it cannot count (a budget the grid cannot
            give, an input-dependent token count) with one ``ValueError`` sentence.
        types_at_budget: ``types_at_budget(budget) -> [types]`` sending ``budget`` visual tokens per view, or one
            ``ValueError`` sentence when the method never can. Default: each projector type's ``{K}`` form at the
            budget (:meth:`CompressorPlugin.budget_types`).
        variants: Other ways to count the same module, by label, each with what it counts (e.g. ``{"repository":
            "the release's full T x T score matrix"}``); ``module_flops`` reads the chosen one from ``setting.variant``.
        layer_tokens: For a reducer: ``layer_tokens(build, visual) -> [visual tokens per decoder layer]``, the image
            tokens each of the LLM's ``build.lm.layers`` layers runs on when ``visual`` enter the first (one entry
            per layer, never an average; the cost engine counts every layer at its own count).
    """

    module_flops: Callable[[BuildContext, CostSetting], ModuleCost] | None = None
    types_at_budget: Callable[[int], Sequence[str]] | None = None
    variants: Mapping[str, str] = field(default_factory=dict)
    layer_tokens: Callable[[ReducerBuild, int], Sequence[int]] | None = None


# ---------------------------------------------------------------------------------------------- views (the demo panel)


@dataclass(frozen=True)
class ViewInputs:
    """What a view gets for one image (prepared by :func:`llava.serve.panels.compute_view`).

    Attributes:
        image: ``[h, w, 3]`` float64 numpy array in [0, 1]: the model's input image (after the checkpoint's padding
            and resizing), de-normalised back to RGB.
        features: ``[1, T, D]`` the tower's select-layer features, on the projector's device and dtype.
        grid: ``(H, W)`` patch grid.
        tokens_sent: K, visual tokens per image the model sends to the LLM.
        model: The whole model, for views that need more than the features.
        pixels: ``[1, 3, h, w]`` the model input itself (for views that ask the tower for more, e.g. attention).
    """

    image: Any
    features: torch.Tensor
    grid: tuple[int, int]
    tokens_sent: int
    model: Any = None
    pixels: torch.Tensor | None = None

    @property
    def tokens_uncompressed(self) -> int:
        """N = H·W, what an uncompressed projector (e.g. mlp2x_gelu) sends."""
        return self.grid[0] * self.grid[1]


@dataclass(frozen=True)
class Picture:
    """One picture of the panel: ``image`` (``[h, w, 3]`` in [0, 1]) with an optional ``[H, W]`` heat map over the grid."""

    title: str
    image: Any
    heat: Any = None


@dataclass(frozen=True)
class CompressorView:
    """A method's panel for one image (drawn with :mod:`llava.serve.panels`' picture helpers).

    Attributes:
        summary: One Markdown line (see :func:`llava.serve.panels.tokens_summary`).
        pictures: What to draw, in order.
        help: Markdown shown under the picture: how to read it.
        details: JSON-able numbers for the worker's answer (e.g. the budget split).
        arrays: The arrays behind the pictures (e.g. weight maps), for in-process callers and tests.
    """

    summary: str
    pictures: tuple[Picture, ...]
    help: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)
    arrays: Mapping[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- the declaration

_METHOD_NAME = re.compile(r"[a-z][a-z0-9]*")


@dataclass(frozen=True)
class CompressorPlugin:
    """The declaration of one method (docs/PLUGINS.md).

    Args:
        name: The method's one name (lower-case letters and digits, e.g. ``"mypool"``): its rows in the cost and
            comparison tables, its demo panel, messages and flag help.
        projectors: Its ``projector``-kind types (:meth:`ProjectorType.named`).
        settings: Config keys / training flags.
        key_prefixes: Config-key prefixes the plugin owns; an undeclared key with one of them is an error.
        run_defaults: ``run_defaults(RunInfo) -> {key: value}`` for settings the user did not give.
        callbacks: ``callbacks(model) -> list[TrainerCallback]`` for a model that uses this plugin.
        needs: What its projectors need from the model, unless a factory returns its own (:class:`ModelNeeds`).
        boundary: ``"pre"`` (compresses tower features, then projects) or ``"post"`` (runs on projected tokens).
        view: ``view(projector, ViewInputs) -> CompressorView | None`` for the demo panel.
        cost: Its :class:`CostModel` (``None``: its cost cannot be counted).
        showcase: Types a first comparison should show (the quickstart's default list).
        video_showcase: The same for a first comparison on videos (the video quickstart's default list).
        reference_scores: Published benchmark scores by name (``{"paper-vanilla": {"gqa": 62.9, ...}}``), which
            ``llava.eval.summarize --baseline NAME`` and ``llava.eval.compare --vanilla NAME`` accept.
        tokens_depend_on_image: Whether the number of tokens per view depends on the image (adaptive selection):
            a bool, or ``tokens_depend_on_image(config) -> bool``. Such a projector cannot feed a merge that needs
            the same count in every view (AnyRes ``spatial``), which is refused before training or loading.
    """

    name: str
    projectors: tuple[ProjectorType, ...]
    settings: tuple[Setting, ...] = ()
    key_prefixes: tuple[str, ...] = ()
    run_defaults: Callable[[RunInfo], dict[str, Any]] | None = None
    callbacks: Callable[[Any], list[Any]] | None = None
    needs: ModelNeeds = ModelNeeds()
    boundary: Boundary = "pre"
    view: Callable[[Any, ViewInputs], CompressorView | None] | None = None
    cost: CostModel | None = None
    showcase: tuple[str, ...] = ()
    video_showcase: tuple[str, ...] = ()
    reference_scores: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    tokens_depend_on_image: bool | Callable[[Any], bool] = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _METHOD_NAME.fullmatch(self.name):
            raise ValueError(f"a method's name is lower-case letters and digits, one word (e.g. 'mypool'), got {self.name!r}")
        if self.boundary not in BOUNDARIES:
            raise ValueError(f"plugin {self.name!r} has boundary {self.boundary!r}; expected 'pre' or 'post'")
        if not isinstance(self.needs, ModelNeeds):
            raise ValueError(f"plugin {self.name!r} declares needs {self.needs!r}; expected a ModelNeeds (a factory returns needs that depend on settings)")
        keys = [setting.key for setting in self.settings]
        if len(set(keys)) != len(keys):
            raise ValueError(f"plugin {self.name!r} declares a setting key twice: {sorted(keys)}")
        outside = [key for key in keys if self.key_prefixes and not key.startswith(self.key_prefixes)]
        if outside:
            raise ValueError(f"plugin {self.name!r} settings {outside} do not start with its key_prefixes {self.key_prefixes}")
        for prefix in self.key_prefixes:
            if not prefix.startswith("mm_") or prefix in ("mm_", "mm_vision_", "mm_projector_"):
                raise ValueError(f"plugin {self.name!r} cannot own the key prefix {prefix!r}; use a prefix of its own")
        unknown = [name for name in (*self.showcase, *self.video_showcase) if not self.matches(name)]
        if unknown:
            raise ValueError(f"plugin {self.name!r} showcases {unknown}, which none of its projector patterns matches")

    def types(self, kind: str = "projector") -> tuple[ProjectorType, ...]:
        """Its declared types of ``kind`` (one of :data:`PLUGIN_KINDS`)."""
        if kind not in PLUGIN_KINDS:
            raise ValueError(f"unknown plugin kind {kind!r}; expected one of {list(PLUGIN_KINDS)}")
        return self.projectors if kind == "projector" else ()

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(setting.key for setting in self.settings)

    def setting(self, key: str) -> Setting:
        for setting in self.settings:
            if setting.key == key:
                return setting
        raise KeyError(key)

    def matches(self, projector_type: str) -> bool:
        return any(re.fullmatch(entry.pattern, projector_type) for entry in self.projectors)

    def owns(self, key: str) -> bool:
        return key in self.keys or (bool(self.key_prefixes) and key.startswith(self.key_prefixes))

    def budget_types(self, budget: int) -> list[str]:
        """Its types sending ``budget`` tokens per view: the declared ``cost.types_at_budget``, else every type's
        ``{K}`` form at the budget (empty: the method is not one of a budget, e.g. upstream's projectors).

        Raises:
            ValueError: One sentence, when the method cannot give ``budget`` at all.
        """
        declared = self.cost.types_at_budget if self.cost is not None else None
        if declared is not None:
            return list(declared(budget))
        return [name for entry in self.projectors if (name := entry.budget_name(budget)) is not None]

    @property
    def takes_budget(self) -> bool:
        """Whether the method gives types per visual-token budget (a compressor, in ``--projector all``)."""
        declared = self.cost is not None and self.cost.types_at_budget is not None
        return declared or any(entry.form is not None and entry.form.budget_name(1) is not None for entry in self.projectors)

    def check_config(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Check this plugin's keys in a flat config mapping; returns ``{key: parsed value}`` of the present ones.

        Raises:
            ValueError: For an undeclared key with one of ``key_prefixes`` (naming the closest declared key) or a
                value :meth:`Setting.parse` refuses.
        """
        parsed: dict[str, Any] = {}
        for key, value in values.items():
            if not self.owns(key):
                continue
            if key not in self.keys:
                close = difflib.get_close_matches(key, self.keys, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(self.keys)}"
                raise ValueError(f"{key!r} is not a setting of the {self.name!r} compressor{hint}")
            parsed[key] = self.setting(key).parse(value)
        return parsed


# ---------------------------------------------------------------------------------------------- the in-LLM reducer

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
        if not isinstance(self.name, str) or not _METHOD_NAME.fullmatch(self.name):
            raise ValueError(f"a method's name is lower-case letters and digits, one word (e.g. 'mydrop'), got {self.name!r}")
        unknown = [name for name in self.showcase if self.match(name) is None]
        if unknown:
            raise ValueError(f"reducer plugin {self.name!r} showcases {unknown}, which none of its forms matches")

    def types(self, kind: str = "reducer") -> tuple[ReducerType, ...]:
        if kind not in PLUGIN_KINDS:
            raise ValueError(f"unknown plugin kind {kind!r}; expected one of {list(PLUGIN_KINDS)}")
        return self.reducers if kind == "reducer" else ()

    def match(self, name: str) -> tuple[ReducerType, dict[str, int]] | None:
        """The type ``name`` is of and its values, or ``None``."""
        for entry in self.reducers:
            values = entry.form.parse(name)
            if values is not None:
                return entry, values
        return None
