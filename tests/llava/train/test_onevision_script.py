"""scripts/next/onevision.sh: LLaVA-NeXT's OneVision recipe with NeXT's flags, checked as printed (DRY_RUN=1) and run
for real, scaled down to a tiny Qwen2 + SigLIP on a CPU, through train.py's command line."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from llava.model.builder import load_pretrained_model

from .conftest import caption_record, chat_record, text_record
from .test_scripts import REPO, flag, parse_command, script_env

SCRIPT = REPO / "scripts" / "next" / "onevision.sh"


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env=script_env(**env), capture_output=True, text=True, timeout=1200,
                          cwd=REPO)


@pytest.mark.parametrize("method, projector", [("vanilla", "mlp2x_gelu"), ("braco", "braco_k16")])
def test_dry_run_is_next_s_onevision_recipe(method: str, projector: str) -> None:
    result = _run(method, DRY_RUN="1")
    assert result.returncode == 0, result.stderr
    stage1, stage2 = (shlex.split(line) for line in result.stdout.splitlines())
    (m1, _, t1), (m2, d2, t2) = parse_command(stage1), parse_command(stage2)
    # stage 1 as NeXT's pretrain_siglip.sh: only the projector, BLIP-558K, lr 1e-3, 8192 tokens
    assert (m1.mm_tunable_parts, m1.version, t1.learning_rate, t1.model_max_length) == ("mm_mlp_adapter", "plain", 1e-3, 8192)
    # stage 2 as NeXT's finetune_ov.sh: every part, the tower at 2e-6, anyres_max_9 over (1x1)..(6x6), spatial_unpad
    assert m2.mm_tunable_parts == "mm_vision_tower,mm_mlp_adapter,mm_language_model" and t2.mm_vision_tower_lr == 2e-6
    assert (d2.image_aspect_ratio, d2.image_grid_pinpoints, m2.mm_patch_merge_type) == ("anyres_max_9", "(1x1),...,(6x6)", "spatial_unpad")
    assert (m2.version, t2.learning_rate, t2.per_device_train_batch_size, t2.gradient_accumulation_steps) == ("qwen_1_5", 1e-5, 1, 2)
    assert (d2.frames_upbound, m2.mm_newline_position, m2.mm_spatial_pool_stride, t2.attn_implementation) == (32, "grid", 2, "sdpa")
    assert d2.data_path.endswith(".yaml") and m2.pretrain_mm_mlp_adapter == t1.output_dir + "/mm_projector.bin"
    assert m1.mm_projector_type == m2.mm_projector_type == projector
    assert m1.vision_tower == m2.vision_tower == "google/siglip-so400m-patch14-384"
    assert flag(stage2, "--deepspeed") == "scripts/zero3.json" and "llava" in Path(t2.output_dir).name


#: What makes the recipe run on a CPU in seconds (appended to both stages; later flags win).
TINY = ["--deepspeed", "", "--bf16", "False", "--tf32", "False", "--use_cpu", "True", "--torch_compile", "False",
        "--report_to", "none", "--max_steps", "2", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
        "--dataloader_num_workers", "0", "--dataloader_drop_last", "False", "--save_strategy", "no"]


def test_tiny_onevision_run(tmp_path, tiny_qwen_tokenizer_dir, train_data) -> None:
    from llava.testing.tiny import build_tiny_llm, build_tiny_vision_tower

    llm = build_tiny_llm(tmp_path / "qwen2-tiny", tiny_qwen_tokenizer_dir, llm="qwen2")
    tower = build_tiny_vision_tower("siglip_vision_model", tmp_path / "siglip-tiny", image_size=54, patch_size=6)
    mixture = tmp_path / "onevision.yaml"
    (tmp_path / "chat.json").write_text(json.dumps([chat_record(i) for i in range(6)]))
    (tmp_path / "text.json").write_text(json.dumps([text_record(i) for i in range(4)]))
    mixture.write_text(f"datasets:\n  - json_path: {tmp_path / 'chat.json'}\n    sampling_strategy: \"first:50%\"\n"
                       f"  - json_path: {tmp_path / 'text.json'}\n    sampling_strategy: all\n")
    (tmp_path / "pretrain.json").write_text(json.dumps([caption_record(i) for i in range(4)]))
    (tmp_path / "videos").mkdir()
    checkpoints = tmp_path / "checkpoints"
    result = _run("vanilla", *TINY, LAUNCHER=sys.executable, LLM_VERSION=str(llm), VISION_MODEL_VERSION=str(tower),
                  PRETRAIN_DATA=str(tmp_path / "pretrain.json"), PRETRAIN_IMAGES=str(train_data.images), DATA_YAML=str(mixture),
                  IMAGE_FOLDER=str(train_data.images), VIDEO_FOLDER=str(tmp_path / "videos"), GRID_PINPOINTS="(1x1),...,(2x2)",
                  MODEL_MAX_LENGTH="1024", CHECKPOINTS=str(checkpoints))
    assert result.returncode == 0, result.stderr[-4000:]
    stage1 = checkpoints / "projectors" / "llavanext-siglip-tiny-qwen2-tiny-mlp2x_gelu-pretrain_blip558k_plain"
    stage2 = checkpoints / "llava-onevision-siglip-tiny-qwen2-tiny-mlp2x_gelu-ov_stage_am9"
    assert set(torch.load(stage1 / "mm_projector.bin", weights_only=True)) == {f"model.mm_projector.{i}.{k}" for i in (0, 2) for k in ("weight", "bias")}
    config = json.loads((stage2 / "config.json").read_text())
    assert (config["model_type"], config["image_aspect_ratio"], config["mm_patch_merge_type"]) == ("llava_qwen", "anyres_max_9", "spatial_unpad")
    assert config["image_grid_pinpoints"] == [[54 * i, 54 * j] for i in (1, 2) for j in (1, 2)]  # NeXT's expansion, x tower side
    assert (config["mm_tunable_parts"], config["mm_vision_tower_lr"]) == ("mm_vision_tower,mm_mlp_adapter,mm_language_model", 2e-6)
    assert (config["mm_newline_position"], config["mm_spatial_pool_stride"], config["mm_spatial_pool_mode"]) == ("grid", 2, "bilinear")
    # the trained checkpoint loads with its trained tower and gives anyres tokens for an image
    _, model, processor, _ = load_pretrained_model(str(stage2), None, stage2.name, device="cpu")
    saved = {k: v for k, v in load_file(str(stage2 / "model.safetensors")).items() if k.startswith("model.vision_tower.vision_tower.")}
    state = model.state_dict()
    assert saved and all(torch.equal(state[k], v.float()) for k, v in saved.items())
    assert "model.image_newline" in state  # spatial_unpad's newline vector, trained with the LLM
