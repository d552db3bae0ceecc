"""The v1.5 training scripts: their commands (printed with DRY_RUN=1) parse into our arguments unchanged."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from llava.train.arguments import parse_arguments

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = REPO / "scripts" / "v1_5"
#: Flags that need a GPU (transformers refuses bf16/tf32 on a CPU) or start DeepSpeed; dropped before parsing.
GPU_ONLY = {"--deepspeed", "--bf16", "--tf32"}


def script_env(**extra: str) -> dict[str, str]:
    """This interpreter as the scripts' PYTHON (the Braco scripts parse budgets with it), MODEL/SEED unset."""
    env = {key: value for key, value in os.environ.items() if key not in ("MODEL", "SEED", "VISION_TOWER", "LAUNCHER")}
    return {**env, "PYTHON": sys.executable, **extra}


def dry_run(script: Path, *args: str) -> list[str]:
    result = subprocess.run(["bash", str(script), *args], env=script_env(DRY_RUN="1"), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return shlex.split(result.stdout)


def parse_command(command: list[str]):
    assert command[:2] == ["deepspeed", "llava/train/train_mem.py"]
    argv, rest = [], command[2:]
    while rest:
        flag, value = rest[0], rest[1] if len(rest) > 1 and not rest[1].startswith("--") else None
        rest = rest[2:] if value is not None else rest[1:]
        if flag not in GPU_ONLY:
            argv += [flag] + ([value] if value is not None else [])
    return parse_arguments(argv + ["--use_cpu", "True"])


def flag(command: list[str], name: str) -> str:
    values = [command[i + 1] for i, token in enumerate(command) if token == name]
    return values[-1]


@pytest.mark.parametrize("name", ["pretrain.sh", "finetune.sh", "finetune_lora.sh", "finetune_task.sh", "finetune_task_lora.sh"])
def test_upstream_scripts_parse(name: str):
    command = dry_run(SCRIPTS / name)
    model_args, data_args, training_args = parse_command(command)
    assert (REPO / flag(command, "--deepspeed")).is_file()
    assert training_args.eval_strategy == "no" and training_args.warmup_steps == 0.03
    assert training_args.model_max_length == 2048 and model_args.mm_vision_select_layer == -2
    stage1 = name == "pretrain.sh"
    assert model_args.tune_mm_mlp_adapter is stage1
    assert model_args.version == ("plain" if stage1 else "v1")
    assert training_args.lora_enable is ("lora" in name)
    assert (model_args.pretrain_mm_mlp_adapter is not None) is (name in ("finetune.sh", "finetune_lora.sh"))


@pytest.mark.parametrize("budget, projector", [("4", "braco_k4"), ("9", "braco_k9"), ("16", "braco_k16"), ("25", "braco_k25"),
                                               ("36", "braco_k36"), ("c3s7", "braco_c3s7"), ("braco_c4s9_idct", "braco_c4s9_idct")])
def test_braco_scripts_implement_the_two_stage_recipe(budget: str, projector: str):
    stage1 = dry_run(SCRIPTS / "braco" / "pretrain.sh", budget)
    stage2 = dry_run(SCRIPTS / "braco" / "finetune.sh", budget)
    m1, _, t1 = parse_command(stage1)
    m2, d2, t2 = parse_command(stage2)
    assert m1.mm_projector_type == m2.mm_projector_type == projector
    assert (m1.version, m1.tune_mm_mlp_adapter, t1.learning_rate, t1.per_device_train_batch_size) == ("plain", True, 1e-3, 32)
    assert (m2.version, m2.tune_mm_mlp_adapter, t2.learning_rate, t2.per_device_train_batch_size) == ("v1", False, 2e-5, 16)
    assert flag(stage1, "--deepspeed").endswith("zero2.json") and flag(stage2, "--deepspeed").endswith("zero3.json")
    assert m2.pretrain_mm_mlp_adapter == t1.output_dir + "/mm_projector.bin"
    assert d2.image_aspect_ratio == "pad" and t2.group_by_modality_length is True
    assert "llava" in Path(t2.output_dir).name and (t1.save_steps, t2.save_total_limit) == (500, 2)
    assert m1.model_name_or_path == m2.model_name_or_path == "lmsys/vicuna-7b-v1.5"


def test_extra_flags_are_appended():
    command = dry_run(SCRIPTS / "braco" / "finetune.sh", "16", "--mm_fourier_temp_steps", "4677")
    model_args, _, _ = parse_command(command)
    assert model_args.mm_fourier_temp_steps == 4677


@pytest.mark.parametrize("script", ["pretrain.sh", "finetune.sh"])
def test_braco_scripts_take_the_seed_as_second_argument(script):
    # the official launcher's BUDGET SEED (before this, "9 0" appended a stray "0" and the parser stopped)
    command = dry_run(SCRIPTS / "braco" / script, "9", "7", "--logging_steps", "5")
    model_args, _, training_args = parse_command(command)
    assert model_args.mm_projector_type == "braco_k9"
    assert (training_args.seed, training_args.data_seed, training_args.logging_steps) == (7, 7, 5)
    default = parse_command(dry_run(SCRIPTS / "braco" / script, "9"))[2]
    assert (default.seed, default.data_seed) == (0, 0)


@pytest.mark.parametrize("args, message", [((), "usage:"), (("x1",), "unknown budget 'x1'"), (("0",), "unknown budget '0'")])
def test_bad_budget_is_refused(args, message):
    result = subprocess.run(["bash", str(SCRIPTS / "braco" / "pretrain.sh"), *args], env=script_env(), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and message in result.stderr


def test_a_missing_interpreter_is_one_sentence():
    result = subprocess.run(["bash", str(SCRIPTS / "braco" / "pretrain.sh"), "16"], env=script_env(PYTHON="no-such-python"),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "no Python interpreter 'no-such-python'; set PYTHON" in result.stderr
