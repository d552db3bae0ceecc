"""Braco configuration: one frozen dataclass, the paper's budget presets, and the ``mm_*`` config keys.

Precedence when a coder is built from a LLaVA model config: the preset named by the projector type
(``braco_c3s7``, ``braco_k16``) < keys stored in ``config.json`` < explicit keyword overrides.

Config keys: the options the official implementation has are stored under its ``mm_fourier_*`` names
(braco-official §2), so one vocabulary serves both; options only this project has use ``mm_braco_*``.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping

from .coordinates import COORDINATE_ALIASES, COORDINATE_MODES, canonical_coordinates, resolve_coordinates
from .embedding import EMBEDDINGS
from .residual import check_selection
from .schedule import SCHEDULES

__all__ = [
    "BracoConfig", "BRACO_BUDGETS", "allocate_budget", "budget_preset", "MM_KEYS", "NAME_PATTERN", "OFFICIAL_BUILDER_DEFAULTS",
    "parse_name",
]

#: The paper's main-table allocations (App. "Main Braco configurations"): K -> (C, S, coordinates).
BRACO_BUDGETS: dict[int, tuple[int, int, str]] = {
    4: (1, 3, "coef"),
    9: (2, 5, "coef"),
    16: (3, 7, "coef"),
    25: (4, 9, "idct"),
}

_PRIORS = ("grad", "none")


def allocate_budget(tokens: int) -> tuple[int, int]:
    """Split a total budget ``K`` into ``(C, S)`` with ``K = C² + S``.

    Table budgets use the paper's allocation. Any other ``K ≥ 1`` follows the rule the table obeys:
    ``C = max(⌊√K⌋ - 1, 1)`` and ``S = K - C²`` (so 10 → c2s6, 36 → c5s11, 1 → c1s0).
    """
    if not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"token budget must be a positive integer, got {tokens!r}")
    if tokens in BRACO_BUDGETS:
        c, s, _ = BRACO_BUDGETS[tokens]
        return c, s
    c = max(math.isqrt(tokens) - 1, 1)
    return c, tokens - c * c


def budget_preset(tokens: int) -> dict[str, Any]:
    """The fields a total budget K fixes: ``cutoff``, ``residual_tokens`` and ``coordinates`` (the table's
    mode for 4/9/16/25, ``auto`` for any other K)."""
    cutoff, residual = allocate_budget(tokens)
    coordinates = BRACO_BUDGETS[tokens][2] if tokens in BRACO_BUDGETS else "auto"
    return {"cutoff": cutoff, "residual_tokens": residual, "coordinates": coordinates}


@dataclass(frozen=True)
class BracoConfig:
    """Everything that defines a Braco coder. Defaults are the paper's main configuration (c3s7).

    Args:
        cutoff: C, retained DCT frequencies per axis; ``C²`` backbone tokens (main table: 1/2/3/4).
        residual_tokens: S, spatial residual tokens (main table: 3/5/7/9).
        coordinates: ``auto`` (coef below C² = 16, idct from there), ``coef`` (alias ``vanilla``), ``idct``,
            ``randrot``.
        embedding: basis-coordinate embedding: ``polar`` (paper), ``learned``, ``sincos2d``, ``none``.
        num_freqs: F Fourier bands ``2^k`` (paper: 8, so 32 features).
        include_raw: prepend ``[r, sin θ, cos θ]`` to the polar features (paper: off).
        pe_scale_init: initial embedding gate α (paper: 0.1).
        prior: ``grad`` (standardised gradient-energy prior, paper) or ``none``.
        prior_weight_init: initial prior weight (paper: 0.0, learnable).
        selection: ``sparsemax`` (paper), ``softmax``, ``entmax15`` or ``entmax:<alpha>``.
        scorer_hidden_mult: scorer hidden width as a multiple of d (paper: 1); ``≤ 0`` = one linear layer.
        residual_norm: LayerNorm on the pooled residual tokens (paper: on).
        residual_scale_init: initial learnable residual scale (paper: 1.0).
        temperature: sparsemax temperature when no schedule is active, i.e. at inference (paper: 0.8).
        temperature_mul: extra factor on the temperature (official ``spatial_temp_mul``, 1.0).
        temp_start, temp_end, temp_steps, temp_schedule: annealing (paper: cosine 2.0→1.2 in stage 1,
            1.2→0.8 in stage 2); unset start/end or ``temp_steps ≤ 0`` disables it.
        detach_dct: no gradient into the tokens through the DCT backbone (official default: on).
        post_concat_norm, post_concat_norm_eps: LayerNorm over all output tokens (paper: off).
        rotation_seed: seed of the fixed ``randrot`` rotation.
    """

    cutoff: int = 3
    residual_tokens: int = 7
    coordinates: str = "auto"
    embedding: str = "polar"
    num_freqs: int = 8
    include_raw: bool = False
    pe_scale_init: float = 0.1
    prior: str = "grad"
    prior_weight_init: float = 0.0
    selection: str = "sparsemax"
    scorer_hidden_mult: float = 1
    residual_norm: bool = True
    residual_scale_init: float = 1.0
    temperature: float = 0.8
    temperature_mul: float = 1.0
    temp_start: float | None = None
    temp_end: float | None = None
    temp_steps: int = 0
    temp_schedule: str = "cosine"
    detach_dct: bool = True
    post_concat_norm: bool = False
    post_concat_norm_eps: float = 1e-5
    rotation_seed: int = 0

    def __post_init__(self) -> None:
        for name in ("cutoff", "residual_tokens", "num_freqs", "temp_steps", "rotation_seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if self.cutoff < 0:
            raise ValueError(f"cutoff C must be >= 0, got {self.cutoff}")
        if self.residual_tokens < 0:
            raise ValueError(f"residual_tokens S must be >= 0, got {self.residual_tokens}")
        if self.cutoff == 0 and self.residual_tokens == 0:
            raise ValueError("cutoff C and residual_tokens S are both 0; a coder must output at least one token")
        object.__setattr__(self, "coordinates", canonical_coordinates(self.coordinates))
        if self.embedding not in EMBEDDINGS:
            raise ValueError(f"unknown embedding {self.embedding!r}; expected one of {list(EMBEDDINGS)}")
        if self.num_freqs < 1:
            raise ValueError(f"num_freqs must be >= 1, got {self.num_freqs}")
        if self.prior not in _PRIORS:
            raise ValueError(f"unknown spatial prior {self.prior!r}; expected one of {list(_PRIORS)}")
        check_selection(self.selection)
        if self.temp_schedule not in SCHEDULES:
            raise ValueError(f"unknown temperature schedule {self.temp_schedule!r}; expected one of {list(SCHEDULES)}")
        _check_positive_finite("temperature", self.temperature)
        _check_positive_finite("temperature_mul", self.temperature_mul)
        for name in ("temp_start", "temp_end"):
            if getattr(self, name) is not None:
                _check_positive_finite(name, getattr(self, name))
        for name in _BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a boolean (True or False), got {getattr(self, name)!r}")
        for name in ("pe_scale_init", "prior_weight_init", "residual_scale_init", "scorer_hidden_mult"):
            _check_number(name, getattr(self, name))
        _check_positive_finite("post_concat_norm_eps", self.post_concat_norm_eps)
        if self.rotation_seed < 0:
            raise ValueError(f"rotation_seed must be >= 0, got {self.rotation_seed}")

    # -- derived -------------------------------------------------------------------------------------
    @property
    def backbone_tokens(self) -> int:
        """K_b = C²."""
        return self.cutoff * self.cutoff

    @property
    def output_tokens(self) -> int:
        """K = C² + S."""
        return self.backbone_tokens + self.residual_tokens

    @property
    def resolved_coordinates(self) -> str:
        """``coef``, ``idct`` or ``randrot`` after resolving ``auto``."""
        return resolve_coordinates(self.coordinates, self.cutoff)

    @property
    def is_annealed(self) -> bool:
        return self.temp_start is not None and self.temp_end is not None and self.temp_steps > 0

    @property
    def name(self) -> str:
        """The projector name that rebuilds this allocation, e.g. ``c3s7`` or ``c4s9_idct``."""
        base = f"c{self.cutoff}s{self.residual_tokens}"
        return base if self.coordinates == "auto" else f"{base}_{self.coordinates}"

    # -- constructors --------------------------------------------------------------------------------
    @classmethod
    def from_budget(cls, tokens: int, **overrides: Any) -> "BracoConfig":
        """The paper's allocation for a total budget K (4/9/16/25), or the documented rule for any K."""
        return cls(**{**budget_preset(tokens), **overrides})

    @classmethod
    def from_name(cls, name: str, **overrides: Any) -> "BracoConfig":
        """Parse ``c{C}s{S}[_coef|_idct|_randrot|_vanilla]`` or ``k{K}`` (a ``braco_`` prefix is accepted)."""
        return cls(**{**parse_name(name)[0], **overrides})

    def replace(self, **changes: Any) -> "BracoConfig":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: The Braco name grammar: ``c{C}s{S}`` with an optional coordinate suffix, or ``k{K}`` (a total budget). Projector
