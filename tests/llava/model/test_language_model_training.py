"""Both training stages through ``llava/train/train.py`` with upstream flags on a plain Qwen2 (``--version plain``
then ``qwen_1_5``) and a plain Mistral (``plain`` then ``mistral_instruct``): the LLaVA class is chosen from the
plain model's ``model_type``, the outputs are ``llava_qwen`` / ``llava_mistral`` checkpoints that load back."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from ..train.conftest import stage1_flags, stage2_flags, train_data  # noqa: F401  (train_data is a fixture)
from ._support import load, make_images, pixels, prompt_ids

#: llm → (stage-2 --version, LLaVA model_type, class name)
RECIPES = {
    "qwen2": ("qwen_1_5", "llava_qwen", "LlavaQwenForCausalLM"),
    "mistral": ("mistral_instruct", "llava_mistral", "LlavaMistralForCausalLM"),
}


def _with_version(argv: list[str], version: str) -> list[str]:
    argv = list(argv)
    argv[argv.index("--version") + 1] = version
    return argv


@pytest.fixture(scope="module", params=list(RECIPES))
def two_stages(request, tmp_path_factory, tiny_tokenizer_dir, tiny_qwen_tokenizer_dir, tiny_tower_dir, train_data):  # noqa: F811
    from llava.testing.tiny import build_tiny_llm
    from llava.train.train import train

    llm = request.param
    root = tmp_path_factory.mktemp(f"train-{llm}")
    tokenizer = tiny_qwen_tokenizer_dir if llm == "qwen2" else tiny_tokenizer_dir
    base = build_tiny_llm(root / f"{llm}-base", tokenizer, llm=llm)
    stage1 = root / f"llava-tiny-{llm}-pretrain"
    train(argv=stage1_flags(base, tiny_tower_dir, train_data, "mlp2x_gelu", stage1, batch=4))
    stage2 = root / f"llava-tiny-{llm}"
    argv = stage2_flags(base, tiny_tower_dir, train_data, "mlp2x_gelu", stage2, stage1 / "mm_projector.bin")
    trainer = train(argv=_with_version(argv, RECIPES[llm][0]))
    return llm, base, stage1, stage2, trainer


def test_stage1_writes_the_llava_model_type_of_the_base(two_stages) -> None:
    llm, base, stage1, _, _ = two_stages
    config = json.loads((stage1 / "config.json").read_text())
    assert config["model_type"] == RECIPES[llm][1] and config["architectures"] == [RECIPES[llm][2]]
    weights = torch.load(stage1 / "mm_projector.bin", weights_only=True)
    assert set(weights) == {f"model.mm_projector.{i}.{p}" for i in (0, 2) for p in ("weight", "bias")}
    _, model, _, _ = load(stage1, model_base=base)
    assert type(model).__name__ == RECIPES[llm][2]
    for key, value in weights.items():
        assert torch.equal(model.get_model().mm_projector.state_dict()[key.removeprefix("model.mm_projector.")], value)


def test_stage2_trains_the_llm_and_saves_a_loadable_checkpoint(two_stages) -> None:
    llm, base, _, stage2, trainer = two_stages
    config = json.loads((stage2 / "config.json").read_text())
    assert config["model_type"] == RECIPES[llm][1] and config["architectures"] == [RECIPES[llm][2]]
    before = load_file(base / "model.safetensors")
    after = load_file(stage2 / "model.safetensors")
    assert not torch.equal(before["model.layers.0.self_attn.q_proj.weight"], after["model.layers.0.self_attn.q_proj.weight"])
    assert ("lm_head.weight" in after) == (llm != "qwen2")  # Qwen2 keeps its tied embeddings tied

    tokenizer, model, processor, _ = load(stage2)
    assert type(model).__name__ == RECIPES[llm][2]
    torch.testing.assert_close(model.state_dict()["model.layers.0.self_attn.q_proj.weight"], after["model.layers.0.self_attn.q_proj.weight"])
    ids = prompt_ids(tokenizer, "How many circles are there?", conv_mode=RECIPES[llm][0])
    images = pixels(make_images(1), processor, model)
    output = model.generate(ids[None], images=images, do_sample=False, max_new_tokens=3, pad_token_id=tokenizer.pad_token_id)
    assert output.shape[0] == 1 and 1 <= output.shape[1] <= 3
