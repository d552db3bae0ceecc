"""Upstream's training arguments and defaults, transformers-4 flag names, and the stage recipe."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from llava.train.arguments import parse_arguments, translate_legacy_flags
from llava.train.recipe import planned_optimizer_steps, resolve_run_defaults

REQUIRED = ["--data_path", "data.json", "--output_dir", "out"]


def test_upstream_defaults():
    model_args, data_args, training_args = parse_arguments(REQUIRED)
    # llava-interface §7, written out here.
    assert (model_args.model_name_or_path, model_args.version, model_args.mm_projector_type) == ("facebook/opt-125m", "v0", "linear")
    assert (model_args.mm_vision_select_layer, model_args.mm_vision_select_feature, model_args.mm_patch_merge_type) == (-1, "patch", "flat")
    assert (model_args.tune_mm_mlp_adapter, model_args.freeze_backbone, model_args.mm_use_im_start_end) == (False, False, False)
    assert model_args.mm_use_im_patch_token is True and model_args.vision_tower is None
    assert (data_args.image_aspect_ratio, data_args.lazy_preprocess, data_args.image_folder) == ("square", False, None)
    assert (training_args.optim, training_args.remove_unused_columns, training_args.model_max_length) == ("adamw_torch", False, 512)
    assert (training_args.bits, training_args.double_quant, training_args.quant_type) == (16, True, "nf4")
    assert (training_args.lora_enable, training_args.lora_r, training_args.lora_alpha) == (False, 64, 16)
    assert (training_args.lora_dropout, training_args.lora_bias, training_args.lora_weight_path) == (0.05, "none", "")
    assert training_args.mm_projector_lr is None and training_args.group_by_modality_length is False
    assert model_args.mm_fourier_temp_start is None and model_args.mm_fourier_temp_steps is None  # plugin flags


def test_official_braco_flags_parse():
    model_args, _, _ = parse_arguments(REQUIRED + [
        "--mm_projector_type", "fourier_mlp2x_gelu", "--mm_fourier_C", "3", "--mm_fourier_spatial_keep", "7",
        "--mm_fourier_use_polar_pe", "True", "--mm_fourier_temp_start", "1.5", "--mm_fourier_temp_schedule", "linear",
    ])
    assert (model_args.mm_fourier_C, model_args.mm_fourier_spatial_keep, model_args.mm_fourier_use_polar_pe) == (3, 7, True)
    assert (model_args.mm_fourier_temp_start, model_args.mm_fourier_temp_schedule) == (1.5, "linear")


@pytest.mark.parametrize("flags, field, value", [
    (["--evaluation_strategy", "no"], "eval_strategy", "no"),
    (["--evaluation_strategy=steps", "--eval_steps", "5"], "eval_strategy", "steps"),
    (["--warmup_ratio", "0.03"], "warmup_steps", 0.03),
    (["--group_by_length", "True"], "train_sampling_strategy", "group_by_length"),
    (["--group_by_length"], "train_sampling_strategy", "group_by_length"),
    (["--group_by_length", "False"], "train_sampling_strategy", "random"),
    (["--no_cuda", "True"], "use_cpu", True),
    (["--gradient_checkpointing", "True"], "activation_checkpointing", True),
])
def test_transformers4_flags_are_translated(flags, field, value):
    _, _, training_args = parse_arguments(REQUIRED + flags)
    assert getattr(training_args, field) == value


def test_removed_flags_are_accepted_and_ignored():
    _, _, training_args = parse_arguments(REQUIRED + ["--logging_dir", "logs", "--save_safetensors", "True"])
    assert training_args.output_dir == "out"


def test_overwrite_output_dir_is_a_switch():
    assert parse_arguments(REQUIRED + ["--overwrite_output_dir"])[2].overwrite_output_dir is True
    assert parse_arguments(REQUIRED)[2].overwrite_output_dir is False


def test_translation_keeps_other_tokens_in_place():
    assert translate_legacy_flags(["--a", "1", "--evaluation_strategy", "no", "--b"]) == ["--a", "1", "--eval_strategy", "no", "--b"]


@pytest.mark.parametrize("flags, match", [
    (["--evaluation_strategy", "no", "--eval_strategy", "steps"], "given both directly and through its transformers 4 name"),
    (["--warmup_ratio", "1.5"], r"--warmup_ratio: --warmup_ratio must be in \[0, 1\)"),
    (["--evaluation_strategy"], "--evaluation_strategy needs a value"),
    (["--group_by_length", "maybe"], "expected a boolean"),
])
def test_bad_legacy_flags_fail_clearly(flags, match):
    with pytest.raises(ValueError, match=match):
        translate_legacy_flags(flags)


@pytest.mark.parametrize("flags, match", [
    (["--output_dir", "out"], "--data_path is required"),
    (REQUIRED + ["--bits", "3"], r"--bits must be one of \(4, 8, 16\), got 3"),
    (REQUIRED + ["--lora_bias", "some"], "--lora_bias must be one of"),
    (REQUIRED + ["--image_aspect_ratio", "crop_split"], "--image_aspect_ratio must be one of"),
    (REQUIRED + ["--image_aspect_ratio", "anyres"], "--image_aspect_ratio anyres needs --image_grid_pinpoints"),
    (REQUIRED + ["--image_aspect_ratio", "anyres_max_0", "--image_grid_pinpoints", "(1x1),...,(2x2)"], "keeps no view"),
    (REQUIRED + ["--image_grid_pinpoints", "[[48, 96]]"], "--image_grid_pinpoints is used only with"),
    (REQUIRED + ["--image_aspect_ratio", "anyres", "--image_grid_pinpoints", "(2x2)"], "image_grid_pinpoints must be"),
    (REQUIRED + ["--mm_patch_merge_type", "spatial_unpad_maxpool2x2"], "--mm_patch_merge_type must be one of"),
    (REQUIRED + ["--tune_mm_mlp_adapter", "True", "--mm_use_im_start_end", "True"], "not supported"),
    (REQUIRED + ["--tune_mm_mlp_adapter", "True"], "--tune_mm_mlp_adapter needs --vision_tower"),
    (REQUIRED + ["--vision_tower", "t", "--tune_mm_mlp_adapter", "True", "--freeze_mm_mlp_adapter", "True"], "nothing to train"),
])
def test_bad_arguments_fail_clearly(flags, match):
    with pytest.raises(ValueError, match=match):
        parse_arguments(flags)


def test_unknown_flag_is_named():
    with pytest.raises(ValueError, match=r"not used by the HfArgumentParser: \['--no_such_flag', '1'\]"):
        parse_arguments(REQUIRED + ["--no_such_flag", "1"])


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is not None, reason="checks the error raised without bitsandbytes")
def test_quantized_training_without_bitsandbytes_is_one_sentence_before_any_work(tmp_path, capsys):
    """--bits 4 without bitsandbytes stops while the flags are parsed (exit 2, one line), before the data file is
    even read: here it does not exist, and the bitsandbytes sentence still comes first."""
    from llava.train.train import main
    from llava.utils import cli_main

    argv = ["--data_path", str(tmp_path / "absent.json"), "--output_dir", str(tmp_path / "out"), "--bits", "4"]
    assert cli_main(main, argv) == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "--bits 4 needs the bitsandbytes package" in message, message
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- recipe


def _args(**overrides):
    values = dict(max_steps=-1, per_device_train_batch_size=4, world_size=1, gradient_accumulation_steps=1,
                  num_train_epochs=1.0, dataloader_drop_last=False)
    return SimpleNamespace(**{**values, **overrides})


@pytest.mark.parametrize("samples, overrides, expected", [
    (12, {}, 3),
    (13, {}, 4),  # a last, partial batch is a step
    (13, {"dataloader_drop_last": True}, 3),
    (12, {"gradient_accumulation_steps": 2}, 2),
    (10, {"gradient_accumulation_steps": 2}, 2),  # 3 batches -> 2 updates
    (64, {"world_size": 8, "per_device_train_batch_size": 2}, 4),
    (12, {"num_train_epochs": 2.5}, 8),  # ceil(2.5 * 3)
    (12, {"max_steps": 5}, 5),
])
def test_planned_steps(samples, overrides, expected):
    assert planned_optimizer_steps(samples, _args(**overrides)) == expected


@pytest.mark.parametrize("tune, start, end", [(True, 2.0, 1.2), (False, 1.2, 0.8)])
def test_schedule_defaults_per_stage(tune, start, end):
    model_args, _, _ = parse_arguments(
        REQUIRED + ["--vision_tower", "clip", "--tune_mm_mlp_adapter", str(tune), "--mm_projector_type", "braco_k16"]
    )
    resolved, defaulted = resolve_run_defaults(model_args, 123)
    assert (resolved.mm_fourier_temp_start, resolved.mm_fourier_temp_end) == (start, end)
    assert (resolved.mm_fourier_temp_steps, resolved.mm_fourier_temp_schedule) == (123, "cosine")
    assert len(defaulted) == 4


def test_given_schedule_flags_are_kept():
    model_args, _, _ = parse_arguments(
        REQUIRED + ["--mm_projector_type", "braco_c3s7", "--mm_fourier_temp_end", "0.5", "--mm_fourier_temp_steps", "7"]
    )
    resolved, defaulted = resolve_run_defaults(model_args, 123)
    assert (resolved.mm_fourier_temp_start, resolved.mm_fourier_temp_end, resolved.mm_fourier_temp_steps) == (1.2, 0.5, 7)
    assert defaulted == ["mm_fourier_temp_schedule", "mm_fourier_temp_start"]


def test_projectors_without_a_plugin_get_no_run_defaults():
    model_args, _, _ = parse_arguments(REQUIRED + ["--mm_projector_type", "mlp2x_gelu"])
    resolved, defaulted = resolve_run_defaults(model_args, 123)
    assert defaulted == [] and resolved.mm_fourier_temp_start is None


@pytest.mark.parametrize("flags, message", [
    (["--mm_projector_type", "mlp2x_gelu", "--mm_fourier_C", "3"], "--mm_fourier_C is a setting of the 'braco' compressor"),
    (["--mm_projector_type", "braco_c3s7", "--mm_fourier_temp_schedule", "square"], "mm_fourier_temp_schedule must be one of"),
    (["--mm_projector_type", "braco_c3s7", "--mm_fourier_temp_steps", "-1"], "mm_fourier_temp_steps must be between 0"),
])
def test_plugin_flags_are_checked(flags, message):
    with pytest.raises(ValueError, match=message):
        parse_arguments(REQUIRED + flags)


@pytest.mark.parametrize("word, expected", [("false", False), ("no", False), ("0", False), ("True", True), ("yes", True)])
def test_plugin_boolean_flags_read_words(word, expected):
    model_args, _, _ = parse_arguments(REQUIRED + ["--mm_projector_type", "braco_c3s7", "--mm_fourier_spatial_use_norm", word])
    assert model_args.mm_fourier_spatial_use_norm is expected
