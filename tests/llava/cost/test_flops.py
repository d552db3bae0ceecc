"""The analytic counter against FLOPs counted by hand (1 multiply-add = 2 FLOPs), part by part and layer by layer,
and against torch.profiler on the instantiated tiny models."""

import pytest
import torch
from transformers import CLIPVisionConfig, CLIPVisionModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, SiglipVisionConfig

from llava.cost.flops import (
    LMDims,
    VisionDims,
    linear_flops,
    llm_prefill_flops,
    projector_flops,
    total,
    vision_layers_run,
    vision_tower_flops,
)


def _profiled(fn):
    """{aten op: FLOPs} that torch.profiler reports for one call."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True) as prof:
        fn()
    return {e.key: int(e.flops) for e in prof.key_averages() if e.flops}


def test_one_linear():
    # Linear(3 -> 5) on 7 rows: 7·3·5 = 105 multiply-adds = 210 FLOPs; the bias add is not counted.
    assert linear_flops(7, 3, 5) == 210
    layer = torch.nn.Linear(3, 5)
    with torch.no_grad():
        assert _profiled(lambda: layer(torch.randn(7, 3))) == {"aten::addmm": 210}


CLIP = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2, image_size=8, patch_size=4)


def test_clip_tower_by_hand():
    dims = VisionDims.from_config(CLIPVisionConfig(**CLIP))
    # 8 px / 4 = 2x2 patches + CLS = 5 tokens, d = 8, MLP 16, 2 heads of 4.
    assert (dims.grid(), dims.tokens()) == (2, 5)
    one = {
        "patch_embed": 2 * 4 * (3 * 4 * 4) * 8,  # conv 4x4x3 -> 8 on 4 patches = 3072
        "attention_proj": 4 * 2 * 5 * 8 * 8,  # q, k, v, o: 4 x 640 = 2560
        "attention_scores": 2 * 2 * 5 * 5 * 4 + 2 * 2 * 5 * 5 * 4,  # QK^T + AV over 2 heads = 800
        "mlp": 2 * 5 * 8 * 16 + 2 * 5 * 16 * 8,  # fc1 + fc2 = 2560
    }
    assert vision_tower_flops(dims, layers=1, count_attention=True) == one
    two = vision_tower_flops(dims, layers=2, count_attention=True)
    for part in ("attention_proj", "attention_scores", "mlp"):  # each layer adds the same
        assert two[part] == 2 * one[part]
    assert two["patch_embed"] == one["patch_embed"]
    assert vision_tower_flops(dims, layers=2)["attention_scores"] == 0  # not counted by default
    assert vision_tower_flops(dims) == vision_tower_flops(dims, layers=2)  # default: every layer


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_clip_tower_matches_profiler(impl):
    config = CLIPVisionConfig(**CLIP)
    config._attn_implementation = impl
    model = CLIPVisionModel(config).eval()
    counted = vision_tower_flops(VisionDims.from_config(config), count_attention=impl == "eager")
    with torch.no_grad():
        prof = _profiled(lambda: model(torch.randn(1, 3, 8, 8), output_hidden_states=True))
    assert prof["aten::conv2d"] == counted["patch_embed"]
    assert prof["aten::addmm"] == counted["attention_proj"] + counted["mlp"]
    assert prof.get("aten::bmm", 0) == counted["attention_scores"]  # SDPA is not counted by the profiler


def test_siglip_has_no_cls_and_vision_layer_policy():
    dims = VisionDims.from_config(SiglipVisionConfig(**CLIP))
    assert (dims.tokens(), dims.cls_token) == (4, False)
    assert vision_tower_flops(dims, layers=1)["attention_proj"] == 4 * 2 * 4 * 8 * 8
    clip = VisionDims.from_config(CLIPVisionConfig(**{**CLIP, "num_hidden_layers": 24}))
    assert vision_layers_run(clip, -2, "all") == 24
    assert vision_layers_run(clip, -2, "selected") == 23
    assert vision_layers_run(clip, 5, "selected") == 5


LLAMA = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=50)


def test_llama_prefill_by_hand_layer_by_layer():
    dims = LMDims.from_config(LlamaConfig(**LLAMA))
    assert (dims.head_dim, dims.kv_heads) == (4, 2)
    t = 7
    # One layer: q and o 16->16, k and v 16->8 (2 KV heads of 4): GQA; SwiGLU gate/up 16->32, down 32->16.
    q = o = 2 * t * 16 * 16  # 3584
    k = v = 2 * t * 16 * 8  # 1792
    mlp = 3 * 2 * t * 16 * 32  # 21504
    scores = 2 * 2 * t * t * 4 * 4  # QK^T and AV, 4 query heads of 4, full 7x7: 3136
    head_all, head_last = 2 * t * 16 * 50, 2 * 1 * 16 * 50
    one = llm_prefill_flops(LMDims(**{**dims.__dict__, "layers": 1}), t, count_attention=True)
    assert one == {"attention_proj": q + k + v + o, "attention_scores": scores, "mlp": mlp, "lm_head": head_all}
    two = llm_prefill_flops(dims, t, count_attention=True, lm_head="last")
    assert two == {"attention_proj": 2 * (q + k + v + o), "attention_scores": 2 * scores, "mlp": 2 * mlp, "lm_head": head_last}
    assert llm_prefill_flops(dims, t)["attention_scores"] == 0


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_llm_matches_profiler(family, impl):
    cls, model_cls = (LlamaConfig, LlamaForCausalLM) if family == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    config = cls(**LLAMA)
    config._attn_implementation = impl
    model = model_cls(config).eval()
    counted = llm_prefill_flops(LMDims.from_config(config), 7, count_attention=impl == "eager")
    with torch.no_grad():
        prof = _profiled(lambda: model(inputs_embeds=torch.randn(1, 7, 16)))
    # Qwen2's q/k/v have biases (addmm); their adds are not counted on either side.
    assert prof.get("aten::mm", 0) + prof.get("aten::addmm", 0) == counted["attention_proj"] + counted["mlp"] + counted["lm_head"]
    assert prof.get("aten::bmm", 0) == counted["attention_scores"]


def test_projector_by_hand():
    assert projector_flops(16, 1024, 4096) == {"linear_1": 2 * 16 * 1024 * 4096, "linear_2": 2 * 16 * 4096 * 4096}
    assert total(projector_flops(16, 1024, 4096)) == 671_088_640  # the paper's post - pre: 2.060 - 1.389 G
    assert projector_flops(3, 4, 5, depth=1) == {"linear_1": 120}
