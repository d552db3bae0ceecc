"""Stage 1 then stage 2 through upstream's command line: files, trainable keys, frozen parts, loading."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from llava.model.builder import load_pretrained_model

from .conftest import PRETRAIN_SAMPLES, Run, stage1_flags

#: The official Braco parameter names of a braco_c2s5 projector (braco-official §3), with LLaVA's prefix.
OFFICIAL_C2S5_KEYS = {
    "model.mm_projector." + name
    for name in (
        "0.polar_pe_scale", "0.spatial_scale", "0.spatial_prior_weight", "0.polar_proj.weight",
        "0.spatial_norm.weight", "0.spatial_norm.bias",
        "0.spatial_scorer.0.weight", "0.spatial_scorer.0.bias", "0.spatial_scorer.1.weight", "0.spatial_scorer.1.bias",
        "0.spatial_scorer.3.weight", "0.spatial_scorer.3.bias",
        "1.weight", "1.bias", "3.weight", "3.bias",
    )
}
TOWER_PREFIX = "model.vision_tower.vision_tower."


def _config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def _llm_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.state_dict().items() if "mm_projector" not in k and not k.startswith(TOWER_PREFIX)}


def _assert_tower_unchanged(model: torch.nn.Module, tower_dir: Path) -> None:
    saved = load_file(str(tower_dir / "model.safetensors"))
    current = {k.removeprefix(TOWER_PREFIX): v for k, v in model.state_dict().items() if k.startswith(TOWER_PREFIX)}
    assert set(current) == set(saved)
    for key, value in saved.items():
        assert torch.equal(current[key].float(), value.float()), key


def test_stage1_writes_config_and_projector_only(stage1_braco: Run):
    names = {path.name for path in stage1_braco.output.iterdir()}
    assert {"config.json", "mm_projector.bin", "trainer_state.json"} <= names
    assert not any(name.endswith(".safetensors") for name in names)


def test_stage1_projector_file_holds_exactly_the_trainable_keys(stage1_braco: Run):
    weights = torch.load(stage1_braco.output / "mm_projector.bin", weights_only=True)
    trainable = {name for name, param in stage1_braco.trainer.model.named_parameters() if param.requires_grad}
    assert set(weights) == trainable == OFFICIAL_C2S5_KEYS


def test_stage1_trains_the_projector_and_freezes_llm_and_tower(stage1_braco: Run, tiny_base_llm: Path, tiny_tower_dir: Path):
    model = stage1_braco.trainer.model
    base = load_file(str(tiny_base_llm / "model.safetensors"))
    llm = _llm_state(model)
    assert set(llm) == set(base)
    for key, value in base.items():
        assert torch.equal(llm[key], value), key
    _assert_tower_unchanged(model, tiny_tower_dir)
    saved = torch.load(stage1_braco.output / "mm_projector.bin", weights_only=True)
    start = stage1_braco.observation.projector_at_start
    changed = [k for k, v in start.items() if not torch.equal(v, saved["model.mm_projector." + k])]
    assert "1.weight" in changed and "0.spatial_scorer.1.weight" in changed


def test_stage1_config_records_the_stage1_schedule(stage1_braco: Run):
    config = _config(stage1_braco.output)
    steps = PRETRAIN_SAMPLES // 2  # 12 captions, batch 2, one epoch, one process
    assert stage1_braco.observation.max_steps == steps
    assert (config["mm_fourier_temp_start"], config["mm_fourier_temp_end"]) == (2.0, 1.2)
    assert config["mm_fourier_temp_schedule"] == "cosine"
    assert config["mm_fourier_temp_steps"] == steps
    assert config["tune_mm_mlp_adapter"] is True
    assert config["mm_projector_type"] == "braco_c2s5"
    assert config["model_type"] == "llava_llama"


def test_stage1_output_loads_with_model_base(stage1_braco: Run, tiny_base_llm: Path):
    _, model, _, _ = load_pretrained_model(
        str(stage1_braco.output), str(tiny_base_llm), "llava-tiny-braco-pretrain", device="cpu"
    )
    saved = torch.load(stage1_braco.output / "mm_projector.bin", weights_only=True)
    loaded = model.get_model().mm_projector.state_dict()
    for key, value in saved.items():
        assert torch.equal(loaded[key.removeprefix("model.mm_projector.")], value), key


def test_stage2_starts_from_the_stage1_projector(stage1_braco: Run, stage2_braco: Run):
    saved = torch.load(stage1_braco.output / "mm_projector.bin", weights_only=True)
    start = stage2_braco.observation.projector_at_start
    assert set(start) == {key.removeprefix("model.mm_projector.") for key in saved}
    for key, value in saved.items():
        assert torch.equal(start[key.removeprefix("model.mm_projector.")], value), key


def test_stage2_trains_llm_and_projector_and_keeps_tower(stage2_braco: Run, tiny_base_llm: Path, tiny_tower_dir: Path):
    model = stage2_braco.trainer.model
    base = load_file(str(tiny_base_llm / "model.safetensors"))
    llm = _llm_state(model)
    changed = [key for key, value in base.items() if not torch.equal(llm[key], value)]
    assert "model.layers.0.self_attn.q_proj.weight" in changed and "lm_head.weight" in changed
    _assert_tower_unchanged(model, tiny_tower_dir)
    trainable = {name for name, param in model.named_parameters() if param.requires_grad}
    assert OFFICIAL_C2S5_KEYS <= trainable
    assert not any(name.startswith(TOWER_PREFIX) for name in trainable)


def test_stage2_writes_a_full_checkpoint_with_the_stage2_schedule(stage2_braco: Run):
    names = {path.name for path in stage2_braco.output.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "trainer_state.json"} <= names
    config = _config(stage2_braco.output)
    assert (config["mm_fourier_temp_start"], config["mm_fourier_temp_end"]) == (1.2, 0.8)
    assert config["mm_fourier_temp_steps"] == stage2_braco.observation.max_steps == 3  # 12 samples, batch 4
    assert config["image_aspect_ratio"] == "pad"
    assert config["tune_mm_mlp_adapter"] is False
    assert config["use_cache"] is True


def test_stage2_uses_sdpa_without_flash_attn(stage2_braco: Run):
    assert stage2_braco.trainer.model.config._attn_implementation == "sdpa"


def test_final_checkpoint_loads_and_generates(stage2_braco: Run, tiny_image_file: Path):
    from PIL import Image

    from llava.eval.core import LlavaGenerator
    from llava.mm_utils import process_images, tokenizer_image_token

    tokenizer, model, processor, _ = load_pretrained_model(str(stage2_braco.output), None, "llava-tiny-braco", device="cpu")
    trained = stage2_braco.trainer.model.state_dict()
    for key, value in model.get_model().mm_projector.state_dict().items():
        assert torch.equal(value, trained["model.mm_projector." + key]), key
    prompt = LlavaGenerator(tokenizer, model, processor, conv_mode="vicuna_v1", device="cpu", dtype=torch.float32).build_prompt(
        "How many circles are there?", 1
    )
    ids = tokenizer_image_token(prompt, tokenizer, return_tensors="pt")[None]
    pixels = process_images([Image.open(tiny_image_file).convert("RGB")], processor, model.config)
    out = model.generate(ids, images=pixels, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert out.shape[0] == 1 and 1 <= out.shape[1] <= 4


def test_stage1_mlp_projector_file_and_config(tmp_path: Path, tiny_base_llm: Path, tiny_tower_dir: Path, train_data):
    from llava.train.train import train

    output = tmp_path / "llava-tiny-mlp-pretrain"
    trainer = train(argv=stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", output, batch=4))
    weights = torch.load(output / "mm_projector.bin", weights_only=True)
    expected = {f"model.mm_projector.{i}.{kind}" for i in (0, 2) for kind in ("weight", "bias")}
    assert set(weights) == expected
    assert {n for n, p in trainer.model.named_parameters() if p.requires_grad} == expected
    config = _config(output)
    assert not [key for key in config if key.startswith("mm_fourier_temp")]
    assert not [type(c).__name__ for c in trainer.callback_handler.callbacks if "Anneal" in type(c).__name__]
