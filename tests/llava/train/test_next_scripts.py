"""The scripts/next recipes (the paper's generalization rows): their dry-run commands parse with train.py's parser,
and each recipe's tower, views and token counts are those of its ``braco cost`` preset and of the paper's table."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from braco_patch.config import BracoConfig
from braco_patch.cost.paper import pipeline_tflops
from llava.cost.presets import KNOWN_TOWERS, get_preset
from llava.mm_utils import parse_grid_pinpoints

from .test_scripts import REPO, flag, parse_command

NEXT = REPO / "scripts" / "next"

#: recipe → (LLM, stage-2 template, tower, input tokens, Braco tokens) from tab:main_larger_visual_tokens.
PAPER_ROWS = {
    "vicuna_7b_anyres.sh": ("lmsys/vicuna-7b-v1.5", "v1", "openai/clip-vit-large-patch14-336", 2880, 80),
    "qwen2.5_3b_siglip.sh": ("Qwen/Qwen2.5-3B-Instruct", "qwen_1_5", "google/siglip-so400m-patch14-384", 729, 16),
    "qwen2.5_3b_siglip2.sh": ("Qwen/Qwen2.5-3B-Instruct", "qwen_1_5", "google/siglip2-so400m-patch16-512", 1024, 16),
    "qwen2.5_3b_anyres.sh": ("Qwen/Qwen2.5-3B-Instruct", "qwen_1_5", "google/siglip-so400m-patch14-384", 3645, 20),
}


def dry_run(script: Path, *args: str) -> tuple[dict[str, str], list[list[str]]]:
    """``(summary fields, commands)`` printed by a recipe under DRY_RUN=1."""
    env = {key: value for key, value in os.environ.items() if key not in ("MODEL", "VISION_TOWER", "STAGES")}
    result = subprocess.run(["bash", str(script), *args], env={**env, "DRY_RUN": "1"}, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("# ")
    summary = lines[0].split(": ", 1)[1]
    fields = {"preset": summary.split("preset ")[1].split(",")[0], "input": summary.split("input ")[1].split(" ")[0],
              "views": summary.split(" view(s)")[0].rsplit(" ", 1)[1], "retain": summary.split("retain ")[1].split(" ")[0],
              "projector": summary.rsplit(", ", 1)[1]}
    return fields, [shlex.split(line) for line in lines[1:]]


@pytest.mark.parametrize("method", ["vanilla", "braco"])
@pytest.mark.parametrize("script", list(PAPER_ROWS))
def test_recipe_matches_its_preset_and_the_paper(script: str, method: str) -> None:
    llm, template, tower, input_tokens, braco_tokens = PAPER_ROWS[script]
    summary, commands = dry_run(NEXT / script, method)
    assert len(commands) == 2
    (m1, d1, t1), (m2, d2, t2) = (parse_command(command) for command in commands)

    # upstream-style two stages
    assert (m1.version, m1.tune_mm_mlp_adapter, t1.learning_rate) == ("plain", True, 1e-3)
    assert (m2.version, m2.tune_mm_mlp_adapter, t2.learning_rate) == (template, False, 2e-5)
    assert flag(commands[0], "--deepspeed").endswith("zero2.json") and flag(commands[1], "--deepspeed").endswith("zero3.json")
    assert m2.pretrain_mm_mlp_adapter == t1.output_dir + "/mm_projector.bin"
    assert "llava" in Path(t2.output_dir).name
    for model_args in (m1, m2):
        assert (model_args.model_name_or_path, model_args.vision_tower) == (llm, tower)
        assert model_args.mm_projector_type == summary["projector"] and model_args.mm_vision_select_layer == -2

    # the preset describes the same setting: tower config, views, canvases, token counts
    spec = get_preset(summary["preset"])
    (inp,) = spec.input(summary["input"])
    assert KNOWN_TOWERS[tower]().to_dict() == spec.vision.to_dict()
    assert int(summary["views"]) == inp.views
    assert d2.image_aspect_ratio == inp.image_aspect_ratio
    if inp.grid_pinpoints is None:
        assert d1.image_grid_pinpoints is None and d1.image_aspect_ratio == "square"
    else:
        for data_args in (d1, d2):
            assert data_args.image_aspect_ratio == "anyres"
            assert tuple(parse_grid_pinpoints(data_args.image_grid_pinpoints)) == inp.grid_pinpoints
        assert m1.mm_patch_merge_type == m2.mm_patch_merge_type == "flat"  # exact 2880 / 3645: no newline tokens
    assert spec.visual_tokens(inp) == int(summary["input"]) == input_tokens
    if method == "vanilla":
        assert summary["projector"] == "mlp2x_gelu" and int(summary["retain"]) == input_tokens
    else:
        per_view = BracoConfig.from_budget(braco_tokens // inp.views).output_tokens
        assert per_view in pipeline_tflops(spec.name, inp.label)  # the paper's rows are keyed by the per-view budget
        assert summary["projector"] == f"braco_k{per_view}"
        assert int(summary["retain"]) == spec.visual_tokens(inp, per_view) == braco_tokens


def test_unknown_method_is_refused() -> None:
    result = subprocess.run(["bash", str(NEXT / "qwen2.5_3b_siglip.sh"), "fast"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "usage: bash" in result.stderr and "METHOD being vanilla or braco" in result.stderr


def test_extra_flags_reach_both_stages() -> None:
    _, commands = dry_run(NEXT / "vicuna_7b_anyres.sh", "braco", "--mm_fourier_temp_steps", "4677")
    assert [parse_command(command)[0].mm_fourier_temp_steps for command in commands] == [4677, 4677]
