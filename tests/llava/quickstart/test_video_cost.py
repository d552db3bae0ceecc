"""The quickstart's clip FLOPs (``llava.quickstart.video.video_prefill_flops``) come from the cost engine, and the
video's token count is what the model really feeds its LLM."""

from __future__ import annotations

import pytest
import torch

from llava.constants import IMAGE_TOKEN_INDEX
from llava.cost.pipeline import checkpoint_prefill_flops
from llava.quickstart.video import FRAMES, video_prefill_flops

PROMPT = 30


@pytest.mark.parametrize(("projector", "per_frame"), [("mlp2x_gelu", 9), ("braco_c2s5", 9)])
def test_clip_flops_are_frames_times_one_image_and_one_llm_pass(tiny_llava_checkpoint, projector, per_frame):
    checkpoint = tiny_llava_checkpoint(projector)
    image = checkpoint_prefill_flops(checkpoint, PROMPT)
    clip = video_prefill_flops(checkpoint, PROMPT)
    # 6 x 6 tower grid: mlp2x_gelu is pooled (bilinear, stride 2: 3 x 3 = 9), Braco gives C² + S = 4 + 5 = 9 unpooled
    assert clip["visual_tokens"] == FRAMES * per_frame and clip["frames"] == FRAMES
    for part in ("vision", "compressor", "projector"):
        assert clip[part] == FRAMES * image[part]
    # text and visual tokens cost the LLM the same: the clip's LLM pass is the image's with the extra tokens as prompt
    extra = FRAMES * per_frame - image["visual_tokens"]
    assert clip["llm"] == checkpoint_prefill_flops(checkpoint, PROMPT + extra)["llm"]
    assert clip["total"] == clip["vision"] + clip["compressor"] + clip["projector"] + clip["llm"]
    assert f"per video of {FRAMES} frames" in clip["accounting"]


@pytest.mark.parametrize("projector", ["mlp2x_gelu", "braco_c2s5"])
def test_clip_token_count_is_the_models(tiny_llava_checkpoint, projector):
    """Newlines on (``spatial_unpad``, ``grid``): the count is the length the model splices in for FRAMES frames."""
    from llava.mm_utils import get_model_name_from_path, tokenizer_image_token
    from llava.model.builder import load_pretrained_model

    extra = {"mm_patch_merge_type": "spatial_unpad", "mm_newline_position": "grid"}
    checkpoint = tiny_llava_checkpoint(projector, extra_config=extra)
    tokenizer, model, processor, _ = load_pretrained_model(str(checkpoint), None, get_model_name_from_path(str(checkpoint)), device="cpu")
    side = processor.crop_size["height"] if hasattr(processor, "crop_size") else processor.size["height"]
    frames = torch.rand(FRAMES, 3, side, side)
    ids = tokenizer_image_token("<image>\nWhat moves?", tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt")[None]
    with torch.no_grad():
        *_, embeds, _ = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, [frames], modalities=["video"])
    counted = video_prefill_flops(checkpoint, PROMPT)["visual_tokens"]
    assert embeds.shape[1] - (ids.shape[1] - 1) == counted
    # hand count: mlp2x_gelu 3 x 3 pooled + a newline per row = 12 per frame; Braco 9 + one newline = 10 per frame
    assert counted == FRAMES * (12 if projector == "mlp2x_gelu" else 10)