#: types are these names with the ``braco_`` prefix, declared as the plugin API's name forms in
#: :mod:`braco_patch.llava_plugin` (a core unit imports no llava; tests/braco_patch/test_names.py holds the two equal).
NAME_PATTERN = re.compile(
    r"(?:c(?P<c>\d+)s(?P<s>\d+)(?:_(?P<mode>"
    + "|".join([mode for mode in COORDINATE_MODES if mode != "auto"] + list(COORDINATE_ALIASES))
    + r"))?|k(?P<k>\d+))"
)
PROJECTOR_PREFIX = "braco_"


def parse_name(name: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Parse ``c{C}s{S}[_coef|_idct|_randrot|_vanilla]`` or ``k{K}`` (a ``braco_`` prefix is accepted).

    Returns:
        ``(fields the name fixes, names of those fields)``: C and S always; the coordinates when the name has
        a suffix or is a budget (otherwise ``auto``, which stored keys may override).

    Raises:
        ValueError: If ``name`` does not follow the grammar.
    """
    match = NAME_PATTERN.fullmatch(name.removeprefix(PROJECTOR_PREFIX))
    if match is None:
        raise ValueError(
            f"cannot parse Braco name {name!r}; expected 'c<C>s<S>' with an optional '_coef', '_idct' or "
            f"'_randrot' suffix, or 'k<K>', e.g. 'c3s7', 'c4s9_idct', 'k16'"
        )
    if match.group("k") is not None:
        return budget_preset(int(match.group("k"))), ("cutoff", "residual_tokens", "coordinates")
    fields = {
        "cutoff": int(match.group("c")),
        "residual_tokens": int(match.group("s")),
        "coordinates": canonical_coordinates(match.group("mode") or "auto"),
    }
    return fields, ("cutoff", "residual_tokens", "coordinates") if match.group("mode") else ("cutoff", "residual_tokens")


# -- config.json keys --------------------------------------------------------------------------------

#: Config key -> BracoConfig field for keys that map one to one.
MM_KEYS: dict[str, str] = {
    "mm_fourier_C": "cutoff",
    "mm_fourier_spatial_keep": "residual_tokens",
    "mm_fourier_detach_dct": "detach_dct",
    "mm_fourier_temperature": "temperature",
    "mm_fourier_temp_start": "temp_start",
    "mm_fourier_temp_end": "temp_end",
    "mm_fourier_temp_steps": "temp_steps",
    "mm_fourier_temp_schedule": "temp_schedule",
    "mm_fourier_polar_num_freqs": "num_freqs",
    "mm_fourier_polar_include_raw": "include_raw",
    "mm_fourier_polar_pe_scale_init": "pe_scale_init",
    "mm_fourier_spatial_use_norm": "residual_norm",
    "mm_fourier_spatial_scale_init": "residual_scale_init",
    "mm_fourier_spatial_hidden_mult": "scorer_hidden_mult",
    "mm_fourier_spatial_selection_norm": "selection",
    "mm_fourier_spatial_temp_mul": "temperature_mul",
    "mm_fourier_spatial_prior": "prior",
    "mm_fourier_spatial_prior_weight_init": "prior_weight_init",
    "mm_fourier_post_concat_norm": "post_concat_norm",
    "mm_fourier_post_concat_norm_eps": "post_concat_norm_eps",
    "mm_braco_coordinates": "coordinates",
    "mm_braco_embedding": "embedding",
    "mm_braco_rotation_seed": "rotation_seed",
}

#: What the official LLaVA builder assumes for an absent ``mm_fourier_*`` key (braco-official §2), as
#: BracoConfig fields. One deliberate difference: an absent ``mm_fourier_use_polar_pe`` means the paper's
#: polar embedding here, not "off" (the official default would silently drop the embedding).
OFFICIAL_BUILDER_DEFAULTS: dict[str, Any] = {
    "cutoff": 16,
    "residual_tokens": 0,
    "temp_start": 1.5,
    "temp_end": 0.3,
    "temp_steps": 2000,
    "coordinates": "coef",
}

_SPECIAL_KEYS = ("mm_fourier_use_polar_pe", "mm_fourier_low_idct", "mm_fourier_K_high", "mm_fourier_spatial_method")


def fields_from_mm_keys(values: Mapping[str, Any]) -> dict[str, Any]:
    """BracoConfig fields stored in a flat ``mm_*`` mapping (absent or ``None`` keys are skipped)."""
    out: dict[str, Any] = {}
    for key, field in MM_KEYS.items():
        if values.get(key) is not None:
            out[field] = read_bool(key, values[key]) if field in _BOOL_FIELDS else values[key]
    if values.get("mm_fourier_K_high") not in (None, 0):
        raise ValueError(f"mm_fourier_K_high must be 0 (high-frequency tokens are not part of Braco), got {values['mm_fourier_K_high']!r}")
    if values.get("mm_fourier_spatial_method") not in (None, "learned"):
        raise ValueError(f"mm_fourier_spatial_method must be 'learned', got {values['mm_fourier_spatial_method']!r}")
    if values.get("mm_fourier_use_polar_pe") is not None and "embedding" not in out:
        out["embedding"] = "polar" if read_bool("mm_fourier_use_polar_pe", values["mm_fourier_use_polar_pe"]) else "none"
    if values.get("mm_fourier_low_idct") is not None and "coordinates" not in out:
        out["coordinates"] = "idct" if read_bool("mm_fourier_low_idct", values["mm_fourier_low_idct"]) else "coef"
    return out


def to_mm_keys(cfg: BracoConfig) -> dict[str, Any]:
    """Every key needed to rebuild ``cfg`` from ``config.json``: official names where they exist."""
    values = asdict(cfg)
    out = {key: values[field] for key, field in MM_KEYS.items()}
    out["mm_fourier_K_high"] = 0
    out["mm_fourier_spatial_method"] = "learned"
    out["mm_fourier_use_polar_pe"] = cfg.embedding == "polar"
    out["mm_fourier_low_idct"] = cfg.resolved_coordinates == "idct"
    return out


_BOOL_FIELDS = ("include_raw", "residual_norm", "detach_dct", "post_concat_norm")


def _is_number(value: Any) -> bool:
    """A real int or float (a bool or a numeric string is not: config values keep their JSON type)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_number(name: str, value: Any) -> None:
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def _check_positive_finite(name: str, value: Any) -> None:
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def read_bool(key: str, value: Any) -> bool:
    """A boolean ``mm_*`` value, which must already be a bool.

    Words from flags and ``config.json`` (``"false"``, ``"no"``) are parsed where they enter, by the LLaVA
    plugin's settings (one boolean rule for the whole project); this core unit only refuses what is not a bool,
    so that ``"false"`` can never read as true.

    Raises:
        ValueError: Naming ``key`` for anything but ``True`` or ``False``.
    """
    if isinstance(value, bool):
        return value
    raise ValueError(f"{key} must be a boolean (True or False), got {value!r}")


