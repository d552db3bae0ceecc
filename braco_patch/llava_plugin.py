"""The one seam between Braco and LLaVA: Braco's :class:`CompressorPlugin` declaration.

Loaded through the ``llava.projectors`` entry point (setup.py), so upstream-style scripts need no import
edits. It declares:

- projector types ``braco_c{C}s{S}`` with an optional ``_coef``/``_idct``/``_randrot``/``_vanilla`` suffix
  (default ``auto``) and ``braco_k{K}`` (the paper's allocation for K ∈ {4, 9, 16, 25}, the documented rule for
  any other K), one pattern built from :data:`braco_patch.config.NAME_PATTERN`; and ``fourier_mlp{N}x_gelu``,
  the official implementation's type, configured by its ``mm_fourier_*`` keys with the official builder's
  defaults for absent keys (except that an absent ``mm_fourier_use_polar_pe`` means the paper's embedding);
- its settings: the official ``mm_fourier_*`` keys and this project's ``mm_braco_*`` keys (:data:`MM_KEYS`), each a
  training flag and a ``config.json`` key;
- the paper's per-stage temperature schedule as run defaults, and the annealing callback;
- needs: only the select layer, on a square grid; boundary ``pre``;
- its demo view (:mod:`braco_patch.view`): the DCT low-pass picture and the residual weight maps;
- its cost model: the coder's FLOPs per paper step (:mod:`braco_patch.cost.coder_flops`) and ``braco_k{K}`` per budget.

Each type builds ``Sequential(coder, Linear(mm_hidden, hidden), GELU, Linear(hidden, hidden))`` (indices 0–3,
the official checkpoint layout) and returns the resolved keys for the model config, so ``config.json`` rebuilds the
same module with no flags.
"""

from __future__ import annotations

from typing import Any

import torch.nn as nn

from llava.cost.module import CostModel
from llava.model.multimodal_projector.builder import mlp_projector
from llava.model.multimodal_projector.plugins import (
    BuildContext,
    BuiltProjector,
    CompressorPlugin,
    ModelNeeds,
    ProjectorType,
    RunInfo,
    Setting,
    register_plugin,
)

from .callbacks import BracoAnnealCallback
from .coder import BracoCoder
from .config import (
    MM_KEYS,
    OFFICIAL_BUILDER_DEFAULTS,
    OFFICIAL_PATTERN,
    PROJECTOR_PATTERN,
    PROJECTOR_PREFIX,
    BracoConfig,
    fields_from_mm_keys,
    parse_name,
    to_mm_keys,
)
from .coordinates import COORDINATE_ALIASES, COORDINATE_MODES, canonical_coordinates
from .embedding import EMBEDDINGS
from .paper_scores import REFERENCE_SCORES
from .schedule import DEFAULT_SCHEDULE, SCHEDULES, STAGE_TEMPERATURES, annealed_coders

__all__ = ["PLUGIN", "braco_config_from_model_config", "build_braco_projector"]

TEMPERATURE_KEYS = ("mm_fourier_temp_start", "mm_fourier_temp_end", "mm_fourier_temp_steps", "mm_fourier_temp_schedule")

