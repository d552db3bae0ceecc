"""NeXT's side (LLaVA-VL/LLaVA-NeXT df17966 on transformers 4.40): load the same checkpoint with NeXT's
LlavaQwenForCausalLM, feed the same pixels and ids through NeXT's prepare_inputs_labels_for_multimodal, compare."""
import sys
from pathlib import Path

import torch

from llava.model.language_model.llava_qwen import LlavaQwenForCausalLM

root = Path(sys.argv[1])
model = LlavaQwenForCausalLM.from_pretrained(str(root / "llava-qwen-next-tiny"), torch_dtype=torch.float32, attn_implementation="eager")
model.get_model().get_vision_tower().load_model()
model.eval()
inputs = torch.load(root / "inputs.pt")
ours = torch.load(root / "ours.pt")
worst_e = worst_l = 0.0
with torch.no_grad():
    for key, mine in ours.items():
        position, mode = key.split("/")
        model.config.mm_newline_position, model.config.mm_spatial_pool_mode = position, mode
        _, pos, mask, _, embeds, _ = model.prepare_inputs_labels_for_multimodal(inputs["ids"], None, None, None, None, [inputs["pixels"]], ["video"], None)
        logits = model(inputs_embeds=embeds, attention_mask=mask, position_ids=pos).logits
        assert embeds.shape == mine["embeds"].shape, (key, embeds.shape, mine["embeds"].shape)
        embeds_error = (embeds - mine["embeds"]).abs().max().item()
        logits_error = (logits - mine["logits"]).abs().max().item()
        worst_e, worst_l = max(worst_e, embeds_error), max(worst_l, logits_error)
        print(f"{key:22s} tokens {embeds.shape[1]:4d}  max|d embeds| {embeds_error:.2e}  max|d logits| {logits_error:.2e}")
print(f"worst: embeds {worst_e:.2e}, logits {worst_l:.2e}")
