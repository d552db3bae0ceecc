"""The loader is chosen from a checkpoint's files, not its folder name (issue 20; fault case I09).

Upstream LLaVA loads a folder whose name lacks "llava" as a plain language model; the official Braco release
works around that with a ``llava-braco`` symlink. These tests copy tiny checkpoints into folder names a user
has (``outputs/braco/k9/seed0/stage2``, ``ckpt``, ``stage1``) and load them through ``load_pretrained_model``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from llava.model.checkpoint_layout import checkpoint_kind
from llava.model.language_model.llava_llama import LlavaLlamaForCausalLM
from llava.utils import UserError

from ...conftest import OFFICIAL_FOURIER_C3S7
from ._support import BRACO, load, make_images, pixels, prompt_ids


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def _logits(tokenizer, model, processor) -> torch.Tensor:
    input_ids = prompt_ids(tokenizer, "What is in the image?").unsqueeze(0)
    with torch.no_grad():
        return model(input_ids, images=pixels(make_images(1), processor, model)).logits


@BRACO
def test_official_braco_stage2_layout_loads_as_llava(tiny_llava_checkpoint, tmp_path):
    source = tiny_llava_checkpoint("fourier_mlp2x_gelu", extra_config=OFFICIAL_FOURIER_C3S7)
    stage2 = _copy(source, tmp_path / "outputs" / "braco" / "k9" / "seed0" / "stage2")
    tokenizer, model, processor, _ = load(stage2)
    assert isinstance(model, LlavaLlamaForCausalLM) and processor is not None
    assert model.encode_images(pixels(make_images(1), processor, model)).shape == (1, 9 + 7, model.config.hidden_size)
    # The same files under a "llava-" name give the same model.
    _, reference, _, _ = load(source)
    torch.testing.assert_close(_logits(tokenizer, model, processor), _logits(tokenizer, reference, processor), rtol=0, atol=0)


def test_folder_named_ckpt_loads_as_llava(tiny_llava_checkpoint, tmp_path):
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "ckpt")
    _, model, processor, _ = load(path)
    assert isinstance(model, LlavaLlamaForCausalLM) and processor is not None and model.get_vision_tower().is_loaded


def test_stage1_folder_without_llava_in_its_name(tiny_projector_checkpoint, tiny_base_llm, tmp_path):
    path = _copy(tiny_projector_checkpoint("mlp2x_gelu", "bin"), tmp_path / "runs" / "stage1")
    _, model, processor, _ = load(path, model_base=tiny_base_llm)
    stored = torch.load(path / "mm_projector.bin", weights_only=True)
    projector = model.get_model().mm_projector.state_dict()
    assert processor is not None and all(torch.equal(projector[k.removeprefix("model.mm_projector.")], v) for k, v in stored.items())
    with pytest.raises(UserError, match=r"is a stage-1 checkpoint .*pass the LLM it was trained on as --model-base"):
        load(path)


def test_language_model_named_llava_still_loads_as_one(tiny_base_llm, tmp_path):
    path = _copy(tiny_base_llm, tmp_path / "llava-vicuna-text-only")
    _, model, processor, _ = load(path)
    assert processor is None and type(model).__name__ == "LlamaForCausalLM"


def _folder(root: Path, name: str, files: dict[str, object]) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    for filename, content in files.items():
        (folder / filename).write_text(content if isinstance(content, str) else json.dumps(content))
    return folder


LLAVA = {"model_type": "llava_llama", "mm_vision_tower": "/towers/clip", "mm_projector_type": "mlp2x_gelu", "hidden_size": 64}
RELEASED = {"model_type": "llava", "mm_vision_tower": "openai/clip-vit-large-patch14-336", "mm_projector_type": "mlp2x_gelu"}
LLAMA = {"model_type": "llama", "hidden_size": 64}


@pytest.mark.parametrize("name, files, base, expected", [
    ("stage2", {"config.json": LLAVA, "model.safetensors": ""}, None, "llava_full"),
    ("ckpt", {"config.json": RELEASED, "pytorch_model-00001-of-00002.bin": "", "pytorch_model.bin.index.json": {}}, None, "llava_full"),
    ("my-run", {"config.json": LLAVA, "mm_projector.bin": ""}, "base", "llava_projector"),
    ("checkpoint-500", {"config.json": LLAVA, "mm_projector.bin": ""}, "base", "llava_projector"),
    ("adapter", {"config.json": LLAVA, "adapter_config.json": {}, "non_lora_trainables.bin": ""}, "base", "llava_lora"),
    ("llava-v1.5-lora", {"config.json": LLAVA, "adapter_config.json": {}, "non_lora_trainables.bin": ""}, "base", "llava_lora"),
    ("llava-named-llm", {"config.json": LLAMA, "model.safetensors": ""}, None, "language_model"),
    ("peft-adapter", {"adapter_config.json": {}}, "base", "language_model"),
    ("stage2-with-base", {"config.json": LLAVA, "model.safetensors": ""}, "base", "llava_full"),
])
def test_the_files_decide_the_kind(tmp_path, name, files, base, expected):
    folder = _folder(tmp_path, name, files)
    assert checkpoint_kind(str(folder), base, folder.name) == expected


@pytest.mark.parametrize("files, base, message", [
    ({"README.md": "my notes"}, None, r"has no config\.json, so it is not a model checkpoint; expected a LLaVA checkpoint folder"),
    ({"config.json": {"model_type": "clip", "vision_config": {}}, "model.safetensors": ""}, None,
     r"describes a 'clip' model, which is neither a LLaVA checkpoint .* nor a causal language model; expected"),
    ({"config.json": {"model_type": "llava", "text_config": {}, "vision_config": {}}}, None,
     r"transformers-format vision-language checkpoint"),
    ({"config.json": LLAVA}, None, r"has a LLaVA config\.json but no model weights"),
    ({"config.json": LLAVA, "adapter_config.json": {}, "non_lora_trainables.bin": ""}, None,
     r"is a LLaVA LoRA checkpoint .*pass the LLM it was trained on as --model-base"),
    ({"adapter_config.json": {}}, None, r"holds a PEFT adapter .*--model-base"),
])
def test_a_folder_that_is_not_a_usable_checkpoint_is_one_sentence(tmp_path, files, base, message):
    folder = _folder(tmp_path, "llava-something", files)
    with pytest.raises(UserError, match=message):
        checkpoint_kind(str(folder), base, folder.name)
