"""LLaMA, Qwen2 and Mistral LLaVA models through the language-model registry: tiny checkpoints in the released
formats → ``load_pretrained_model`` → splice / batch / generate; projector-only and LoRA checkpoints on a plain
base directory; a LLaVA-NeXT-format ``llava_qwen`` checkpoint written by hand; the registry's errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from llava.constants import IGNORE_INDEX, IMAGE_TOKEN_INDEX
from llava.model.language_model.registry import list_language_models, register_language_model, resolve_language_model
from llava.testing.tiny import (
    build_tiny_llava_checkpoint,
    build_tiny_llm,
    build_tiny_projector_checkpoint,
    build_tiny_siglip2_tower,
    build_tiny_siglip_tower,
)

from ._support import BRACO, GRID, QUESTIONS, left_pad, load, make_images, pixels, prompt_ids

#: llm → (LLaVA model_type, causal-LM class name, conversation template its checkpoints are prompted with).
LLMS = {
    "llama": ("llava_llama", "LlavaLlamaForCausalLM", "vicuna_v1"),
    "qwen2": ("llava_qwen", "LlavaQwenForCausalLM", "qwen_1_5"),
    "mistral": ("llava_mistral", "LlavaMistralForCausalLM", "mistral_instruct"),
}
#: Patch grid side of each tiny tower: CLIP 6x6 + CLS, SigLIP 54 px / 6 px = 9x9 (an odd "27x27-style" grid, no CLS),
#: SigLIP2-style 64 px / 8 px = 8x8 (an even "32x32-style" grid, no CLS).
TOWER_GRIDS = {"clip": GRID, "siglip": 9, "siglip2": 8}

#: (llm, tower, projector, visual tokens per image K): every tower x LLM pair, uncompressed and with a Braco budget.
PAIRS = [
    pytest.param(llm, tower, projector, tokens, id=f"{llm}-{tower}-{projector}", marks=marks)
    for llm in LLMS
    for tower, grid in TOWER_GRIDS.items()
    for projector, tokens, marks in (("mlp2x_gelu", grid * grid, ()), ("braco_c2s5", 4 + 5, BRACO))
]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("language_models")


@pytest.fixture(scope="module")
def towers(root, tiny_tower_dir) -> dict[str, Path]:
    return {
        "clip": tiny_tower_dir,
        "siglip": build_tiny_siglip_tower(root / "siglip", image_size=54, patch_size=6),
        "siglip2": build_tiny_siglip2_tower(root / "siglip2"),
    }


@pytest.fixture(scope="module")
def tokenizers(tiny_tokenizer_dir, tiny_qwen_tokenizer_dir) -> dict[str, Path]:
    return {"llama": tiny_tokenizer_dir, "mistral": tiny_tokenizer_dir, "qwen2": tiny_qwen_tokenizer_dir}


@pytest.fixture(scope="module")
def bases(root, tokenizers) -> dict[str, Path]:
    """Plain (non-LLaVA) tiny LLMs, one per family."""
    return {llm: build_tiny_llm(root / f"{llm}-base", tokenizers[llm], llm=llm) for llm in LLMS}


@pytest.fixture(scope="module")
def loaded(root, towers, tokenizers):
    """``get(llm, tower, projector) -> (path, tokenizer, model, image_processor)``, built and loaded once."""
    cache: dict = {}

    def get(llm: str, tower: str = "clip", projector: str = "mlp2x_gelu"):
        key = (llm, tower, projector)
        if key not in cache:
            path = build_tiny_llava_checkpoint(
                root / f"llava-tiny-{llm}-{tower}-{projector}", towers[tower], tokenizers[llm], projector_type=projector, llm=llm
            )
            tokenizer, model, processor, _ = load(path)
            cache[key] = (path, tokenizer, model, processor)
        return cache[key]

    return get


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


# ---------------------------------------------------------------------------------------------- registry


def test_registry_lists_the_builtins_and_resolves_aliases_and_base_types() -> None:
    assert {"llava_llama", "llava_qwen", "llava_mistral"} <= set(list_language_models())
    for query, expected in [("llava", "llava_llama"), ("llama", "llava_llama"), ("qwen2", "llava_qwen"),
                            ("llava_qwen", "llava_qwen"), ("mistral", "llava_mistral")]:
        assert resolve_language_model(query).model_type == expected
    entry = resolve_language_model("qwen2")
    assert entry.causal_lm_class.__name__ == "LlavaQwenForCausalLM" and entry.config_class.model_type == "llava_qwen"


def test_unknown_model_type_names_the_registered_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown language model_type 'gpt2'.*llava_llama \(llava, llama\).*llava_qwen \(qwen2\)"):
        resolve_language_model("gpt2")


def test_registering_a_claimed_base_type_is_refused() -> None:
    entry = resolve_language_model("qwen2")
    with pytest.raises(ValueError, match=r"model_type 'qwen2' is already registered for 'llava_qwen'"):
        register_language_model("llava_qwen_copy", type("C", (entry.config_class,), {"model_type": "llava_qwen_copy"}),
                                entry.causal_lm_class, base_model_type="qwen2")
    assert "llava_qwen_copy" not in list_language_models()


# ---------------------------------------------------------------------------------------------- full checkpoints


def test_transformers_auto_classes_know_the_llava_model_types(loaded) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    for llm, (model_type, class_name, _) in LLMS.items():
        config = AutoConfig.from_pretrained(loaded(llm)[0])
        assert config.model_type == model_type and type(config) is resolve_language_model(model_type).config_class
        assert AutoModelForCausalLM.from_config(config).__class__.__name__ == class_name


def test_checkpoint_files_follow_the_released_formats(loaded) -> None:
    for llm, (model_type, class_name, _) in LLMS.items():
        path = loaded(llm)[0]
        config = json.loads((path / "config.json").read_text())
        assert config["model_type"] == model_type and config["architectures"] == [class_name]
        keys = set(load_file(path / "model.safetensors"))
        assert {"model.embed_tokens.weight", "model.norm.weight", "model.mm_projector.0.weight"} <= keys
        # Qwen2.5-3B ties lm_head to the embeddings and saves no separate lm_head.
        assert ("lm_head.weight" in keys) == (llm != "qwen2")
    qwen = json.loads((loaded("qwen2")[0] / "config.json").read_text())
    assert qwen["tie_word_embeddings"] is True and qwen["rope_parameters"]["rope_theta"] == 1e6
    assert qwen["mm_tunable_parts"] == "mm_vision_tower,mm_mlp_adapter,mm_language_model" and "image_grid_pinpoints" in qwen


@pytest.mark.parametrize("llm, tower, projector, tokens", PAIRS)
def test_loads_splices_k_tokens_and_generates(loaded, llm, tower, projector, tokens) -> None:
    _, tokenizer, model, processor = loaded(llm, tower, projector)
    model_type, class_name, conv_mode = LLMS[llm]
    assert type(model).__name__ == class_name and model.config.model_type == model_type
    images = pixels(make_images(1), processor, model)
    ids = prompt_ids(tokenizer, "What is in the image?", conv_mode=conv_mode)
    marker = int((ids == IMAGE_TOKEN_INDEX).nonzero())
    with torch.no_grad():
        features = model.encode_images(images)
        _, _, _, _, embeds, labels = model.prepare_inputs_labels_for_multimodal(
            ids[None], None, None, None, ids[None].clone(), images
        )
        text = model.get_input_embeddings()(ids[ids != IMAGE_TOKEN_INDEX])
    assert features.shape == (1, tokens, model.config.hidden_size)
    assert embeds.shape == (1, len(ids) - 1 + tokens, model.config.hidden_size)
    torch.testing.assert_close(embeds[0, :marker], text[:marker], rtol=0, atol=0)
    torch.testing.assert_close(embeds[0, marker : marker + tokens], features[0], rtol=0, atol=0)
    torch.testing.assert_close(embeds[0, marker + tokens :], text[marker:], rtol=0, atol=0)
    assert (labels[0, marker : marker + tokens] == IGNORE_INDEX).all()

    output = model.generate(ids[None], images=images, do_sample=False, max_new_tokens=4, pad_token_id=tokenizer.pad_token_id)
    again = model.generate(ids[None], images=images, do_sample=False, max_new_tokens=4, pad_token_id=tokenizer.pad_token_id)
    assert 1 <= output.shape[1] <= 4 and torch.equal(output, again)  # new tokens only, deterministic
    assert isinstance(tokenizer.decode(output[0], skip_special_tokens=True), str)


@pytest.mark.parametrize("llm, tower, projector, tokens", PAIRS)
def test_batch_of_three_equals_one_at_a_time(loaded, llm, tower, projector, tokens) -> None:
    _, tokenizer, model, processor = loaded(llm, tower, projector)
    conv_mode = LLMS[llm][2]
    images = pixels(make_images(3), processor, model)
    sequences = [prompt_ids(tokenizer, question, conv_mode=conv_mode) for question in QUESTIONS]
    with torch.no_grad():
        singles = [model(seq[None], images=images[i : i + 1]).logits[0] for i, seq in enumerate(sequences)]
        ids, mask = left_pad(sequences, tokenizer.pad_token_id)
        batched = model(ids, attention_mask=mask, images=images).logits
    for row, single in zip(batched, singles):
        torch.testing.assert_close(row[: single.shape[0]], single, rtol=1e-4, atol=1e-5)  # right-padded by the splice


def test_qwen_keeps_its_spare_embedding_rows_and_ties_lm_head(loaded, tokenizers) -> None:
    path, tokenizer, model, _ = loaded("qwen2")
    rows = json.loads((path / "config.json").read_text())["vocab_size"]
    assert rows > len(tokenizer)  # like 151936 rows for 151665 tokens
    assert model.get_input_embeddings().weight.shape[0] == rows  # not shrunk to len(tokenizer)
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    torch.testing.assert_close(model.get_input_embeddings().weight, load_file(path / "model.safetensors")["model.embed_tokens.weight"])
    assert tokenizer.bos_token is None and tokenizer.pad_token == "<|endoftext|>" and tokenizer.eos_token == "<|im_end|>"


def test_unknown_checkpoint_model_type_is_one_sentence(loaded, tmp_path) -> None:
    path = _copy(loaded("qwen2")[0], tmp_path / "llava-tiny-unknown")
    config = json.loads((path / "config.json").read_text())
    config["model_type"] = "gpt_neox"
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"unknown language model_type 'gpt_neox' of .*llava-tiny-unknown.*registered LLaVA model_types"):
        load(path)


# ---------------------------------------------------------------------------------------------- on a plain base


@pytest.mark.parametrize("llm", ["qwen2", "mistral"])
def test_projector_only_checkpoint_on_a_plain_base(root, towers, bases, llm) -> None:
    path = build_tiny_projector_checkpoint(root / f"llava-tiny-{llm}-pretrain", bases[llm], towers["clip"])
    assert json.loads((path / "config.json").read_text())["model_type"] == LLMS[llm][0]
    tokenizer, model, processor, _ = load(path, model_base=bases[llm])
    assert type(model).__name__ == LLMS[llm][1]
    stored = torch.load(path / "mm_projector.bin", weights_only=True)
    projector = model.get_model().mm_projector.state_dict()
    for key, value in stored.items():
        torch.testing.assert_close(projector[key.removeprefix("model.mm_projector.")], value, rtol=0, atol=0)
    base = load_file(bases[llm] / "model.safetensors")
    for key in ("model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight"):
        torch.testing.assert_close(model.state_dict()[key], base[key], rtol=0, atol=0)

    ids = prompt_ids(tokenizer, "Describe it.", conv_mode=LLMS[llm][2])
    images = pixels(make_images(1), processor, model)
    assert model.generate(ids[None], images=images, do_sample=False, max_new_tokens=3, pad_token_id=tokenizer.pad_token_id).shape[0] == 1


def test_projector_only_checkpoint_on_a_base_of_another_family(root, towers, bases) -> None:
    path = build_tiny_projector_checkpoint(root / "llava-tiny-qwen2-pretrain-x", bases["qwen2"], towers["clip"])
    with pytest.raises(ValueError, match=r"model_base .* is a mistral model but .* is a llava_qwen checkpoint; pass a qwen2"):
        load(path, model_base=bases["mistral"])


def _write_lora_checkpoint(path: Path, base: Path, tower: Path) -> dict[str, torch.Tensor]:
    """A LoRA stage-2 output as upstream's trainer writes it: config.json, PEFT adapter, non_lora_trainables.bin.

    Returns the LoRA factors and scaling of layer 0's q_proj, for an independent merge.
    """
    from peft import LoraConfig, get_peft_model

    from llava.model.language_model.registry import language_model_for_checkpoint
    from llava.model.multimodal_projector.builder import build_vision_projector

    projector_dir = build_tiny_projector_checkpoint(path.parent / (path.name + "-config"), base, tower)
    entry = language_model_for_checkpoint(projector_dir)
    config = entry.config_class.from_pretrained(projector_dir)
    config.tune_mm_mlp_adapter = False
    model = entry.causal_lm_class.from_pretrained(base, config=config)
    torch.manual_seed(3)
    model.get_model().mm_projector = build_vision_projector(config)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lora)
    layer = peft_model.base_model.model.model.layers[0].self_attn.q_proj
    torch.nn.init.normal_(layer.lora_B["default"].weight)  # a trained-looking, non-zero update
    peft_model.save_pretrained(path)
    config.save_pretrained(path)
    extras = {f"base_model.model.model.mm_projector.{k}": v.clone() for k, v in model.get_model().mm_projector.state_dict().items()}
    torch.save(extras, path / "non_lora_trainables.bin")
    return {"A": layer.lora_A["default"].weight.detach().clone(), "B": layer.lora_B["default"].weight.detach().clone(),
            "scaling": torch.tensor(layer.scaling["default"])}


@pytest.mark.parametrize("llm", ["qwen2", "mistral"])
def test_lora_checkpoint_on_a_plain_base(root, towers, bases, llm) -> None:
    pytest.importorskip("peft", reason="LoRA needs peft (pip install peft)")
    path = root / f"llava-tiny-{llm}-lora"
    lora = _write_lora_checkpoint(path, bases[llm], towers["clip"])
    tokenizer, model, processor, _ = load(path, model_base=bases[llm])
    assert type(model).__name__ == LLMS[llm][1]
    base = load_file(bases[llm] / "model.safetensors")
    expected = base["model.layers.0.self_attn.q_proj.weight"] + lora["scaling"] * (lora["B"] @ lora["A"])
    torch.testing.assert_close(model.state_dict()["model.layers.0.self_attn.q_proj.weight"], expected)
    extras = torch.load(path / "non_lora_trainables.bin", weights_only=True)
    projector = model.get_model().mm_projector.state_dict()
    for key, value in extras.items():
        torch.testing.assert_close(projector[key.removeprefix("base_model.model.model.mm_projector.")], value, rtol=0, atol=0)
    ids = prompt_ids(tokenizer, "Describe it.", conv_mode=LLMS[llm][2])
    images = pixels(make_images(1), processor, model)
    assert model.generate(ids[None], images=images, do_sample=False, max_new_tokens=3, pad_token_id=tokenizer.pad_token_id).shape[0] == 1


# ---------------------------------------------------------------------------------------------- a new LLM


@pytest.fixture
def qwen3_registered():
    """A new family registered the documented way: one thin module (three classes) and one registration."""
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3Model

    from llava.model.language_model import registry
    from llava.model.language_model.base import LlavaConfigMixin
    from llava.model.llava_arch import LlavaMetaForCausalLM, LlavaMetaModel

    class LlavaQwen3Config(LlavaConfigMixin, Qwen3Config):
        model_type = "llava_qwen3_test"

    class LlavaQwen3Model(LlavaMetaModel, Qwen3Model):
        config_class = LlavaQwen3Config

    class LlavaQwen3ForCausalLM(LlavaMetaForCausalLM, Qwen3ForCausalLM):
        config_class = LlavaQwen3Config
        llava_model_class = LlavaQwen3Model

    entry = register_language_model("llava_qwen3_test", LlavaQwen3Config, LlavaQwen3ForCausalLM, base_model_type="qwen3")
    yield entry
    del registry._REGISTRY["llava_qwen3_test"]


def test_a_newly_registered_llm_loads_and_generates_with_no_other_change(qwen3_registered, towers, tokenizers, tmp_path) -> None:
    from llava.testing.tiny import _multimodal_keys

    entry = qwen3_registered
    tokenizer_dir = tokenizers["qwen2"]
    config = entry.config_class(
        vocab_size=448, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=512, tie_word_embeddings=True,
        **_multimodal_keys(towers["clip"], "mlp2x_gelu", None),
    )
    path = tmp_path / "llava-tiny-qwen3"
    torch.manual_seed(0)
    entry.causal_lm_class(config).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_dir / name, path / name)
    assert json.loads((path / "config.json").read_text())["model_type"] == "llava_qwen3_test"

    tokenizer, model, processor, _ = load(path)
    assert type(model) is entry.causal_lm_class
    ids = prompt_ids(tokenizer, "What is in the image?", conv_mode="qwen_1_5")
    images = pixels(make_images(1), processor, model)
    with torch.no_grad():
        embeds = model.prepare_inputs_labels_for_multimodal(ids[None], None, None, None, None, images)[4]
    assert embeds.shape[1] == len(ids) - 1 + GRID * GRID
    assert model.generate(ids[None], images=images, do_sample=False, max_new_tokens=3, pad_token_id=tokenizer.pad_token_id).shape[0] == 1
    # A plain Qwen3 directory as model_base now resolves to the new class as well.
    assert resolve_language_model("qwen3") is entry
