"""LLaVA-NeXT's training flags: parsed with NeXT's meaning, written to config.json under NeXT's keys, what trains
(``--mm_tunable_parts``), per-module learning rates, ``--attn_implementation``, and the refused flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from llava.model.builder import load_pretrained_model
from llava.train import next_arguments
from llava.train.arguments import parse_arguments
from llava.train.next_arguments import REFUSED_FLAGS
from llava.train.train import train
from llava.utils import UserError

from .conftest import common_flags

REQUIRED = ["--data_path", "data.json", "--output_dir", "out"]
TOWER = "model.vision_tower.vision_tower."

#: Every flag of LLaVA-NeXT's scripts/train/finetune_ov.sh and the video script (SO400M_Qwen2_7B_ov_to_video_am9.sh)
#: that train.py reads, written out from those scripts (paths shortened).
NEXT_OV_FLAGS = [
    "--deepspeed", "scripts/zero3.json", "--model_name_or_path", "ckpt", "--version", "qwen_1_5",
    "--data_path", "next_ov_stage.yaml", "--image_folder", "images", "--video_folder", ".",
    "--mm_tunable_parts=mm_vision_tower,mm_mlp_adapter,mm_language_model", "--mm_vision_tower_lr=2e-6",
    "--vision_tower", "google/siglip-so400m-patch14-384", "--mm_projector_type", "mlp2x_gelu",
    "--mm_vision_select_layer", "-2", "--mm_use_im_start_end", "False", "--mm_use_im_patch_token", "False",
    "--group_by_modality_length", "True", "--image_aspect_ratio", "anyres_max_9", "--image_grid_pinpoints", "(1x1),...,(6x6)",
    "--mm_patch_merge_type", "spatial_unpad", "--bf16", "True", "--run_name", "ov", "--output_dir", "out",
    "--num_train_epochs", "1", "--per_device_train_batch_size", "1", "--per_device_eval_batch_size", "4",
    "--gradient_accumulation_steps", "2", "--evaluation_strategy", "no", "--save_strategy", "steps", "--save_steps", "1000",
    "--save_total_limit", "1", "--learning_rate", "1e-5", "--weight_decay", "0.", "--warmup_ratio", "0.03",
    "--lr_scheduler_type", "cosine", "--logging_steps", "1", "--tf32", "True", "--model_max_length", "32768",
    "--gradient_checkpointing", "True", "--dataloader_num_workers", "4", "--lazy_preprocess", "True", "--report_to", "none",
    "--torch_compile", "True", "--torch_compile_backend", "inductor", "--dataloader_drop_last", "True",
    "--frames_upbound", "64", "--mm_newline_position", "grid", "--add_time_instruction", "True", "--force_sample", "True",
    "--mm_spatial_pool_stride", "2", "--attn_implementation", "sdpa",
]
#: Dropped before parsing on a CPU: transformers refuses bf16/tf32 without a GPU, and --deepspeed starts DeepSpeed.
GPU_ONLY = {"--deepspeed": 1, "--bf16": 1, "--tf32": 1}


def _cpu(argv: list[str]) -> list[str]:
    out, index = [], 0
    while index < len(argv):
        if argv[index] in GPU_ONLY:
            index += 1 + GPU_ONLY[argv[index]]
            continue
        out.append(argv[index])
        index += 1
    return out + ["--use_cpu", "True"]


def test_next_onevision_flags_parse_with_next_meaning() -> None:
    model_args, data_args, training_args = parse_arguments(_cpu(NEXT_OV_FLAGS))
    assert model_args.mm_tunable_parts == "mm_vision_tower,mm_mlp_adapter,mm_language_model"
    assert training_args.mm_vision_tower_lr == 2e-6 and training_args.attn_implementation == "sdpa"
    assert (model_args.mm_spatial_pool_stride, model_args.mm_spatial_pool_mode, model_args.mm_newline_position) == (2, "bilinear", "grid")
    assert (data_args.frames_upbound, data_args.video_folder, data_args.add_time_instruction, data_args.force_sample) == (64, ".", True, True)
    assert (data_args.image_aspect_ratio, model_args.mm_patch_merge_type) == ("anyres_max_9", "spatial_unpad")
    assert training_args.torch_compile and training_args.dataloader_drop_last and training_args.run_name == "ov"


def test_next_defaults_are_next_s() -> None:
    model_args, data_args, training_args = parse_arguments(REQUIRED)
    # LLaVA-NeXT's train.py defaults, written out here.
    assert (model_args.mm_tunable_parts, model_args.unfreeze_mm_vision_tower) == (None, False)
    assert (model_args.mm_spatial_pool_stride, model_args.mm_spatial_pool_mode, model_args.mm_newline_position) == (None, "bilinear", "grid")
    assert (data_args.video_folder, data_args.video_fps, data_args.frames_upbound) == (None, 1, 0)
    assert (data_args.add_time_instruction, data_args.force_sample) == (False, False)
    assert training_args.mm_vision_tower_lr is None and training_args.verbose_logging is False


@pytest.mark.parametrize("flags, message", [
    (["--mm_tunable_parts", "mm_vision_resampler", "--vision_tower", "t"], "mm_vision_resampler, but LLaVA-NeXT's vision resamplers"),
    (["--mm_tunable_parts", "mm_mlp_adapter,lm", "--vision_tower", "t"], "'lm' is none of them"),
    (["--mm_tunable_parts", ",", "--vision_tower", "t"], "must be a comma list"),
    (["--mm_tunable_parts", "mm_mlp_adapter"], "needs --vision_tower"),
    (["--mm_tunable_parts", "mm_language_model", "--tune_mm_mlp_adapter", "True", "--vision_tower", "t"],
     "--tune_mm_mlp_adapter True contradicts --mm_tunable_parts 'mm_language_model'"),
    (["--mm_tunable_parts", "mm_mlp_adapter", "--unfreeze_mm_vision_tower", "True", "--vision_tower", "t"],
     "--unfreeze_mm_vision_tower True contradicts"),
    (["--mm_tunable_parts", "mm_mlp_adapter", "--freeze_mm_mlp_adapter", "True", "--vision_tower", "t"],
     "--freeze_mm_mlp_adapter True contradicts"),
    (["--mm_vision_tower_lr", "2e-6", "--vision_tower", "t"], "the vision tower does not train"),
    (["--mm_vision_tower_lr", "-1", "--mm_tunable_parts", "mm_vision_tower", "--vision_tower", "t"], "finite, >= 0"),
    (["--mm_spatial_pool_mode", "avg"], "--mm_spatial_pool_mode must be one of bilinear, average, max, got 'avg'"),
    (["--mm_newline_position", "row"], "--mm_newline_position must be one of grid, frame, one_token, no_token"),
    (["--mm_spatial_pool_stride", "0"], "--mm_spatial_pool_stride must be a positive integer, got 0"),
    (["--frames_upbound", "-1"], "--frames_upbound must be an integer from 0 to 4096 (0: one frame per second, no cap), got -1"),
    (["--frames_upbound", "100000"], "--frames_upbound must be an integer from 0 to 4096"),
    (["--frames_upbound", "0", "--force_sample", "True"], "--force_sample takes --frames_upbound evenly spread frames"),
    (["--video_folder", "/no/such/videos"], "--video_folder '/no/such/videos' is not a folder"),
    (["--attn_implementation", "flash"], "--attn_implementation must be one of flash_attention_2, sdpa, eager"),
])
def test_bad_next_values_are_one_sentence(flags, message) -> None:
    with pytest.raises(UserError, match=None) as error:
        parse_arguments(REQUIRED + flags)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("flag", ["mm_resampler_type", "mm_spatial_pool_out_channels", "dpo_alpha", "add_faster_video",
                                  "image_crop_resolution", "model_class_name", "group_by_modality_length_auto", "s2"])
def test_refused_next_flags_name_what_to_use(flag) -> None:
    with pytest.raises(UserError) as error:
        parse_arguments(REQUIRED + [f"--{flag}", "1"])
    assert str(error.value) == f"--{flag} {REFUSED_FLAGS[flag]}"


def test_a_refused_flag_exits_2_with_one_line(tmp_path: Path) -> None:
    # LLaVA-NeXT's dpo.sh passes these; through the real command line (train.py run as a file, as upstream runs it).
    result = subprocess.run(
        [sys.executable, "llava/train/train.py", *REQUIRED, "--mm_resampler_type", "spatial_pool"],
        cwd=Path(__file__).resolve().parents[3], capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("train.py: error: --mm_resampler_type belongs to a vision resampler")


def test_flash_attention_without_the_package_is_one_sentence(monkeypatch) -> None:
    real = next_arguments.importlib.util.find_spec
    monkeypatch.setattr(next_arguments.importlib.util, "find_spec", lambda name, *a: None if name == "flash_attn" else real(name, *a))
    with pytest.raises(UserError, match="needs the flash-attn package .* or pass --attn_implementation sdpa"):
        parse_arguments(REQUIRED + ["--attn_implementation", "flash_attention_2"])


def test_report_to_wandb_without_wandb_names_both_fixes(monkeypatch) -> None:
    real = next_arguments.importlib.util.find_spec
    monkeypatch.setattr(next_arguments.importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(UserError, match=r'pip install -e "\.\[train\]" \(or pip install wandb\), or pass --report_to none'):
        parse_arguments(REQUIRED + ["--report_to", "wandb"])


# ---------------------------------------------------------------------------------------------- real tiny runs


def _flags(base, tower, data, output: Path, *extra: str) -> list[str]:
    return common_flags(base, tower, data, "mlp2x_gelu") + [
        "--version", "v1", "--data_path", str(data.finetune), "--output_dir", str(output), "--max_steps", "2",
        "--per_device_train_batch_size", "2", "--learning_rate", "1e-3", "--save_strategy", "no", *extra,
    ]


def _trainable(model) -> set[str]:
    return {name for name, param in model.named_parameters() if param.requires_grad}


@pytest.fixture(scope="module")
def all_parts_run(tmp_path_factory, tiny_base_llm, tiny_tower_dir, train_data):
    output = tmp_path_factory.mktemp("next") / "llava-tiny-ov"
    trainer = train(argv=_flags(
        tiny_base_llm, tiny_tower_dir, train_data, output,
        "--mm_tunable_parts", "mm_vision_tower,mm_mlp_adapter,mm_language_model", "--mm_vision_tower_lr", "1e-2",
        "--mm_projector_lr", "5e-3", "--attn_implementation", "eager", "--mm_spatial_pool_stride", "2",
        "--mm_newline_position", "frame", "--mm_spatial_pool_mode", "average",
    ))
    return output, trainer


def test_all_three_parts_train_and_each_module_has_its_learning_rate(all_parts_run, tiny_tower_dir) -> None:
    output, trainer = all_parts_run
    model = trainer.model
    assert _trainable(model) == {name for name, _ in model.named_parameters()}
    lr_of = {id(param): group["initial_lr"] for group in trainer.optimizer.param_groups for param in group["params"]}
    for name, param in model.named_parameters():
        expected = 1e-2 if "vision_tower" in name else 5e-3 if "mm_projector" in name else 1e-3
        assert lr_of[id(param)] == expected, name
    # the tower really trained: its used layers moved away from the tower folder's weights
    original = load_file(str(tiny_tower_dir / "model.safetensors"))
    tower = {k.removeprefix(TOWER): v for k, v in model.state_dict().items() if k.startswith(TOWER)}
    moved = [k for k, v in original.items() if not torch.equal(v, tower[k].float())]
    assert "encoder.layers.0.self_attn.q_proj.weight" in moved


def test_next_keys_land_in_config_json(all_parts_run) -> None:
    output, trainer = all_parts_run
    config = json.loads((output / "config.json").read_text())
    assert config["mm_tunable_parts"] == "mm_vision_tower,mm_mlp_adapter,mm_language_model"
    assert (config["mm_vision_tower_lr"], config["mm_projector_lr"]) == (1e-2, 5e-3)
    assert (config["mm_spatial_pool_stride"], config["mm_spatial_pool_mode"], config["mm_newline_position"]) == (2, "average", "frame")
    assert (config["add_time_instruction"], config["force_sample"]) == (False, False)
    assert trainer.model.config._attn_implementation == "eager"


def test_the_trained_tower_is_the_one_loaded_for_inference(all_parts_run) -> None:
    output, trainer = all_parts_run
    trained = {k: v for k, v in trainer.model.state_dict().items() if k.startswith(TOWER)}
    _, model, _, _ = load_pretrained_model(str(output), None, "llava-tiny-ov", device="cpu")
    loaded = model.state_dict()
    assert trained and all(torch.equal(loaded[key], value.float()) for key, value in trained.items())


def test_mm_mlp_adapter_alone_is_stage1(tmp_path, tiny_base_llm, tiny_tower_dir, train_data) -> None:
    # NeXT's pretrain scripts: --mm_tunable_parts="mm_mlp_adapter" instead of --tune_mm_mlp_adapter True.
    output = tmp_path / "pretrain"
    trainer = train(argv=common_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu") + [
        "--version", "plain", "--data_path", str(train_data.pretrain), "--output_dir", str(output), "--max_steps", "1",
        "--per_device_train_batch_size", "2", "--mm_tunable_parts=mm_mlp_adapter",
    ])
    projector = {f"model.mm_projector.{i}.{kind}" for i in (0, 2) for kind in ("weight", "bias")}
    assert _trainable(trainer.model) == projector
    assert set(torch.load(output / "mm_projector.bin", weights_only=True)) == projector
    assert not (output / "model.safetensors").exists()


def test_language_model_alone_freezes_projector_and_tower(tmp_path, tiny_base_llm, tiny_tower_dir, train_data) -> None:
    trainer = train(argv=_flags(tiny_base_llm, tiny_tower_dir, train_data, tmp_path / "llava-lm",
                                "--mm_tunable_parts", "mm_language_model"))
    names = [name for name, _ in trainer.model.named_parameters()]
    assert _trainable(trainer.model) == {n for n in names if "vision_tower" not in n and "mm_projector" not in n}


def test_unfreeze_mm_vision_tower_trains_the_tower_with_the_legacy_flags(tmp_path, tiny_base_llm, tiny_tower_dir, train_data) -> None:
    trainer = train(argv=_flags(tiny_base_llm, tiny_tower_dir, train_data, tmp_path / "llava-unfrozen",
                                "--unfreeze_mm_vision_tower", "True"))
    assert {name for name, _ in trainer.model.named_parameters()} == _trainable(trainer.model)
    assert json.loads((tmp_path / "llava-unfrozen" / "config.json").read_text())["unfreeze_mm_vision_tower"] is True


def test_report_to_wandb_trains_offline(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, monkeypatch) -> None:
    # upstream's scripts pass --report_to wandb; wandb ships in the train extra (no network here: offline mode)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    argv = [a if a != "none" else "wandb" for a in _flags(tiny_base_llm, tiny_tower_dir, train_data, tmp_path / "llava-wandb")]
    trainer = train(argv=argv)
    assert trainer.state.global_step == 2
    assert any((tmp_path / "wandb").glob("offline-run-*")), os.listdir(tmp_path)
