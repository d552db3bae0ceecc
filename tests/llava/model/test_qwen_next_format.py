"""A ``llava_qwen`` checkpoint written by hand in LLaVA-NeXT / OneVision's file format (config keys of a
transformers-4.x ``config.json``, sharded bf16 safetensors with NeXT's weight names, the tower copy, tied
embeddings) loads through ``load_pretrained_model`` without renaming, and computes what a plain Qwen2 on the
independently spliced embeddings computes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import Qwen2Config, Qwen2ForCausalLM, SiglipVisionModel

from llava.constants import IMAGE_TOKEN_INDEX
from llava.testing.tiny import build_tiny_siglip_tower

from ._support import load, make_images, prompt_ids

HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, TOWER_HIDDEN = 64, 128, 2, 4, 2, 32
HEAD_DIM = HIDDEN // HEADS
ROWS = 448  # more rows than the tokenizer's 400 tokens, as Qwen's 151936 for 151665
SIDE = 54  # SigLIP input side (6 px patches → 9x9 grid)


def _next_config(tower: Path, tokenizer: object) -> dict:
    endoftext, im_end = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    pinpoints = [[SIDE * i, SIDE * j] for i in range(1, 4) for j in range(1, 4)]
    return {
        "_name_or_path": "lmms-lab/llava-onevision-qwen2-tiny-ov", "architectures": ["LlavaQwenForCausalLM"],
        "model_type": "llava_qwen", "attention_dropout": 0.0, "bos_token_id": endoftext, "eos_token_id": im_end,
        "hidden_act": "silu", "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "initializer_range": 0.02,
        "max_position_embeddings": 1024, "max_window_layers": LAYERS, "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS, "num_key_value_heads": KV_HEADS, "rms_norm_eps": 1e-6, "rope_scaling": None,
        "rope_theta": 1000000.0, "sliding_window": 1024, "use_sliding_window": False, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": ROWS,
        "image_aspect_ratio": "anyres_max_9", "image_grid_pinpoints": pinpoints, "image_crop_resolution": None,
        "image_split_resolution": None, "mm_hidden_size": TOWER_HIDDEN, "mm_newline_position": "grid",
        "mm_patch_merge_type": "spatial_unpad", "mm_projector_lr": None, "mm_projector_type": "mlp2x_gelu",
        "mm_resampler_type": None, "mm_spatial_pool_mode": "bilinear", "mm_spatial_pool_stride": 2,
        "mm_tunable_parts": "mm_vision_tower,mm_mlp_adapter,mm_language_model", "mm_use_im_patch_token": False,
        "mm_use_im_start_end": False, "mm_vision_select_feature": "patch", "mm_vision_select_layer": -2,
        "mm_vision_tower": str(tower), "mm_vision_tower_lr": 2e-6, "pos_skipping_range": 4096,
        "tokenizer_model_max_length": 1024, "tokenizer_padding_side": "right", "use_mm_proj": True,
        "use_pos_skipping": False, "vision_tower_pretrained": None,
    }


def _next_weights() -> dict[str, torch.Tensor]:
    """NeXT's parameter names and shapes (Qwen2: q/k/v with bias, o_proj without), random bf16 values."""
    generator = torch.Generator().manual_seed(7)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * 0.2).to(torch.bfloat16)

    weights = {"model.embed_tokens.weight": rand(ROWS, HIDDEN), "model.norm.weight": 1 + rand(HIDDEN)}
    for i in range(LAYERS):
        prefix = f"model.layers.{i}."
        weights.update({
            prefix + "self_attn.q_proj.weight": rand(HEADS * HEAD_DIM, HIDDEN), prefix + "self_attn.q_proj.bias": rand(HEADS * HEAD_DIM),
            prefix + "self_attn.k_proj.weight": rand(KV_HEADS * HEAD_DIM, HIDDEN), prefix + "self_attn.k_proj.bias": rand(KV_HEADS * HEAD_DIM),
            prefix + "self_attn.v_proj.weight": rand(KV_HEADS * HEAD_DIM, HIDDEN), prefix + "self_attn.v_proj.bias": rand(KV_HEADS * HEAD_DIM),
            prefix + "self_attn.o_proj.weight": rand(HIDDEN, HEADS * HEAD_DIM),
            prefix + "mlp.gate_proj.weight": rand(INTERMEDIATE, HIDDEN), prefix + "mlp.up_proj.weight": rand(INTERMEDIATE, HIDDEN),
            prefix + "mlp.down_proj.weight": rand(HIDDEN, INTERMEDIATE),
            prefix + "input_layernorm.weight": 1 + rand(HIDDEN), prefix + "post_attention_layernorm.weight": 1 + rand(HIDDEN),
        })
    weights.update({
        "model.mm_projector.0.weight": rand(HIDDEN, TOWER_HIDDEN), "model.mm_projector.0.bias": rand(HIDDEN),
        "model.mm_projector.2.weight": rand(HIDDEN, HIDDEN), "model.mm_projector.2.bias": rand(HIDDEN),
        "model.image_newline": rand(HIDDEN),
    })
    return weights


