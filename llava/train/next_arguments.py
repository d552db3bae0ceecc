"""LLaVA-NeXT's training flags: what they mean here, and which ones are refused (with what to use instead).

NeXT's ``train.py`` adds flags to upstream's three argument classes (:mod:`llava.train.arguments` declares them
with NeXT's names and defaults). The rules that give them NeXT's meaning live here, once:

- ``--mm_tunable_parts`` (a comma list of ``mm_mlp_adapter``, ``mm_vision_tower``, ``mm_language_model``)
  replaces the tune/freeze flags: :func:`tunable_parts`, :func:`projector_only` (such a run saves only
  ``mm_projector.bin``, NeXT's rule too), :func:`trains_vision_tower`;
- the values of the pooling, newline, video, attention and reporting flags (:func:`check_next_arguments`);
- :data:`REFUSED_FLAGS`: NeXT flags for parts this build does not have, each with a one-sentence reason.
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import Any

from llava.numeric import check_number
from llava.utils import UserError
from llava.video import check_frame_flags

#: LLaVA-NeXT's ``--mm_tunable_parts`` names, in NeXT's order.
TUNABLE_PARTS = ("mm_mlp_adapter", "mm_vision_resampler", "mm_vision_tower", "mm_language_model")
#: LLaVA-NeXT's ``get_2dPool`` modes and video newline placements.
SPATIAL_POOL_MODES = ("bilinear", "average", "max")
NEWLINE_POSITIONS = ("grid", "frame", "one_token", "no_token")
ATTENTION_IMPLEMENTATIONS = ("flash_attention_2", "sdpa", "eager")

_NO_RESAMPLER = (
    "LLaVA-NeXT's vision resamplers are not part of this build: a token compressor is a projector here, chosen with "
    "--mm_projector_type and trained as part of mm_mlp_adapter"
)
_RESAMPLER = f"belongs to a vision resampler; {_NO_RESAMPLER}"
_DPO = "belongs to LLaVA-NeXT's DPO trainer (llava/train/train_dpo.py), which this build does not have"

#: LLaVA-NeXT training flags for features this build does not have -> why, and what to use instead.
REFUSED_FLAGS: dict[str, str] = {
    **dict.fromkeys((
        "mm_resampler_type", "mm_spatial_pool_out_channels", "tune_mm_vision_resampler", "freeze_mm_vision_resampler",
        "mm_perceiver_depth", "mm_perceiver_latents", "mm_perceiver_ff_mult", "mm_perceiver_pretrained",
        "mm_qformer_depth", "mm_qformer_latents", "mm_qformer_pretrained", "mm_mask_drop_mode",
        "mm_mask_drop_skip_percentage", "mm_mask_drop_ratio", "mm_mask_drop_ratio_upper", "mm_mask_drop_ratio_lower",
    ), _RESAMPLER),
    **dict.fromkeys(("dpo_alpha", "beta", "gamma"), _DPO),
    "model_class_name": "is not needed: the LLM class follows the model_type in --model_name_or_path's config.json",
    "vision_tower_pretrained": "is not supported: point --vision_tower at the folder that holds the tower weights",
    "delay_load": "is not needed: the vision tower is always loaded for training",
    "unfreeze_language_model": "is not read by LLaVA-NeXT's train.py either; add mm_language_model to --mm_tunable_parts",
    **dict.fromkeys(("rope_scaling_factor", "rope_scaling_type"), (
        "is not supported by this training script; set rope_scaling in the LLM's config.json before training")),
    **dict.fromkeys(("s2", "s2_scales"), "belongs to S2 multi-scale towers, which this build does not have"),
    **dict.fromkeys(("use_pos_skipping", "pos_skipping_range"), "belongs to positional skipping, which this build does not have"),
    **dict.fromkeys(("add_faster_video", "faster_token_stride"), (
        "belongs to LLaVA-Video's fast/slow frame tokens, which this build does not have")),
    **dict.fromkeys(("image_crop_resolution", "image_split_resolution"), (
        "is read only by LLaVA-NeXT's highres/crop_split image modes, which this build does not have; use "
        "--image_aspect_ratio anyres or anyres_max_<N>")),
    "early_mix_text": "is not supported: text-only samples are kept apart by --group_by_modality_length True",
    **dict.fromkeys(("group_by_varlen", "group_by_modality_length_auto"), (
        "is not supported; use --group_by_modality_length True or --group_by_length True")),
    **dict.fromkeys(("trainer_mode", "zo_eps", "zo_num_directions"), (
        "belongs to zeroth-order (MeZO) training, which this build does not have")),
}


def tunable_parts(model_args: Any) -> tuple[str, ...] | None:
    """LLaVA-NeXT's ``--mm_tunable_parts`` as part names (``None`` when not given: the legacy flags decide).

    Raises:
        UserError: For an empty list or an unknown part.
    """
    value = getattr(model_args, "mm_tunable_parts", None)
    if value is None:
        return None
    parts = tuple(part.strip() for part in value.split(",") if part.strip())
    if "mm_vision_resampler" in parts:
        raise UserError(f"--mm_tunable_parts names mm_vision_resampler, but {_NO_RESAMPLER}")
    accepted = [part for part in TUNABLE_PARTS if part != "mm_vision_resampler"]
    unknown = [part for part in parts if part not in accepted]
    if not parts or unknown:
        raise UserError(
            f"--mm_tunable_parts {value!r} must be a comma list of {', '.join(accepted)}"
            + (f" ({unknown[0]!r} is none of them)" if unknown else "")
        )
    return parts


def projector_only(model_args: Any) -> bool:
    """Whether only the projector trains: upstream's stage 1 (``--tune_mm_mlp_adapter True``) or NeXT's
    ``--mm_tunable_parts mm_mlp_adapter``. Such a run saves ``mm_projector.bin`` only (both projects' rule)."""
    parts = tunable_parts(model_args)
    return parts == ("mm_mlp_adapter",) if parts is not None else bool(getattr(model_args, "tune_mm_mlp_adapter", False))


def trains_vision_tower(model_args: Any) -> bool:
    """Whether the vision tower's parameters train (``mm_vision_tower`` in the parts, or ``--unfreeze_mm_vision_tower``)."""
    parts = tunable_parts(model_args)
    return "mm_vision_tower" in parts if parts is not None else bool(getattr(model_args, "unfreeze_mm_vision_tower", False))


def check_tunable_parts(model_args: Any, training_args: Any) -> None:
    """Refuse tunable parts this build lacks and legacy flags that contradict ``--mm_tunable_parts``."""
    parts = tunable_parts(model_args)
    if parts is not None:
        if not model_args.vision_tower:
            raise UserError("--mm_tunable_parts needs --vision_tower (the parts it names sit on the vision tower)")
        contradictions = [
            ("--tune_mm_mlp_adapter True", model_args.tune_mm_mlp_adapter and parts != ("mm_mlp_adapter",), "mm_mlp_adapter alone"),
            ("--freeze_mm_mlp_adapter True", training_args.freeze_mm_mlp_adapter and "mm_mlp_adapter" in parts, "no mm_mlp_adapter"),
            ("--unfreeze_mm_vision_tower True", model_args.unfreeze_mm_vision_tower and "mm_vision_tower" not in parts, "mm_vision_tower"),
            ("--freeze_backbone True", model_args.freeze_backbone and "mm_language_model" in parts, "no mm_language_model"),
        ]
        for flag, contradicts, needs in contradictions:
            if contradicts:
                raise UserError(
                    f"{flag} contradicts --mm_tunable_parts {model_args.mm_tunable_parts!r} (it means {needs}); "
                    "give --mm_tunable_parts alone"
                )
    elif model_args.unfreeze_mm_vision_tower and not model_args.vision_tower:
        raise UserError("--unfreeze_mm_vision_tower True needs --vision_tower")
    lr = training_args.mm_vision_tower_lr
    if lr is not None:
        if not math.isfinite(lr) or lr < 0:
            raise UserError(f"--mm_vision_tower_lr must be a learning rate (finite, >= 0), got {lr}")
        if not trains_vision_tower(model_args):
            raise UserError(
                "--mm_vision_tower_lr is set but the vision tower does not train; add mm_vision_tower to "
                "--mm_tunable_parts (or pass --unfreeze_mm_vision_tower True), or drop --mm_vision_tower_lr"
            )


def check_next_arguments(model_args: Any, data_args: Any, training_args: Any) -> None:
    """Check LLaVA-NeXT's flags: tunable parts, pooling, newline and video values, attention, reporting.

    Raises:
        UserError: One sentence naming the flag, the bad value and what is accepted.
    """
    check_tunable_parts(model_args, training_args)
    choices = (
        ("--mm_spatial_pool_mode", model_args.mm_spatial_pool_mode, SPATIAL_POOL_MODES),
        ("--mm_newline_position", model_args.mm_newline_position, NEWLINE_POSITIONS),
    )
    for flag, value, accepted in choices:
        if value not in accepted:
            raise UserError(f"{flag} must be one of {', '.join(accepted)}, got {value!r}")
    if model_args.mm_spatial_pool_stride is not None:
        check_number(model_args.mm_spatial_pool_stride, "--mm_spatial_pool_stride", 1, integer=True)
    check_frame_flags(data_args.frames_upbound, data_args.force_sample, data_args.video_fps,
                      flags=("--frames_upbound", "--force_sample", "--video_fps"))
    if data_args.video_folder and not os.path.isdir(data_args.video_folder):
        raise UserError(f"--video_folder {data_args.video_folder!r} is not a folder")
    check_attention(training_args.attn_implementation)
    check_reporting(training_args.report_to)


def check_attention(implementation: str | None) -> None:
    """Refuse an unknown ``--attn_implementation``, and flash_attention_2 without the flash-attn package."""
    if implementation is None:
        return
    if implementation not in ATTENTION_IMPLEMENTATIONS:
        raise UserError(f"--attn_implementation must be one of {', '.join(ATTENTION_IMPLEMENTATIONS)}, got {implementation!r}")
    if implementation == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise UserError(
            "--attn_implementation flash_attention_2 needs the flash-attn package (pip install flash-attn "
            "--no-build-isolation, on a CUDA machine); or pass --attn_implementation sdpa"
        )


def check_reporting(report_to: Any) -> None:
    """Refuse ``--report_to wandb`` when wandb is not installed (transformers would stop with a traceback)."""
    targets = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if "wandb" in targets and importlib.util.find_spec("wandb") is None:
        raise UserError(
            "--report_to wandb needs the wandb package: pip install -e \".[train]\" (or pip install wandb), or pass "
            "--report_to none"
        )


__all__ = [
    "ATTENTION_IMPLEMENTATIONS",
    "NEWLINE_POSITIONS",
    "REFUSED_FLAGS",
    "SPATIAL_POOL_MODES",
    "TUNABLE_PARTS",
    "check_attention",
    "check_next_arguments",
    "check_reporting",
    "check_tunable_parts",
    "projector_only",
    "trains_vision_tower",
    "tunable_parts",
]
