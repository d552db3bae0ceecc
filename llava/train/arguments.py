"""Training arguments: upstream LLaVA's three dataclasses with upstream's names and defaults.

``ModelArguments``, ``DataArguments`` and ``TrainingArguments`` (which extends transformers'
``TrainingArguments``) are parsed from the command line by ``HfArgumentParser``. Besides upstream's fields:

- one flag per setting that an installed compressor plugin declares
  (:class:`llava.model.multimodal_projector.plugins.Setting`; the fields are added to ``ModelArguments`` by
  :func:`model_arguments_class`), ``None`` by default so that the projector's own defaults apply; whatever is
  given is checked (type, choices, range, and that ``--mm_projector_type`` is one of that plugin's types) and
  written to ``config.json``. A plugin may fill unset ones per run (:mod:`llava.train.recipe`);
- ``--skip_bad_samples``: drop (and count) invalid training records instead of stopping;
- LLaVA-NeXT's training flags, with NeXT's names, defaults and meaning (docs/BACKBONES.md, "LLaVA-NeXT training
  flags"): ``--mm_tunable_parts`` and ``--unfreeze_mm_vision_tower`` (what trains), ``--mm_vision_tower_lr`` (the
  tower's learning rate, next to upstream's ``--mm_projector_lr``), ``--attn_implementation``, the video and pooling
  keys written to ``config.json`` (``--mm_spatial_pool_stride``/``_mode``, ``--mm_newline_position``,
  ``--video_folder``, ``--frames_upbound``, ...) and ``--verbose_logging``. NeXT flags for parts this build does not
  have (vision resamplers, DPO, ...) are refused with one sentence each (:data:`REFUSED_FLAGS`).

Flags that upstream's scripts pass but transformers 5 renamed or removed (``--evaluation_strategy``,
``--warmup_ratio``, ...) are translated by :func:`translate_legacy_flags`, with a notice.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, make_dataclass

import transformers
from transformers import HfArgumentParser

from llava.mm_utils import anyres_max_views, is_anyres, parse_grid_pinpoints
from llava.utils import BOOLEAN_WORDS, UserError, parse_bool
from llava.visual_tokens import PATCH_MERGE_TYPES

from .next_arguments import REFUSED_FLAGS, check_next_arguments

logger = logging.getLogger(__name__)

QUANTIZATION_BITS = (4, 8, 16)
LORA_BIASES = ("none", "all", "lora_only")
IMAGE_ASPECT_RATIOS = ("square", "pad")


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(default="facebook/opt-125m")
    version: str | None = field(default="v0", metadata={"help": "conversation template: plain (stage 1) or v1 (stage 2)"})
    freeze_backbone: bool = field(default=False)
    tune_mm_mlp_adapter: bool = field(default=False, metadata={"help": "stage 1: train only the projector"})
    vision_tower: str | None = field(default=None)
    mm_vision_select_layer: int | None = field(default=-1)
    pretrain_mm_mlp_adapter: str | None = field(default=None, metadata={"help": "stage-1 mm_projector.bin to start from"})
    mm_projector_type: str | None = field(default="linear")
    mm_use_im_start_end: bool = field(default=False)
    mm_use_im_patch_token: bool = field(default=True)
    mm_patch_merge_type: str | None = field(default="flat")
    mm_vision_select_feature: str | None = field(default="patch")
    # LLaVA-NeXT (names and defaults as in its train.py)
    mm_tunable_parts: str | None = field(
        default=None,
        metadata={"help": "LLaVA-NeXT: comma list of what trains, from mm_mlp_adapter, mm_vision_tower, "
                          "mm_language_model; replaces --tune_mm_mlp_adapter/--freeze_mm_mlp_adapter/--freeze_backbone"},
    )
    unfreeze_mm_vision_tower: bool = field(default=False, metadata={"help": "LLaVA-NeXT: train the vision tower too"})
    mm_spatial_pool_stride: int | None = field(default=None, metadata={"help": "LLaVA-NeXT: video frame pooling stride (config.json)"})
    mm_spatial_pool_mode: str = field(default="bilinear", metadata={"help": "LLaVA-NeXT: bilinear, average or max (config.json)"})
    mm_newline_position: str = field(
        default="grid", metadata={"help": "LLaVA-NeXT: video newline tokens: grid, frame, one_token or no_token (config.json)"}
    )


@dataclass
class DataArguments:
    data_path: str | None = field(default=None, metadata={"help": "LLaVA training data: a JSON list or JSONL file"})
    lazy_preprocess: bool = False
    is_multimodal: bool = False
    image_folder: str | None = field(default=None)
    image_aspect_ratio: str = field(
        default="square",
        metadata={"help": "square, pad, anyres or anyres_max_<N> (AnyRes needs --image_grid_pinpoints)"},
    )
    image_grid_pinpoints: str | None = field(
        default=None,
        metadata={"help": "AnyRes canvases: a list of [width, height] pairs, or a range of grids such as "
                          "'(1x1),...,(6x6)' in tower sides (written expanded to config.json)"},
    )
    skip_bad_samples: bool = field(
        default=False,
        metadata={"help": "drop invalid records (missing image, no <image> marker, ...) and report the counts "
                          "instead of stopping at the first one"},
    )
    # LLaVA-NeXT video data (names and defaults as in its train.py)
    video_folder: str | None = field(default=None, metadata={"help": "LLaVA-NeXT: root of the records' 'video' paths"})
    video_fps: int = field(default=1, metadata={"help": "LLaVA-NeXT: frames sampled per second of video"})
    frames_upbound: int = field(default=0, metadata={"help": "LLaVA-NeXT: at most this many frames per video (0: no cap)"})
    add_time_instruction: bool = field(default=False, metadata={"help": "LLaVA-NeXT: tell the model the frame times"})
    force_sample: bool = field(default=False, metadata={"help": "LLaVA-NeXT: always sample frames_upbound frames"})


@dataclass
class TrainingArguments(transformers.TrainingArguments):
    cache_dir: str | None = field(default=None)
    optim: str = field(default="adamw_torch")
    remove_unused_columns: bool = field(default=False)
    freeze_mm_mlp_adapter: bool = field(default=False)
    mpt_attn_impl: str | None = field(default="triton")
    model_max_length: int = field(
        default=512, metadata={"help": "maximum sequence length; longer samples are truncated (right padding)"}
    )
    double_quant: bool = field(default=True, metadata={"help": "double quantization of the 4-bit statistics"})
    quant_type: str = field(default="nf4", metadata={"help": "4-bit data type: fp4 or nf4"})
    bits: int = field(default=16, metadata={"help": "4 or 8 to load the LLM quantized (needs bitsandbytes)"})
    lora_enable: bool = False
    lora_r: int = 64
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    lora_weight_path: str = ""
    lora_bias: str = "none"
    mm_projector_lr: float | None = None
    mm_vision_tower_lr: float | None = field(
        default=None, metadata={"help": "LLaVA-NeXT: learning rate of the vision tower's parameters (when it trains)"}
    )
    attn_implementation: str | None = field(
        default=None,
        metadata={"help": "LLM attention: flash_attention_2, sdpa or eager (default: train_mem.py's choice, "
                          "flash_attention_2 when flash-attn is installed, else sdpa)"},
    )
    verbose_logging: bool = field(default=False, metadata={"help": "LLaVA-NeXT: log every argument at the start"})
    group_by_modality_length: bool = field(default=False)
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "train from the start even if --output_dir holds checkpoint-* folders (transformers 5 "
                          "dropped the flag; here it decides resuming, see llava/train/resume.py)"},
    )


# ---------------------------------------------------------------------------------------------- legacy flags


def _is_true(value: str) -> bool:
    parsed = parse_bool(value)
    if parsed is None:
        raise ValueError(f"expected a boolean ({BOOLEAN_WORDS}), got {value!r}")
    return parsed


def _warmup_ratio(value: str) -> list[str]:
    ratio = float(value)
    if not 0 <= ratio < 1:
        raise ValueError(f"--warmup_ratio must be in [0, 1), got {value!r}")
    return ["--warmup_steps", value]


@dataclass(frozen=True)
class LegacyFlag:
    """A transformers-4 training flag: whether it is a boolean switch, and its transformers-5 spelling."""

    boolean: bool
    translate: Callable[[str], list[str]]
    note: str


LEGACY_FLAGS: dict[str, LegacyFlag] = {
    "evaluation_strategy": LegacyFlag(False, lambda v: ["--eval_strategy", v], "renamed --eval_strategy"),
    "warmup_ratio": LegacyFlag(False, _warmup_ratio, "a ratio below 1 now goes in --warmup_steps"),
    "group_by_length": LegacyFlag(
        True, lambda v: ["--train_sampling_strategy", "group_by_length"] if _is_true(v) else [],
        "now --train_sampling_strategy group_by_length",
    ),
    "no_cuda": LegacyFlag(True, lambda v: ["--use_cpu", v], "renamed --use_cpu"),
    "gradient_checkpointing": LegacyFlag(True, lambda v: ["--activation_checkpointing", v], "renamed --activation_checkpointing"),
    "logging_dir": LegacyFlag(False, lambda v: [], "removed; ignored"),
    "save_safetensors": LegacyFlag(True, lambda v: [], "removed (checkpoints are always safetensors); ignored"),
}


def _split_flag(token: str) -> tuple[str, str | None]:
    name, sep, value = token[2:].partition("=")
    return name.replace("-", "_"), (value if sep else None)


def translate_legacy_flags(argv: Sequence[str]) -> list[str]:
    """Rewrite transformers-4 flags (``--evaluation_strategy no``, ``--warmup_ratio 0.03``, ...) for transformers 5.

    Both ``--flag value`` and ``--flag=value`` are understood; a boolean flag may stand alone (true).

    Raises:
        ValueError: If a legacy flag lacks its value, has a bad one, or is given together with its new name.
    """
    out: list[str] = []
    given: set[str] = set()
    translated: set[str] = set()
    tokens = list(argv)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.startswith("--"):
            out.append(token)
            continue
        name, value = _split_flag(token)
        legacy = LEGACY_FLAGS.get(name)
        if legacy is None:
            given.add(name)
            out.append(token)
            continue
        if value is None:
            if index < len(tokens) and not tokens[index].startswith("--"):
                value, index = tokens[index], index + 1
            elif legacy.boolean:
                value = "True"
            else:
                raise ValueError(f"--{name} needs a value")
        try:
            replacement = legacy.translate(value)
        except ValueError as error:
            raise ValueError(f"--{name}: {error}") from None
        logger.warning("--%s is a transformers 4 flag: %s", name, legacy.note)
        if replacement:
            translated.add(_split_flag(replacement[0])[0])
        out.extend(replacement)
    both = sorted(translated & given)
    if both:
        raise ValueError(f"--{both[0]} is given both directly and through its transformers 4 name; give it once")
    return out


# ---------------------------------------------------------------------------------------------- LLaVA-NeXT flags


def flag_given(argv: Sequence[str], name: str) -> bool:
    """Whether ``--name`` (or ``--name=...``, hyphens or underscores) is on the command line."""
    return any(token.startswith("--") and _split_flag(token)[0] == name for token in argv)


def refuse_unsupported_flags(argv: Sequence[str]) -> None:
    """Stop at the first LLaVA-NeXT flag of :data:`REFUSED_FLAGS` with its one-sentence reason.

    Raises:
        UserError: Naming the flag and what to use instead.
    """
    for token in argv:
        if token.startswith("--"):
            name = _split_flag(token)[0]
            if name in REFUSED_FLAGS:
                raise UserError(f"--{name} {REFUSED_FLAGS[name]}")


# ---------------------------------------------------------------------------------------------- plugin flags


def model_arguments_class() -> type[ModelArguments]:
    """``ModelArguments`` plus one ``<type> | None`` field (default ``None``) per installed plugin setting.

    Built from the plugin registry each time (plugins register on import), named ``ModelArguments`` so that
    ``--help`` and error messages read as upstream's.
    """
    from llava.model.multimodal_projector.plugins import plugin_settings

    extra = [
        (setting.key, setting.type | None, field(default=None, metadata={"help": f"[{plugin.name}] {setting.description}"}))
        for plugin, setting in plugin_settings()
    ]
    if not extra:
        return ModelArguments
    return make_dataclass("ModelArguments", extra, bases=(ModelArguments,))


def check_plugin_arguments(model_args: ModelArguments) -> None:
    """Check every given plugin flag: its value (:meth:`Setting.parse`) and that the projector reads it.

    Raises:
        ValueError: One sentence naming the flag.
    """
    from llava.model.multimodal_projector.plugins import plugin_settings

    for plugin, setting in plugin_settings():
        value = getattr(model_args, setting.key, None)
        if value is None:
            continue
        try:
            setting.parse(value)
        except ValueError as error:
            raise ValueError(f"--{error}") from None
        if not plugin.matches(model_args.mm_projector_type or ""):
            raise ValueError(
                f"--{setting.key} is a setting of the {plugin.name!r} compressor, but --mm_projector_type "
                f"{model_args.mm_projector_type!r} is not one of its projector types"
            )


# ---------------------------------------------------------------------------------------------- parsing


def check_image_arguments(model_args: ModelArguments, data_args: DataArguments) -> None:
    """Check ``--image_aspect_ratio``, ``--image_grid_pinpoints`` and ``--mm_patch_merge_type`` together.

    Raises:
        ValueError: One sentence naming the bad value and what is accepted.
    """
    aspect = data_args.image_aspect_ratio
    if aspect not in IMAGE_ASPECT_RATIOS and not is_anyres(aspect):
        raise ValueError(
            f"--image_aspect_ratio must be one of {', '.join(IMAGE_ASPECT_RATIOS)}, anyres or anyres_max_<N> for "
            f"training, got {aspect!r}"
        )
    if anyres_max_views(aspect) == 0:
        raise ValueError(f"--image_aspect_ratio {aspect!r} keeps no view; use anyres_max_<N> with N at least 1")
    merge = model_args.mm_patch_merge_type or "flat"
    if merge not in PATCH_MERGE_TYPES:
        raise ValueError(f"--mm_patch_merge_type must be one of {', '.join(PATCH_MERGE_TYPES)}, got {merge!r}")
    if is_anyres(aspect) and not data_args.image_grid_pinpoints:
        raise ValueError(f"--image_aspect_ratio {aspect} needs --image_grid_pinpoints (e.g. '(1x1),...,(2x2)')")
    if data_args.image_grid_pinpoints and not is_anyres(aspect):
        raise ValueError(f"--image_grid_pinpoints is used only with --image_aspect_ratio anyres, got {aspect!r}")
    if data_args.image_grid_pinpoints:
        parse_grid_pinpoints(data_args.image_grid_pinpoints, side=1)  # syntax only; the side comes with the tower


def check_arguments(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> None:
    """Reject argument combinations this build cannot train, with one sentence each."""
    if not data_args.data_path:
        raise ValueError("--data_path is required: a LLaVA training file (JSON list or JSONL)")
    if training_args.bits not in QUANTIZATION_BITS:
        raise ValueError(f"--bits must be one of {QUANTIZATION_BITS}, got {training_args.bits}")
    # Checked with the flags, not when the LLM loads, so the run stops before the data is read.
    if training_args.bits != 16 and importlib.util.find_spec("bitsandbytes") is None:
        raise UserError(f"--bits {training_args.bits} needs the bitsandbytes package (pip install bitsandbytes, on a CUDA "
                        "machine); or pass --bits 16")
    if training_args.lora_bias not in LORA_BIASES:
        raise ValueError(f"--lora_bias must be one of {LORA_BIASES}, got {training_args.lora_bias!r}")
    check_image_arguments(model_args, data_args)
    if model_args.mm_use_im_start_end and model_args.tune_mm_mlp_adapter:
        raise ValueError("--mm_use_im_start_end True together with --tune_mm_mlp_adapter True is not supported")
    for flag in ("pretrain_mm_mlp_adapter", "tune_mm_mlp_adapter"):
        if getattr(model_args, flag) and not model_args.vision_tower:
            raise ValueError(f"--{flag} needs --vision_tower (the projector sits on the vision tower)")
    if model_args.tune_mm_mlp_adapter and training_args.freeze_mm_mlp_adapter:
        raise ValueError("--tune_mm_mlp_adapter True with --freeze_mm_mlp_adapter True leaves nothing to train")
    check_next_arguments(model_args, data_args, training_args)
    check_plugin_arguments(model_args)


def parse_arguments(argv: Sequence[str] | None = None) -> tuple[ModelArguments, DataArguments, TrainingArguments]:
    """Parse upstream's (or LLaVA-NeXT's) command line (``sys.argv[1:]`` when ``argv`` is None) into the three
    dataclasses; ``--verbose_logging True`` logs them."""
    argv = list(sys.argv[1:] if argv is None else argv)
    refuse_unsupported_flags(argv)
    args = translate_legacy_flags(argv)
    parser = HfArgumentParser((model_arguments_class(), DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=args, look_for_args_file=False)
    check_arguments(model_args, data_args, training_args)
    if training_args.verbose_logging:
        for name, group in (("model", model_args), ("data", data_args), ("training", training_args)):
            logger.info("%s arguments: %s", name, vars(group))
    return model_args, data_args, training_args


__all__ = [
    "DataArguments",
    "LEGACY_FLAGS",
    "ModelArguments",
    "TrainingArguments",
    "check_arguments",
    "check_image_arguments",
    "check_plugin_arguments",
    "flag_given",
    "model_arguments_class",
    "parse_arguments",
    "refuse_unsupported_flags",
    "translate_legacy_flags",
]