@pytest.fixture(scope="module")
def next_checkpoint(tmp_path_factory, tiny_qwen_tokenizer_dir) -> tuple[Path, Path, dict[str, torch.Tensor]]:
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("next")
    tower = build_tiny_siglip_tower(root / "siglip-so400m-tiny", image_size=SIDE, patch_size=6, hidden=TOWER_HIDDEN)
    path = root / "llava-onevision-qwen2-tiny-ov"
    path.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        shutil.copyfile(tiny_qwen_tokenizer_dir / name, path / name)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen_tokenizer_dir))
    (path / "config.json").write_text(json.dumps(_next_config(tower, tokenizer), indent=2))
    weights = _next_weights()
    # NeXT checkpoints also carry the tower under its transformers-4.x names (with ``vision_model.``).
    stale_tower = {"model.vision_tower.vision_tower.vision_model.post_layernorm.weight": torch.zeros(TOWER_HIDDEN, dtype=torch.bfloat16)}
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2 :]}
    index = {"metadata": {"total_size": 0}, "weight_map": {}}
    for shard, keys in shards.items():
        tensors = {key: weights[key] for key in keys}
        if shard.startswith("model-00002"):
            tensors.update(stale_tower)
        save_file(tensors, str(path / shard), metadata={"format": "pt"})
        index["weight_map"].update({key: shard for key in tensors})
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return path, tower, weights


def test_next_checkpoint_weights_land_under_their_own_names(next_checkpoint) -> None:
    path, tower, weights = next_checkpoint
    tokenizer, model, processor, _ = load(path)
    assert type(model).__name__ == "LlavaQwenForCausalLM" and model.config.model_type == "llava_qwen"
    assert model.config.rope_parameters["rope_theta"] == 1e6 and model.config.tie_word_embeddings
    state = model.state_dict()
    for key, value in weights.items():
        torch.testing.assert_close(state[key], value.float(), rtol=0, atol=0, msg=key)
    assert model.lm_head.weight.data_ptr() == state["model.embed_tokens.weight"].data_ptr() or torch.equal(
        model.lm_head.weight, state["model.embed_tokens.weight"]
    )
    assert model.get_input_embeddings().weight.shape[0] == ROWS and len(tokenizer) < ROWS
    # The tower comes from its own directory, not from the checkpoint's copy.
    saved_tower = load_file(tower / "model.safetensors")
    torch.testing.assert_close(model.get_vision_tower().vision_tower.post_layernorm.weight, saved_tower["post_layernorm.weight"])


def test_next_checkpoint_computes_a_qwen2_on_the_spliced_embeddings(next_checkpoint) -> None:
    path, tower, weights = next_checkpoint
    tokenizer, model, processor, _ = load(path)
    pixels = processor(make_images(1), return_tensors="pt")["pixel_values"]
    ids = prompt_ids(tokenizer, "What is in the image?", conv_mode="qwen_1_5")
    marker = int((ids == IMAGE_TOKEN_INDEX).nonzero())

    # Independent: the tower's hidden_states[-2], the stored mlp2x_gelu, a plain Qwen2 with the stored weights.
    w = {key: value.float() for key, value in weights.items()}
    reference_tower = SiglipVisionModel.from_pretrained(tower).eval()
    config = json.loads((path / "config.json").read_text())
    plain_keys = {k: config[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
                                         "num_key_value_heads", "rms_norm_eps", "vocab_size", "tie_word_embeddings",
                                         "max_position_embeddings", "rope_theta")}
    plain = Qwen2ForCausalLM(Qwen2Config(**plain_keys)).eval()
    missing, unexpected = plain.load_state_dict({k: v for k, v in w.items() if not k.startswith("model.mm_") and k != "model.image_newline"}, strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected
    with torch.no_grad():
        hidden = reference_tower(pixels, output_hidden_states=True).hidden_states[-2]
        visual = F.linear(F.gelu(F.linear(hidden, w["model.mm_projector.0.weight"], w["model.mm_projector.0.bias"])),
                          w["model.mm_projector.2.weight"], w["model.mm_projector.2.bias"])[0]
        text = F.embedding(ids[ids != IMAGE_TOKEN_INDEX], w["model.embed_tokens.weight"])
        embeds = torch.cat([text[:marker], visual, text[marker:]])[None]
        expected = plain(inputs_embeds=embeds).logits
        logits = model(ids[None], images=pixels).logits
    assert visual.shape == (81, HIDDEN)
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
