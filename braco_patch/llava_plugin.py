"""Braco as a LLaVA method, in one file on the plugin API (:mod:`llava.plugin_api`): factory, cost, view, declaration.

Loaded through the ``llava.projectors`` entry point (setup.py), so upstream-style scripts need no import
edits. Braco's core units (basis, embedding, coordinates, residual, coder, config) import no ``llava``, so what they
hold stays theirs: the name grammar's parser (:func:`braco_patch.config.parse_name`, which these name forms are
tested to agree with), the FLOPs per paper step (:mod:`braco_patch.cost.coder_flops`, which ``braco cost``'s own
tables share) and the low-pass picture (:func:`braco_patch.view.lowpass_view`). It declares:

- its name forms: ``braco_c{C}s{S}`` with an optional ``_coef``/``_idct``/``_randrot`` suffix (``_vanilla`` is an
  alias of ``_coef``; default ``auto``), ``braco_k{K}`` (the paper's allocation for K ∈ {4, 9, 16, 25}, the
  documented rule for any other K) and ``fourier_mlp{N}x_gelu``, the official implementation's type, configured by
  its ``mm_fourier_*`` keys with the official builder's defaults for absent keys (except that an absent
  ``mm_fourier_use_polar_pe`` means the paper's embedding);
- its settings: the official ``mm_fourier_*`` keys and this project's ``mm_braco_*`` keys (:data:`MM_KEYS`), each a
  training flag and a ``config.json`` key;
- the paper's per-stage temperature schedule as run defaults, and the annealing callback;
- needs: only the select layer, on a square grid; boundary ``pre``;
- its demo view (:func:`braco_view`): the DCT low-pass picture and the residual weight maps;
- its cost model (:func:`braco_module_cost`): the coder's FLOPs per paper step, then the MLP on K tokens; ``braco_k{K}``
  per budget.

Each type builds ``Sequential(coder, Linear(mm_hidden, hidden), GELU, Linear(hidden, hidden))`` (indices 0–3,
the official checkpoint layout) and returns the resolved keys for the model config, so ``config.json`` rebuilds the
same module with no flags.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch.nn as nn

from llava.model.multimodal_projector.registry import register_plugin
from llava.plugin_api import (
    BuildContext,
    BuiltProjector,
    CompressorPlugin,
    CompressorView,
    CostModel,
    CostSetting,
    ModelNeeds,
    ModuleCost,
    NameForm,
    Picture,
    ProjectorType,
    RunInfo,
    Setting,
    ViewInputs,
    mlp_projector,
    projector_flops,
)

from .callbacks import BracoAnnealCallback
from .coder import BracoCoder
from .config import (
    MM_KEYS,
    OFFICIAL_BUILDER_DEFAULTS,
    PROJECTOR_PREFIX,
    BracoConfig,
    fields_from_mm_keys,
    parse_name,
    to_mm_keys,
)
from .coordinates import COORDINATE_ALIASES, COORDINATE_MODES, canonical_coordinates
from .cost.coder_flops import check_allocation, compressor_flops
from .embedding import EMBEDDINGS
from .paper_scores import REFERENCE_SCORES
from .schedule import DEFAULT_SCHEDULE, SCHEDULES, STAGE_TEMPERATURES, annealed_coders
from .view import find_coder, lowpass_view

__all__ = ["ALLOCATION_FORM", "BUDGET_FORM", "OFFICIAL_FORM", "PANEL_HELP", "PLUGIN", "braco_config_from_model_config",
           "braco_module_cost", "braco_view", "build_braco_projector"]

#: ``braco_c{C}s{S}[_coef|_idct|_randrot]`` (``_vanilla``: the paper's word for ``_coef``, an alias).
ALLOCATION_FORM = NameForm(
    f"{PROJECTOR_PREFIX}c{{C}}s{{S}}["
    + "|".join([f"_{mode}" for mode in COORDINATE_MODES if mode != "auto"] + [f"~_{alias}" for alias in COORDINATE_ALIASES])
    + "]"
)
#: ``braco_k{K}``: the paper's allocation of a total budget K.
BUDGET_FORM = NameForm(f"{PROJECTOR_PREFIX}k{{K}}")
#: ``fourier_mlp{N}x_gelu``: the official implementation's type, the coder then an ``mlp{N}x_gelu`` (braco-official §2).
OFFICIAL_FORM = NameForm("fourier_mlp{N}x_gelu")

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
    depth = int(context.match["N"])
    return build_braco_projector(context.config, context.projector_type, context.mm_hidden, context.hidden, mlp_depth=depth)


def _run_defaults(run: RunInfo) -> dict[str, Any]:
    """The paper's schedule for this stage over the whole run (unset temperature flags only)."""
    start, end = STAGE_TEMPERATURES[run.stage]
    return dict(zip(TEMPERATURE_KEYS, (start, end, run.total_steps, DEFAULT_SCHEDULE)))


def _callbacks(model: Any) -> list[Any]:
    """Anneal every annealed coder's temperature with the optimizer step."""
    return [BracoAnnealCallback()] if annealed_coders(model) else []