_HELP = {
    "mm_fourier_C": "C, retained DCT frequencies per axis (C x C backbone tokens)",
    "mm_fourier_spatial_keep": "S, spatial residual tokens",
    "mm_fourier_detach_dct": "no gradient into the tower features through the DCT backbone",
    "mm_fourier_temperature": "sparsemax temperature when no schedule is active",
    "mm_fourier_temp_start": "sparsemax temperature at step 0 (default: 2.0 in stage 1, 1.2 in stage 2)",
    "mm_fourier_temp_end": "temperature reached at temp_steps (default: 1.2 in stage 1, 0.8 in stage 2)",
    "mm_fourier_temp_steps": "schedule length in optimizer steps (default: this run's total steps)",
    "mm_fourier_temp_schedule": "temperature schedule (default: cosine)",
    "mm_fourier_polar_num_freqs": "Fourier bands of the polar basis-coordinate embedding",
    "mm_fourier_polar_include_raw": "prepend [r, sin θ, cos θ] to the polar features",
    "mm_fourier_polar_pe_scale_init": "initial embedding gate",
    "mm_fourier_spatial_use_norm": "LayerNorm on the residual tokens",
    "mm_fourier_spatial_scale_init": "initial residual scale",
    "mm_fourier_spatial_hidden_mult": "scorer hidden width / d (<= 0: one linear layer)",
    "mm_fourier_spatial_selection_norm": "sparsemax, softmax, entmax15 or entmax:<alpha>",
    "mm_fourier_spatial_temp_mul": "extra factor on the temperature",
    "mm_fourier_spatial_prior": "gradient-energy prior of the residual scorer",
    "mm_fourier_spatial_prior_weight_init": "initial prior weight",
    "mm_fourier_post_concat_norm": "LayerNorm over all output tokens",
    "mm_fourier_post_concat_norm_eps": "epsilon of that LayerNorm",
    "mm_braco_coordinates": "coordinate organisation of the backbone tokens",
    "mm_braco_embedding": "basis-coordinate embedding",
    "mm_braco_rotation_seed": "seed of the randrot rotation",
    "mm_fourier_use_polar_pe": "official switch for the polar embedding (mm_braco_embedding polar / none)",
    "mm_fourier_low_idct": "official switch for idct coordinates (mm_braco_coordinates idct / coef)",
    "mm_fourier_K_high": "official high-frequency token count; must be 0",
    "mm_fourier_spatial_method": "official residual method; must be 'learned'",
}

_CHOICES: dict[str, tuple[Any, ...]] = {
    "mm_fourier_temp_schedule": SCHEDULES,
    "mm_fourier_spatial_prior": ("grad", "none"),
    "mm_braco_coordinates": COORDINATE_MODES + tuple(COORDINATE_ALIASES),
    "mm_braco_embedding": tuple(EMBEDDINGS),
    "mm_fourier_K_high": (0,),
    "mm_fourier_spatial_method": ("learned",),
}
_MINIMUM = {"mm_fourier_C": 0, "mm_fourier_spatial_keep": 0, "mm_fourier_temp_steps": 0, "mm_fourier_polar_num_freqs": 1,
            "mm_braco_rotation_seed": 0}
_OFFICIAL_SWITCHES = {"mm_fourier_use_polar_pe": bool, "mm_fourier_low_idct": bool, "mm_fourier_K_high": int,
                      "mm_fourier_spatial_method": str}


def _settings() -> tuple[Setting, ...]:
    defaults = BracoConfig().to_dict()
    types = {"scorer_hidden_mult": float, "temp_start": float, "temp_end": float}
    out = []
    for key, field in MM_KEYS.items():
        kind = types.get(field, type(defaults[field]))
        # C and S come from the projector name; their dataclass defaults would mislead in --help.
        default = None if field in ("cutoff", "residual_tokens") else defaults[field]
        out.append(Setting(key, kind, _HELP[key], default, _CHOICES.get(key), _MINIMUM.get(key)))
    for key, kind in _OFFICIAL_SWITCHES.items():
        out.append(Setting(key, kind, _HELP[key], choices=_CHOICES.get(key)))
    return tuple(out)


SETTINGS = _settings()


def _stored_keys(config: Any) -> dict[str, Any]:
    """The Braco keys set in ``config``, each parsed by its declared setting (``"no"`` is ``False``)."""
    values = {setting.key: getattr(config, setting.key, None) for setting in SETTINGS}  # MM_KEYS, then the official switches
    return {setting.key: setting.parse(values[setting.key]) for setting in SETTINGS if values[setting.key] is not None}


