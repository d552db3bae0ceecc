"""The official Braco workflow's interface: ``scripts/train_braco.sh BUDGET SEED`` and ``scripts/evaluate.sh BUDGET SEED``
with REPRO_ROOT / MODEL_ROOT / DATA_ROOT / GRAD_ACCUM_STEPS, the run layout, and ``configs/braco.yaml``.

The expected values come from the official launcher and protocol file (braco-official §5), written out here or read
from configs/braco.yaml, which holds the official keys and values."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from braco_patch.config import BracoConfig

from .conftest import TrainData
from .test_scripts import REPO, flag, parse_command

PROTOCOL = yaml.safe_load((REPO / "configs" / "braco.yaml").read_text())
#: The official launcher's annealing (stage 1: 2.0 -> 1.2 over 2180 steps; stage 2: 1.2 -> 0.8 over 4677).
OFFICIAL_TEMPERATURES = {1: (2.0, 1.2, 2180), 2: (1.2, 0.8, 4677)}
GPUS = 8  # the official launcher's per-GPU batch sizes assume 8 GPUs


def _env(**extra: str) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    env = {key: value for key, value in os.environ.items() if key not in ("MODEL", "VISION_TOWER", "SEED", "BENCHMARKS")}
    return {**env, "PATH": bin_dir + os.pathsep + env.get("PATH", ""), "PYTHON": sys.executable, **extra}


def _bash(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts" / script), *args], env=_env(**env), capture_output=True, text=True,
                          timeout=900, cwd=REPO)


def _dry(script: str, *args: str, **env: str) -> list[list[str]]:
    result = _bash(script, *args, DRY_RUN="1", REPRO_ROOT="/repro", MODEL_ROOT="/models", DATA_ROOT="/data", **env)
    assert result.returncode == 0, result.stderr
    return [shlex.split(line) for line in result.stdout.splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("budget", [4, 9, 16, 25])
@pytest.mark.parametrize("accumulation", ["1", "2"])
def test_train_braco_dry_run_is_the_official_recipe(budget: int, accumulation: str) -> None:
    commands = _dry("train_braco.sh", str(budget), "3", GRAD_ACCUM_STEPS=accumulation)
    assert len(commands) == 2
    run = f"/repro/outputs/braco/k{budget}/seed3"
    split = PROTOCOL["methods"]["braco"]["split"][budget]
    for stage, command in enumerate(commands, start=1):
        model_args, data_args, training_args = parse_command(command)
        protocol = PROTOCOL["training"][f"stage{stage}"]
        assert training_args.output_dir == f"{run}/stage{stage}"
        assert (model_args.model_name_or_path, model_args.vision_tower) == ("/models/vicuna-7b-v1.5", "/models/clip-vit-large-patch14-336")
        assert data_args.data_path == "/data/" + protocol["dataset"] and data_args.image_folder == "/data/" + protocol["images"]
        assert training_args.learning_rate == protocol["learning_rate"]
        assert training_args.per_device_train_batch_size * GPUS * training_args.gradient_accumulation_steps == protocol["global_batch_size"] * int(accumulation)
        assert training_args.gradient_accumulation_steps == int(accumulation)
        assert (training_args.num_train_epochs, training_args.warmup_steps, training_args.lr_scheduler_type.value) == (
            protocol["epochs"], protocol["warmup_ratio"], protocol["scheduler"])
        assert (training_args.seed, training_args.data_seed, training_args.save_steps, training_args.save_total_limit) == (3, 3, 500, 2)
        assert model_args.mm_vision_select_layer == PROTOCOL["vision_feature_layer"] and training_args.report_to in ([], ["none"], "none")
        assert training_args.model_max_length == 2048
        # the projector the budget names: the yaml's split, as braco_patch builds it
        config = BracoConfig.from_name(model_args.mm_projector_type)
        assert (config.cutoff, config.residual_tokens, config.resolved_coordinates == "idct") == (split["C"], split["S"], split["low_idct"])
        assert config.output_tokens == budget
        start, end, steps = OFFICIAL_TEMPERATURES[stage]
        assert model_args.mm_fourier_temp_steps == steps
        assert flag(command, "--deepspeed").endswith("zero2.json" if stage == 1 else "zero3.json")
    stage1, stage2 = (parse_command(command) for command in commands)
    assert (stage1[0].version, stage1[0].tune_mm_mlp_adapter, stage2[0].version, stage2[0].tune_mm_mlp_adapter) == ("plain", True, "v1", False)
    assert stage2[0].pretrain_mm_mlp_adapter == f"{run}/stage1/mm_projector.bin"
    assert stage2[1].image_aspect_ratio == "pad" and stage2[2].group_by_modality_length is True


def test_evaluate_dry_run_covers_the_protocol_s_benchmarks() -> None:
    commands = _dry("evaluate.sh", "16", "0")
    answers = [flag(command, "--answers-file") for command in commands if "--answers-file" in command]
    benchmarks = [Path(path).parent.name for path in answers]
    assert benchmarks == PROTOCOL["evaluation"]["benchmarks"] == (REPO / "configs" / "benchmarks.txt").read_text().split()
    run = "/repro/outputs/braco/k16/seed0"
    assert all(path == f"{run}/evaluation/{name}/answers.jsonl" for path, name in zip(answers, benchmarks))
    loaders = [command for command in commands if "--model-path" in command]
    assert all(flag(c, "--model-path") == f"{run}/llava-braco" and flag(c, "--temperature") == "0" and flag(c, "--conv-mode") == "vicuna_v1"
               for c in loaders)
    by_split = {Path(flag(c, "--question-file")).name: c for c in loaders}
    assert flag(by_split["mmbench_dev_cn_20231003.tsv"], "--lang") == "cn" and flag(by_split["mmbench_dev_20230712.tsv"], "--lang") == "en"
    assert "--single-pred-prompt" in by_split["llava_test_CQM-A.json"]
    mme = [c for c in commands if "llava.eval.eval_mme" in c][0]
    assert flag(mme, "--experiment") == "braco_k16_seed0"


@pytest.mark.parametrize("args, env, message", [
    (("9",), {}, "usage: bash"),
    (("9", "x"), {}, "SEED must be an integer >= 0, got 'x'"),
    (("10x", "0"), {}, "unknown budget '10x'"),
    (("9", "0"), {"REPRO_ROOT": ""}, "set REPRO_ROOT"),
])
def test_bad_arguments_are_one_sentence(args, env, message) -> None:
    result = _bash("train_braco.sh", *args, **{"REPRO_ROOT": "/repro", "MODEL_ROOT": "/models", "DATA_ROOT": "/data", **env})
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("script", ["train_braco.sh", "evaluate.sh"])
def test_an_interpreter_without_the_project_is_one_sentence(script, tmp_path: Path) -> None:
    # A python without torch/llava (the environment not activated) ended in a traceback from braco_patch.budget.
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S "$@"\n')  # no site-packages, no checkout on the path
    bare.chmod(0o755)
    result = _bash(script, "9", "0", PYTHON=str(bare), DRY_RUN="1", REPRO_ROOT="/repro", MODEL_ROOT="/models", DATA_ROOT="/data")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"'{bare}' cannot import torch, llava and braco_patch; activate the environment" in result.stderr


def test_missing_model_folder_is_named(tmp_path: Path) -> None:
    result = _bash("train_braco.sh", "9", "0", REPRO_ROOT=str(tmp_path), MODEL_ROOT=str(tmp_path / "models"), DATA_ROOT=str(tmp_path))
    assert result.returncode == 2 and f"the LLM folder '{tmp_path}/models/vicuna-7b-v1.5' is not a folder" in result.stderr
    assert not (tmp_path / "outputs").exists()


def test_an_unwritable_repro_root_is_one_sentence(official_roots, tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = {**{key: str(value) for key, value in official_roots.items()}, "REPRO_ROOT": str(blocker)}
    result = _bash("train_braco.sh", "9", "0", **env)
    assert result.returncode == 2 and f"cannot write to '{blocker}/outputs/braco/k9/seed0'" in result.stderr
    assert blocker.read_text() == "not a folder"


def test_evaluate_refuses_a_llava_braco_that_is_not_the_link(tmp_path) -> None:
    run = tmp_path / "outputs" / "braco" / "k4" / "seed0"
    (run / "stage2").mkdir(parents=True)
    (run / "llava-braco").mkdir()
    (run / "llava-braco" / "notes.txt").write_text("mine")
    result = _bash("evaluate.sh", "4", "0", REPRO_ROOT=str(tmp_path), MODEL_ROOT=str(tmp_path), DATA_ROOT=str(tmp_path))
    assert result.returncode == 2 and "exists but is not a link to" in result.stderr
    assert (run / "llava-braco" / "notes.txt").read_text() == "mine"


def test_evaluate_needs_the_stage2_checkpoint(tmp_path) -> None:
    result = _bash("evaluate.sh", "4", "0", REPRO_ROOT=str(tmp_path), MODEL_ROOT=str(tmp_path), DATA_ROOT=str(tmp_path))
    assert result.returncode == 2 and "the stage-2 checkpoint of this run" in result.stderr and "train_braco.sh 4 0" in result.stderr


def test_unknown_benchmark_is_one_sentence(tmp_path) -> None:
    result = subprocess.run(["bash", str(REPO / "scripts" / "eval_one.sh"), "vqav3"], capture_output=True, text=True, timeout=60,
                            env=_env(MODEL_PATH="m", RESULT_ROOT=str(tmp_path), DATA_ROOT=str(tmp_path)))
    assert result.returncode == 2 and "unknown benchmark 'vqav3'" in result.stderr and not (tmp_path / "vqav3").exists()


# ---------------------------------------------------------------------------------------------- real tiny runs

#: What makes the paper's recipe run on a CPU in seconds (appended to both stages; later flags win).
# No --deepspeed '': LAUNCHER=python turns the scripts' DeepSpeed config off by itself (docs/TRAINING.md).
TINY = ["--bf16", "False", "--tf32", "False", "--use_cpu", "True", "--max_steps", "2",
        "--per_device_train_batch_size", "2", "--model_max_length", "256", "--dataloader_num_workers", "0", "--save_steps", "1"]


def test_python_launcher_turns_deepspeed_off_and_user_flags_still_win() -> None:
    # Under a Python launcher DeepSpeed would look for MPI (mpi4py) and stop; the scripts' config becomes ''.
    for stage in _dry("train_braco.sh", "9", "0", LAUNCHER="python"):
        assert stage[:2] == ["python", "llava/train/train_mem.py"] and flag(stage, "--deepspeed") == ""
    for stage in _dry("train_braco.sh", "9", "0", LAUNCHER="deepspeed"):
        assert flag(stage, "--deepspeed").endswith(".json")
    [stage1, _] = _dry("train_braco.sh", "9", "0", "--deepspeed", "mine.json", LAUNCHER="python")
    assert [stage1[i + 1] for i, word in enumerate(stage1) if word == "--deepspeed"] == ["", "mine.json"]  # later wins


@pytest.fixture(scope="module")
def official_roots(tmp_path_factory, tiny_base_llm: Path, tiny_tower_dir: Path, train_data: TrainData) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("official")
    models, data = root / "models", root / "data"
    (models).mkdir()
    (models / "vicuna-7b-v1.5").symlink_to(tiny_base_llm)
    (models / "clip-vit-large-patch14-336").symlink_to(tiny_tower_dir)
    for folder, source in (("LLaVA-Pretrain", train_data.pretrain), ("LLaVA-Instruct", train_data.finetune)):
        (data / folder).mkdir(parents=True)
        (data / folder / "images").symlink_to(train_data.images)
    (data / "LLaVA-Pretrain" / "blip_laion_cc_sbu_558k.json").symlink_to(train_data.pretrain)
    (data / "LLaVA-Instruct" / "llava_v1_5_mix665k.json").symlink_to(train_data.finetune)
    pope = data / "eval" / "pope"
    (pope / "coco").mkdir(parents=True)
    (pope / "coco-val2014").symlink_to(train_data.images)
    questions = [{"question_id": i, "image": f"img{i}.png", "text": "Is there a circle in the image?", "category": "random"}
                 for i in range(3)]
    (pope / "llava_pope_test.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (pope / "coco" / "coco_pope_random.json").write_text("".join(json.dumps({"label": label}) + "\n" for label in ("yes", "no", "yes")))
    return {"REPRO_ROOT": root / "repro", "MODEL_ROOT": models, "DATA_ROOT": data}


@pytest.fixture(scope="module")
def official_run(official_roots) -> tuple[Path, subprocess.CompletedProcess]:
    env = {key: str(value) for key, value in official_roots.items()}
    result = _bash("train_braco.sh", "9", "0", *TINY, LAUNCHER=sys.executable, **env)
    assert result.returncode == 0, result.stderr[-4000:]
    return official_roots["REPRO_ROOT"] / "outputs" / "braco" / "k9" / "seed0", result


def test_train_braco_writes_the_official_layout(official_run) -> None:
    run, _ = official_run
    assert (run / "COMPLETE").is_file()
    assert {p.name for p in (run / "metadata").iterdir()} == {
        "python.txt", "pip-freeze.txt", "nvidia-smi.txt", "llava-commit.txt", "resolved_protocol.yaml"}
    assert yaml.safe_load((run / "metadata" / "resolved_protocol.yaml").read_text()) == PROTOCOL
    assert (run / "stage1" / "mm_projector.bin").is_file() and (run / "stage2" / "model.safetensors").is_file()
    for stage, (start, end, steps) in OFFICIAL_TEMPERATURES.items():
        config = json.loads((run / f"stage{stage}" / "config.json").read_text())
        assert config["mm_projector_type"] == "braco_k9"
        assert (config["mm_fourier_temp_start"], config["mm_fourier_temp_end"], config["mm_fourier_temp_steps"]) == (start, end, steps)
    stage1 = torch.load(run / "stage1" / "mm_projector.bin", weights_only=True)
    assert stage1 and all(key.startswith("model.mm_projector.") for key in stage1)


def test_a_rerun_skips_finished_stages_and_resumes_an_interrupted_one(official_run, official_roots) -> None:
    run, _ = official_run
    env = {key: str(value) for key, value in official_roots.items()}
    result = _bash("train_braco.sh", "9", "0", *TINY, LAUNCHER=sys.executable, **env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"{run}/stage1 finished earlier (mm_projector.bin)" in result.stderr
    assert f"{run}/stage2 finished earlier (model.safetensors)" in result.stderr
    # a run killed after stage 2's last checkpoint, before its final save
    (run / "stage2" / "model.safetensors").unlink()
    (run / "COMPLETE").unlink()
    result = _bash("train_braco.sh", "9", "0", *TINY, LAUNCHER=sys.executable, **env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"resuming {run}/stage2 from its newest complete checkpoint" in result.stderr
    assert "checkpoint-2 had already finished all 2 steps" in result.stderr
    assert (run / "stage2" / "model.safetensors").is_file() and (run / "COMPLETE").is_file()


def test_evaluate_answers_and_scores_pope(official_run, official_roots) -> None:
    run, _ = official_run
    env = {key: str(value) for key, value in official_roots.items()}
    result = _bash("evaluate.sh", "9", "0", BENCHMARKS="pope", DEVICE="cpu", **env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (run / "llava-braco").is_symlink() and os.readlink(run / "llava-braco") == "stage2"
    answers = [json.loads(line) for line in (run / "evaluation" / "pope" / "answers.jsonl").read_text().splitlines()]
    assert sorted(answer["question_id"] for answer in answers) == [0, 1, 2]
    score = json.loads((run / "evaluation" / "pope" / "score.json").read_text())
    assert "score" in score and (run / "evaluation" / "COMPLETE").is_file()