# ---------------------------------------------------------------------------------------------- cost


def braco_module_cost(context: BuildContext, setting: CostSetting) -> ModuleCost:
    """Braco's ``CostModel.module_flops``: the coder per paper step (``setting.computation``: the official code's or
    this project's), then ``mlp{N}x_gelu`` on the K tokens; the allocation is resolved as the factory resolves it."""
    projector_type = context.projector_type
    allocation = braco_config_from_model_config(context.config, projector_type)
    check_allocation(allocation, setting.grid, f"projector {projector_type}")
    k = allocation.output_tokens
    return ModuleCost(
        projector_type, k, "pre",
        module=compressor_flops(allocation, setting.mm_hidden, setting.grid, setting.computation),
        projector=projector_flops(k, setting.mm_hidden, setting.lm.hidden, setting.projector_depth),
    )


def _types_at_budget(budget: int) -> list[str]:
    """``braco_k{K}``: the paper's allocation for K (one sentence when no allocation gives K)."""
    return [BUDGET_FORM.format(K=BracoConfig.from_budget(budget).output_tokens)]


# ---------------------------------------------------------------------------------------------- view (paper §3.4, Fig. 2)

PANEL_HELP = """*Left to right:* the image as the model receives it (padded and resized); its low-pass view (the
image averaged per patch, keeping only the C×C lowest 2-D DCT frequencies over the patch grid, drawn smoothly),
which is the coarse layout the DCT backbone tokens summarise; then one heat map per residual token: its sparsemax
weights over the patch grid (each map sums to 1), drawn over the image."""


def braco_view(projector: nn.Module, inputs: ViewInputs) -> CompressorView | None:
    """The panel of a Braco projector for one image (``None`` when the projector has no coder): the model input,
    the C x C low-pass view (:func:`braco_patch.view.lowpass_view`) and the S residual tokens' sparsemax weight maps
    ``[S, H, W]``, exactly what the coder computes for that image (each map sums to 1).

    ``arrays["weights"]`` holds the residual maps; ``details`` the token counts, C and S.
    """
    from llava.serve.panels import heat_picture, token_details, tokens_summary

    coder = find_coder(projector)
    if coder is None:
        return None
    tokens, grid = coder.split_tokens(inputs.features)
    grid = (int(grid[0]), int(grid[1]))
    cutoff, residual = int(coder.cutoff), int(coder.residual_tokens)
    if residual > 0:
        weights = coder.residual_weights(tokens, grid)[0].float().reshape(-1, *grid).cpu().numpy()
    else:
        weights = np.zeros((0, *grid), dtype=np.float32)
    pictures: list[Picture] = [Picture("model input", inputs.image)]
    if cutoff > 0:
        pictures.append(Picture(f"{cutoff}×{cutoff} DCT low-pass", lowpass_view(inputs.image, grid, cutoff)))
    for index, heat in enumerate(weights, start=1):
        pictures.append(heat_picture(f"residual {index} (max {heat.max():.2f})", inputs.image, heat))
    split = cutoff * cutoff + residual == inputs.tokens_sent
    breakdown = f"{cutoff}×{cutoff} = {cutoff * cutoff} DCT backbone + {residual} residual" if split else ""
    details: dict[str, Any] = {**token_details(inputs), "cutoff": cutoff, "residual_tokens": residual}
    summary = tokens_summary(inputs.tokens_sent, grid, breakdown)
    return CompressorView(summary, tuple(pictures), PANEL_HELP, details, {"weights": weights})


# ---------------------------------------------------------------------------------------------- declaration

PLUGIN = register_plugin(
    CompressorPlugin(
        name="braco",
        projectors=(
            ProjectorType.named(ALLOCATION_FORM, _braco, "Braco: C x C DCT backbone + S residual tokens, then mlp2x_gelu",
                                examples=("braco_c2s5", "braco_c3s7_coef", "braco_c4s9_idct", "braco_c2s5_randrot")),
            ProjectorType.named(BUDGET_FORM, _braco, "Braco at a total budget K (the paper's allocation), then mlp2x_gelu",
                                examples=("braco_k4",)),
            ProjectorType.named(OFFICIAL_FORM, _official, "official Braco type, configured by mm_fourier_* keys",
                                examples=("fourier_mlp2x_gelu",), example_settings={"mm_fourier_C": 2, "mm_fourier_spatial_keep": 3}),
        ),
        settings=SETTINGS,
        key_prefixes=("mm_fourier_", "mm_braco_"),
        run_defaults=_run_defaults,
        callbacks=_callbacks,
        needs=ModelNeeds(square_grid=True),
        boundary="pre",
        view=braco_view,
        cost=CostModel(module_flops=braco_module_cost, types_at_budget=_types_at_budget),
        showcase=(ALLOCATION_FORM.format(C=2, S=5),),
        video_showcase=(BUDGET_FORM.format(K=16),),
        reference_scores=REFERENCE_SCORES,
    )
)
