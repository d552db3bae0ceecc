"""``--lora_enable``: adapter + ``non_lora_trainables.bin`` saved, then merged back by ``load_pretrained_model``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from llava.model.builder import load_pretrained_model
from llava.train.train import train
from llava.utils import UserError

from .conftest import Run, stage2_flags

pytest.importorskip("peft", reason="LoRA training needs peft (pip install peft)")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_base_llm, tiny_tower_dir, train_data, stage1_braco: Run) -> tuple[Path, object]:
    output = tmp_path_factory.mktemp("lora") / "llava-tiny-braco-lora"
    argv = stage2_flags(tiny_base_llm, tiny_tower_dir, train_data, "braco_c2s5", output, stage1_braco.output / "mm_projector.bin")
    argv += ["--lora_enable", "True", "--lora_r", "8", "--lora_alpha", "16", "--mm_projector_lr", "2e-4"]
    return output, train(argv=argv)


def test_lora_run_saves_adapter_config_and_non_lora_trainables(lora_run):
    output, trainer = lora_run
    names = {path.name for path in output.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "config.json", "non_lora_trainables.bin"} <= names
    assert "model.safetensors" not in names
    adapter = json.loads((output / "adapter_config.json").read_text())
    targets = set(adapter["target_modules"])
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} == targets
    extras = torch.load(output / "non_lora_trainables.bin", weights_only=True)
    assert extras and all(key.startswith("base_model.model.model.mm_projector.") for key in extras)
    assert json.loads((output / "config.json").read_text())["mm_projector_type"] == "braco_c2s5"


def test_projector_gets_its_own_learning_rate(lora_run):
    _, trainer = lora_run
    projector = {id(p) for n, p in trainer.model.named_parameters() if "mm_projector" in n}
    groups = trainer.optimizer.param_groups
    with_projector = [g for g in groups if any(id(p) in projector for p in g["params"])]
    others = [g for g in groups if not any(id(p) in projector for p in g["params"])]
    assert with_projector and others
    assert all(id(p) in projector for g in with_projector for p in g["params"])
    assert {g["initial_lr"] for g in with_projector} == {2e-4}  # --mm_projector_lr
    assert {g["initial_lr"] for g in others} == {1e-3}  # --learning_rate


def test_lora_checkpoint_reloads_with_model_base(lora_run, tiny_base_llm: Path):
    output, trainer = lora_run
    _, model, processor, _ = load_pretrained_model(str(output), str(tiny_base_llm), "llava-tiny-braco-lora", device="cpu")
    assert processor is not None
    extras = torch.load(output / "non_lora_trainables.bin", weights_only=True)
    projector = model.get_model().mm_projector.state_dict()
    for key, value in extras.items():
        assert torch.equal(projector[key.removeprefix("base_model.model.model.mm_projector.")], value), key
    # The merged attention weights are the base weights plus the trained low-rank update.
    base = load_file(str(tiny_base_llm / "model.safetensors"))
    merged = model.state_dict()["model.layers.0.self_attn.q_proj.weight"]
    peft_model = trainer.model
    layer = peft_model.base_model.model.model.layers[0].self_attn.q_proj
    update = (layer.lora_B["default"].weight @ layer.lora_A["default"].weight) * layer.scaling["default"]
    assert update.abs().max() > 0
    torch.testing.assert_close(merged, base["model.layers.0.self_attn.q_proj.weight"] + update.detach())


def test_lora_folder_not_named_llava_lora_merges_too(lora_run, tiny_base_llm: Path, tmp_path: Path):
    # Upstream picks the LoRA loader from "llava" and "lora" in the name; the files decide here (issue 20).
    output, _ = lora_run
    renamed = Path(shutil.copytree(output, tmp_path / "run-7" / "adapter"))
    _, model, processor, _ = load_pretrained_model(str(renamed), str(tiny_base_llm), "adapter", device="cpu")
    assert processor is not None and not any("lora_" in name for name, _ in model.named_parameters())
    extras = torch.load(renamed / "non_lora_trainables.bin", weights_only=True)
    projector = model.get_model().mm_projector.state_dict()
    assert all(torch.equal(projector[key.removeprefix("base_model.model.model.mm_projector.")], value) for key, value in extras.items())
    with pytest.raises(UserError, match=r"is a LLaVA LoRA checkpoint .*--model-base"):
        load_pretrained_model(str(renamed), None, "adapter", device="cpu")
