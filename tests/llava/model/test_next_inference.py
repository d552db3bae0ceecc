"""LLaVA-NeXT / OneVision's inference code runs as published (issue 23): the OneVision tutorial's image,
interleaved-image and video cells (docs/LLaVA_OneVision_Tutorials.ipynb at LLaVA-VL/LLaVA-NeXT df17966) with only
the checkpoint path, the image and the device replaced, and NeXT's ``load_pretrained_model`` keywords."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch
from PIL import Image

from llava.utils import UserError

from .test_video import _video


def test_onevision_tutorial_cells_run_verbatim(ov_checkpoint) -> None:
    from llava.constants import DEFAULT_IMAGE_TOKEN, IMAGE_TOKEN_INDEX
    from llava.conversation import conv_templates
    from llava.mm_utils import process_images, tokenizer_image_token
    from llava.model.builder import load_pretrained_model

    pretrained = str(ov_checkpoint[0])
    model_name = "llava_qwen"
    device = "cpu"
    device_map = "auto"
    # --- image input
    llava_model_args = {"multimodal": True, "attn_implementation": "sdpa"}
    tokenizer, model, image_processor, max_length = load_pretrained_model(pretrained, None, model_name, device_map=device_map, **llava_model_args)
    model.eval()
    image = Image.fromarray(_video(1)[0])
    image_tensor = process_images([image], image_processor, model.config)
    image_tensor = [_image.to(dtype=torch.float16, device=device) for _image in image_tensor]
    conv_template = "qwen_1_5"
    question = DEFAULT_IMAGE_TOKEN + "\nWhat is shown in this image?"
    conv = copy.deepcopy(conv_templates[conv_template])
    conv.append_message(conv.roles[0], question)
    conv.append_message(conv.roles[1], None)
    prompt_question = conv.get_prompt()
    input_ids = tokenizer_image_token(prompt_question, tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0).to(device)
    image_sizes = [image.size]
    cont = model.generate(input_ids, images=image_tensor, image_sizes=image_sizes, do_sample=False, temperature=0, max_new_tokens=4)
    text_outputs = tokenizer.batch_decode(cont, skip_special_tokens=True)
    assert len(text_outputs) == 1 and cont.shape[1] <= 4
    assert model.config._attn_implementation == "sdpa"

    # --- interleaved images: overwrite_config pads each image to one view
    llava_model_args = {"multimodal": True}
    overwrite_config = {}
    overwrite_config["image_aspect_ratio"] = "pad"
    llava_model_args["overwrite_config"] = overwrite_config
    tokenizer, model, image_processor, max_length = load_pretrained_model(pretrained, None, model_name, device_map=device_map, **llava_model_args)
    model.eval()
    assert model.config.image_aspect_ratio == "pad"
    images = [image, image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)]
    image_tensors = process_images(images, image_processor, model.config)
    image_tensors = [_image.to(dtype=torch.float16, device=device) for _image in image_tensors]
    question = f"{DEFAULT_IMAGE_TOKEN} This is the first image. Can you describe what you see?\n\nNow, let's look at another image: {DEFAULT_IMAGE_TOKEN}\nWhat's the difference between these two images?"
    conv = copy.deepcopy(conv_templates[conv_template])
    conv.append_message(conv.roles[0], question)
    conv.append_message(conv.roles[1], None)
    prompt_question = conv.get_prompt()
    input_ids = tokenizer_image_token(prompt_question, tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0).to(device)
    image_sizes = [image.size for image in images]
    cont = model.generate(input_ids, images=image_tensors, image_sizes=image_sizes, do_sample=False, temperature=0, max_new_tokens=4)
    assert len(tokenizer.batch_decode(cont, skip_special_tokens=True)) == 1
    # Each padded image is one 9 x 9 view + the unpad newline: 2 x 82 visual tokens.
    embeds = model.prepare_inputs_labels_for_multimodal(input_ids, None, None, None, None, image_tensors, image_sizes)[4]
    assert embeds.shape[1] == input_ids.shape[1] - 2 + 2 * 82

    # --- video: NeXT's frames come from decord as [F, H, W, 3] uint8; the processor takes them as one batch
    llava_model_args = {"multimodal": True}
    tokenizer, model, image_processor, max_length = load_pretrained_model(pretrained, None, model_name, device_map=device_map, attn_implementation="sdpa", **llava_model_args)
    model.eval()
    video_frames = _video(4)
    image_tensors = []
    frames = image_processor.preprocess(video_frames, return_tensors="pt")["pixel_values"].half()
    image_tensors.append(frames)
    question = f"{DEFAULT_IMAGE_TOKEN}\nDescribe what's happening in this video."
    conv = copy.deepcopy(conv_templates[conv_template])
    conv.append_message(conv.roles[0], question)
    conv.append_message(conv.roles[1], None)
    prompt_question = conv.get_prompt()
    input_ids = tokenizer_image_token(prompt_question, tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0).to(device)
    image_sizes = [frame.size for frame in video_frames]
    cont = model.generate(input_ids, images=image_tensors, image_sizes=image_sizes, do_sample=False, temperature=0, max_new_tokens=4, modalities=["video"])
    assert len(tokenizer.batch_decode(cont, skip_special_tokens=True)) == 1
    assert frames.shape == (4, 3, 54, 54)


def test_next_load_keywords(ov_checkpoint, tmp_path) -> None:
    """``customized_config``, ``overwrite_config``, ``torch_dtype`` and ``multimodal`` as lmms-eval's
    ``llava_onevision`` / ``llava_vid`` wrappers pass them (a TypeError before issue 23)."""
    from llava.model.builder import load_pretrained_model

    path = str(ov_checkpoint[0])
    custom = tmp_path / "custom.json"
    config = json.loads((ov_checkpoint[0] / "config.json").read_text())
    custom.write_text(json.dumps({**config, "mm_newline_position": "frame"}))
    _, model, processor, _ = load_pretrained_model(
        path, None, "llava_qwen", device_map="auto", device="cpu", torch_dtype="bfloat16", customized_config=str(custom),
        overwrite_config={"mm_spatial_pool_stride": 3, "mm_spatial_pool_mode": "average"}, multimodal=True,
        attn_implementation="eager",
    )
    assert model.dtype == torch.bfloat16
    assert (model.config.mm_newline_position, model.config.mm_spatial_pool_stride, model.config.mm_spatial_pool_mode) == ("frame", 3, "average")
    assert model.config._attn_implementation == "eager"
    assert processor is not None

    # multimodal=True loads a LLaVA checkpoint whose name lacks "llava" (else the name rule says: a plain LLM).
    renamed = tmp_path / "onevision-qwen2-tiny"
    shutil.copytree(ov_checkpoint[0], renamed)
    _, model, processor, _ = load_pretrained_model(str(renamed), None, "onevision-qwen2-tiny", device="cpu", multimodal=True)
    assert processor is not None and model.get_vision_tower() is not None

    with pytest.raises(UserError, match="torch_dtype 'int8' is not a floating-point dtype"):
        load_pretrained_model(path, None, "llava_qwen", device="cpu", torch_dtype="int8")


def test_siglip_tower_has_next_name() -> None:
    from llava.model.multimodal_encoder.siglip_encoder import SigLipVisionTower, SiglipVisionTower

    assert SigLipVisionTower is SiglipVisionTower


def test_onevision_config_with_model_type_llava_loads_as_qwen(ov_checkpoint, tmp_path) -> None:
    """Released OneVision config.json files say ``"model_type": "llava"`` with ``"architectures":
    ["LlavaQwenForCausalLM"]`` (lmms-lab/llava-onevision-qwen2-7b-ov); before issue 23 the alias picked LLaMA."""
    from llava.model.builder import load_pretrained_model

    released = tmp_path / "llava-onevision-qwen2-tiny-ov"
    shutil.copytree(ov_checkpoint[0], released)
    config = json.loads((released / "config.json").read_text())
    assert config["architectures"] == ["LlavaQwenForCausalLM"]
    config["model_type"] = "llava"
    (released / "config.json").write_text(json.dumps(config))
    _, model, _, _ = load_pretrained_model(str(released), None, "llava_qwen", device="cpu")
    assert type(model).__name__ == "LlavaQwenForCausalLM" and model.config.model_type == "llava_qwen"