def braco_config_from_model_config(config: Any, projector_type: str, **overrides: Any) -> BracoConfig:
    """Resolve a :class:`BracoConfig`: name preset < ``mm_*`` keys in ``config`` < ``overrides``.

    For ``braco_*`` names the name fixes C and S (and the coordinates when it has a suffix or is a budget);
    stored keys that contradict it are an error rather than a silent override.
    """
    stored = fields_from_mm_keys(_stored_keys(config))
    if not projector_type.startswith(PROJECTOR_PREFIX):
        return BracoConfig(**{**OFFICIAL_BUILDER_DEFAULTS, **stored, **overrides})
    preset, fixed = parse_name(projector_type)
    for field in fixed:
        value = stored.get(field)
        if value is not None and (canonical_coordinates(value) if field == "coordinates" else value) != preset[field]:
            raise ValueError(
                f"config.json says {field}={value!r} but mm_projector_type {projector_type!r} means "
                f"{field}={preset[field]!r}; fix one of them"
            )
    return BracoConfig(**{**stored, **preset, **overrides})


def build_braco_projector(config: Any, projector_type: str, mm_hidden: int, hidden: int, mlp_depth: int = 2) -> BuiltProjector:
    """``Sequential(coder, Linear, GELU, Linear, ...)`` for a LLaVA model config, and the keys that rebuild it."""
    braco = braco_config_from_model_config(config, projector_type)
    coder = BracoCoder.from_config(mm_hidden, braco)
    module = nn.Sequential(coder, *mlp_projector(mm_hidden, hidden, mlp_depth))
    return BuiltProjector(module, config_keys=to_mm_keys(braco))


def _braco(context: BuildContext) -> BuiltProjector:
    return build_braco_projector(context.config, context.projector_type, context.mm_hidden, context.hidden)


def _official(context: BuildContext) -> BuiltProjector:
    depth = int(context.match.group(1))
    return build_braco_projector(context.config, context.projector_type, context.mm_hidden, context.hidden, mlp_depth=depth)


def _run_defaults(run: RunInfo) -> dict[str, Any]:
    """The paper's schedule for this stage over the whole run (unset temperature flags only)."""
    start, end = STAGE_TEMPERATURES[run.stage]
    return dict(zip(TEMPERATURE_KEYS, (start, end, run.total_steps, DEFAULT_SCHEDULE)))


def _callbacks(model: Any) -> list[Any]:
    """Anneal every annealed coder's temperature with the optimizer step."""
    return [BracoAnnealCallback()] if annealed_coders(model) else []


def _module_flops(config: Any, setting: Any) -> Any:
    from .cost.coder_flops import braco_module_cost

    return braco_module_cost(config, setting)


def _types_at_budget(budget: int) -> list[str]:
    """``braco_k{K}``: the paper's allocation for K (one sentence when no allocation gives K)."""
    return [f"{PROJECTOR_PREFIX}k{BracoConfig.from_budget(budget).output_tokens}"]


def _view(projector: Any, inputs: Any) -> Any:
    from .view import braco_view

    return braco_view(projector, inputs)


PLUGIN = register_plugin(
    CompressorPlugin(
        name="braco",
        projectors=(
            ProjectorType(PROJECTOR_PATTERN, _braco, "Braco: C x C DCT backbone + S residual tokens (or a budget K), then mlp2x_gelu",
                          examples=("braco_c2s5", "braco_k4", "braco_c3s7_coef", "braco_c4s9_idct", "braco_c2s5_randrot"),
                          spelling="braco_c{C}s{S}[_coef|_idct|_randrot], braco_k{K}"),
            ProjectorType(OFFICIAL_PATTERN, _official, "official Braco type, configured by mm_fourier_* keys",
                          examples=("fourier_mlp2x_gelu",), example_settings={"mm_fourier_C": 2, "mm_fourier_spatial_keep": 3},
                          spelling="fourier_mlp{N}x_gelu"),
        ),
        settings=SETTINGS,
        key_prefixes=("mm_fourier_", "mm_braco_"),
        run_defaults=_run_defaults,
        callbacks=_callbacks,
        needs=ModelNeeds(square_grid=True),
        boundary="pre",
        view=_view,
        cost=CostModel(module_flops=_module_flops, types_at_budget=_types_at_budget),
        showcase=(f"{PROJECTOR_PREFIX}c2s5",),
        video_showcase=(f"{PROJECTOR_PREFIX}k16",),
        reference_scores=REFERENCE_SCORES,
    )
)
