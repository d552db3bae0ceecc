"""Our side of the NeXT video parity check: build a tiny NeXT-format checkpoint (llava_qwen + a 9x9 CLIP tower,
spatial_unpad, NeXT's video keys), the frame pixels and prompt ids, and our inputs_embeds / logits for every
mm_newline_position x mm_spatial_pool_mode. Run with the project's venv."""
import json
import sys
from pathlib import Path

import numpy as np
import torch

from llava.constants import IMAGE_TOKEN_INDEX
from llava.conversation import conv_templates
from llava.mm_utils import process_video, tokenizer_image_token
from llava.model.builder import load_pretrained_model
from llava.testing.tiny import build_tiny_clip_tower, build_tiny_llava_checkpoint, train_tiny_qwen_tokenizer

root = Path(sys.argv[1])
root.mkdir(parents=True, exist_ok=True)
if not (root / "llava-qwen-next-tiny" / "config.json").exists():
    tok = train_tiny_qwen_tokenizer(root / "tok")
    tower = build_tiny_clip_tower(root / "clip-tower", image_size=54, patch_size=6)
    ck = build_tiny_llava_checkpoint(root / "llava-qwen-next-tiny", tower, tok, llm="qwen2", seed=3,
        extra_config={"mm_patch_merge_type": "spatial_unpad", "image_aspect_ratio": "anyres_max_9"})
    # NeXT runs transformers 4.40: it reads rope_theta (transformers 5 writes rope_parameters) and torch_dtype.
    cfg = json.loads((ck / "config.json").read_text())
    cfg.update(rope_theta=cfg["rope_parameters"]["rope_theta"], torch_dtype="float32")
    (ck / "config.json").write_text(json.dumps(cfg, indent=2))
    # ... and tower weights under transformers 4's names (vision_model.*); transformers 5 reads both.
    from safetensors.torch import load_file, save_file
    weights = load_file(tower / "model.safetensors")
    save_file({"vision_model." + k: v for k, v in weights.items()}, str(tower / "model.safetensors"), metadata={"format": "pt"})
ck = root / "llava-qwen-next-tiny"
tokenizer, model, processor, _ = load_pretrained_model(str(ck), None, "llava_qwen", device="cpu")
model.eval()
frames = np.zeros((5, 40, 60, 3), dtype=np.uint8)
for i in range(5):
    frames[i, 8:24, 8 * i: 8 * i + 16] = (255, 60 + 30 * i, 20)
pixels = process_video(frames, processor)
conv = conv_templates["qwen_1_5"].copy()
conv.append_message(conv.roles[0], "<image>\nWhat happens in this video?")
conv.append_message(conv.roles[1], None)
ids = tokenizer_image_token(conv.get_prompt(), tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt")[None]
torch.save({"pixels": pixels, "ids": ids}, root / "inputs.pt")
out = {}
with torch.no_grad():
    for position in ("grid", "frame", "one_token", "no_token"):
        for mode in ("bilinear", "average", "max"):
            model.config.mm_newline_position, model.config.mm_spatial_pool_mode = position, mode
            _, pos, mask, _, embeds, _ = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, [pixels], modalities=["video"])
            logits = model(inputs_embeds=embeds, attention_mask=mask, position_ids=pos).logits
            out[f"{position}/{mode}"] = {"embeds": embeds, "logits": logits}
torch.save(out, root / "ours.pt")
print("ours:", {k: tuple(v["embeds"].shape) for k, v in out.items()})
