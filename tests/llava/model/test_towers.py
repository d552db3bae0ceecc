"""The vision-tower registry and the CLIP / SigLIP / SigLIP2-style towers on tiny local checkpoints.

References are computed independently: hidden states straight from the transformers model, attention from the
layer's own weights in float64, processor outputs from PIL + numpy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from transformers import CLIPVisionModel, SiglipVisionModel

from llava.mm_utils import process_images
from llava.model.multimodal_encoder import (
    BaseVisionTower,
    CLIPVisionTower,
    SiglipVisionTower,
    build_vision_tower,
    list_vision_towers,
    register_vision_tower,
    tower_model_type,
)
from llava.model.multimodal_encoder import registry as tower_registry
from llava.testing.tiny import build_tiny_vision_tower

from ._towers import offline_hub  # noqa: F401  (fixture)

#: id → (tiny kind, builder kwargs, tower class, reference model class, grid side, CLS token)
TOWERS = {
    "clip": ("clip", {"image_size": 48, "patch_size": 8}, CLIPVisionTower, CLIPVisionModel, 6, True),
    "clip_vision_model": ("clip_vision_model", {"image_size": 40, "patch_size": 8}, CLIPVisionTower, CLIPVisionModel, 5, True),
    "siglip-odd": ("siglip_vision_model", {"image_size": 54, "patch_size": 6}, SiglipVisionTower, SiglipVisionModel, 9, False),
    "siglip-partial": ("siglip", {"image_size": 57, "patch_size": 6}, SiglipVisionTower, SiglipVisionModel, 9, False),
    "siglip-even": ("siglip_vision_model", {"image_size": 64, "patch_size": 8}, SiglipVisionTower, SiglipVisionModel, 8, False),
    "siglip2": ("siglip2", {}, SiglipVisionTower, SiglipVisionModel, 8, False),
}


@pytest.fixture(scope="module")
def tower_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("towers")
    return {key: build_tiny_vision_tower(kind, root / key, **kwargs) for key, (kind, kwargs, *_) in TOWERS.items()}


def _args(path, **overrides) -> argparse.Namespace:
    return argparse.Namespace(mm_vision_tower=str(path), **{"mm_vision_select_layer": -2, **overrides})


def test_builtin_model_types_are_registered() -> None:
    assert {"clip", "clip_vision_model", "siglip", "siglip_vision_model"} <= set(list_vision_towers())


@pytest.mark.parametrize("key", list(TOWERS))
@pytest.mark.parametrize("select_layer", [-2, -1, 1])
def test_registry_dispatch_and_features(tower_dirs, key, select_layer) -> None:
    kind, _, tower_class, reference_class, side, has_cls = TOWERS[key]
    path = tower_dirs[key]
    saved_type = json.loads((path / "config.json").read_text())["model_type"]
    assert tower_model_type(str(path)) == saved_type == ("siglip" if kind == "siglip2" else kind)

    tower = build_vision_tower(_args(path, mm_vision_select_layer=select_layer))
    assert type(tower) is tower_class and tower.has_cls_token is has_cls
    assert tower.grid_shape == (side, side) and tower.num_patches_per_side == side and tower.num_patches == side * side

    images = torch.randn(3, 3, tower.image_size, tower.image_size, dtype=torch.float64)
    reference = reference_class.from_pretrained(path).eval()
    with torch.no_grad():
        hidden = reference(images.float(), output_hidden_states=True).hidden_states[select_layer]
    assert hidden.shape[1] == side * side + int(has_cls)  # the model itself: CLS only for CLIP
    expected = hidden[:, 1:] if has_cls else hidden
    features = tower(images)
    assert features.shape == (3, side * side, 32) and features.dtype == torch.float64
    torch.testing.assert_close(features.float(), expected)


@pytest.mark.parametrize("key", ["clip", "siglip-odd"])
def test_delay_load_reads_only_the_config(tower_dirs, key) -> None:
    tower = build_vision_tower(_args(tower_dirs[key]), delay_load=True)
    side = TOWERS[key][4]
    assert not tower.is_loaded and tower.image_processor is None and tower.num_patches == side * side
    with pytest.raises(RuntimeError, match="call load_model"):
        tower(torch.zeros(1, 3, tower.image_size, tower.image_size))
    tower.load_model()
    assert tower.is_loaded and tower(torch.zeros(1, 3, tower.image_size, tower.image_size)).shape == (1, side * side, 32)


def test_cls_patch_keeps_clip_cls_and_is_refused_for_siglip(tower_dirs) -> None:
    clip = build_vision_tower(_args(tower_dirs["clip"], mm_vision_select_feature="cls_patch"))
    assert clip(torch.zeros(1, 3, 48, 48)).shape == (1, 37, 32)
    with pytest.raises(ValueError, match=r"^mm_vision_select_feature 'cls_patch' needs a tower with a CLS token, .*; use 'patch'$"):
        build_vision_tower(_args(tower_dirs["siglip-odd"], mm_vision_select_feature="cls_patch"), delay_load=True)


def test_select_layer_out_of_range(tower_dirs) -> None:
    with pytest.raises(ValueError, match=r"^mm_vision_select_layer 3 is out of range for the 2-layer vision tower .*; expected -3\.\.2$"):
        build_vision_tower(_args(tower_dirs["siglip-odd"], mm_vision_select_layer=3), delay_load=True)


def test_unknown_and_unsupported_model_types(tmp_path) -> None:
    (tmp_path / "dino").mkdir()
    (tmp_path / "dino" / "config.json").write_text(json.dumps({"model_type": "dinov2"}))
    message = r"^unknown vision tower model_type 'dinov2' of vision tower '.*dino'; registered model_types: clip, .*siglip_vision_model"
    with pytest.raises(ValueError, match=message):
        build_vision_tower(_args(tmp_path / "dino"))
    (tmp_path / "naflex").mkdir()
    (tmp_path / "naflex" / "config.json").write_text(json.dumps({"model_type": "siglip2_vision_model"}))
    with pytest.raises(ValueError, match=r"^model_type 'siglip2_vision_model' .* is not supported: NaFlex SigLIP2 .*'siglip'\)$"):
        build_vision_tower(_args(tmp_path / "naflex"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"has no config\.json; expected a saved transformers vision model"):
        build_vision_tower(_args(tmp_path / "empty"))


@pytest.mark.parametrize("name", ["google/siglip-so400m-patch14-384", "openai/clip-vit-large-patch14-336"])
def test_hub_names_fail_in_one_sentence_without_network(offline_hub, name) -> None:
    # SigLIP goes through AutoConfig; the CLIP name keeps upstream's rule and fails when its config is read.
    with pytest.raises(ValueError) as info:
        build_vision_tower(argparse.Namespace(mm_vision_tower=name), delay_load=True)
    message = str(info.value)
    assert message.startswith(f"vision tower {name!r} is not a local directory and could not be downloaded")
    assert "pass the path of a saved tower directory" in message and message.count(". ") == 0 and "\n" not in message


def _manual_attention(layer, inputs: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 softmax(q kᵀ / sqrt(d)) and keys of a pre-LN encoder layer, from its own weights."""
    norm, attn = layer.layer_norm1, layer.self_attn
    x = F.layer_norm(inputs.double(), norm.normalized_shape, norm.weight.double(), norm.bias.double(), norm.eps)
    q = x @ attn.q_proj.weight.double().T + attn.q_proj.bias.double()
    k = x @ attn.k_proj.weight.double().T + attn.k_proj.bias.double()
    batch, tokens, width = q.shape
    head_dim = width // heads
    qh = q.view(batch, tokens, heads, head_dim).transpose(1, 2)
    kh = k.view(batch, tokens, heads, head_dim).transpose(1, 2)
    return torch.softmax(qh @ kh.transpose(-1, -2) / head_dim**0.5, dim=-1), k


@pytest.mark.parametrize("key", ["clip", "siglip-odd"])
@pytest.mark.parametrize("attention_layer, layer_index", [(-2, 0), (-1, 1), (1, 0), (2, 1)])
def test_encode_attention_and_keys(tower_dirs, key, attention_layer, layer_index) -> None:
    _, _, _, reference_class, side, has_cls = TOWERS[key]
    tower = build_vision_tower(_args(tower_dirs[key]))
    implementation = tower.vision_tower.config._attn_implementation
    images = torch.randn(2, 3, tower.image_size, tower.image_size)
    tower(images)  # transformers installs its own output-recording hooks on the first forward
    hooks_before = [len(module._forward_hooks) for module in tower.vision_tower.modules()]

    out = tower.encode(images, layers=(-1, 0), attention_layer=attention_layer)
    reference = reference_class.from_pretrained(tower_dirs[key]).eval()
    with torch.no_grad():
        hidden = reference(images, output_hidden_states=True).hidden_states
        attention, keys = _manual_attention(reference.encoder.layers[layer_index], hidden[layer_index], heads=2)
    tokens = side * side + int(has_cls)
    assert out.attention.shape == (2, 2, tokens, tokens) and out.attention.dtype == torch.float32
    assert out.keys.shape == (2, tokens, 32)
    torch.testing.assert_close(out.attention.double(), attention, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out.keys.double(), keys, atol=1e-5, rtol=1e-4)
    drop = 1 if has_cls else 0
    torch.testing.assert_close(out.features, hidden[-2][:, drop:])
    torch.testing.assert_close(out.features, tower(images))
    assert set(out.layers) == {-1, 0}
    torch.testing.assert_close(out.layers[-1], hidden[-1][:, drop:])
    torch.testing.assert_close(out.layers[0], hidden[0][:, drop:])
    # The hooks are gone and the normal forward path is untouched.
    assert tower.vision_tower.config._attn_implementation == implementation
    assert [len(module._forward_hooks) for module in tower.vision_tower.modules()] == hooks_before
    assert tower.encode(images).attention is None and tower.encode(images).keys is None


def test_encode_rejects_bad_arguments(tower_dirs) -> None:
    tower = build_vision_tower(_args(tower_dirs["siglip-odd"]))
    with pytest.raises(ValueError, match=r"^attention_layer 0 names the embedding output, which has no attention"):
        tower.encode(torch.zeros(1, 3, 54, 54), attention_layer=0)
    with pytest.raises(ValueError, match=r"^layers 5 is out of range"):
        tower.encode(torch.zeros(1, 3, 54, 54), layers=(5,))
    with pytest.raises(ValueError, match=r"^encode expects images of shape \[N, 3, H, W\], got \(3, 54, 54\)$"):
        tower.encode(torch.zeros(3, 54, 54))


# ---------------------------------------------------------------------- processors


def _normalised(image: Image.Image, mean, std) -> torch.Tensor:
    array = np.asarray(image, dtype=np.float64) / 255.0
    return torch.from_numpy((array - np.asarray(mean)) / np.asarray(std)).permute(2, 0, 1)


def _photo(size: tuple[int, int]) -> Image.Image:
    """A deterministic non-flat RGB image (gradients + a block), so resizes and crops are visible."""
    width, height = size
    x, y = np.meshgrid(np.arange(width), np.arange(height))
    array = np.stack([(x * 255) // max(width - 1, 1), (y * 255) // max(height - 1, 1), ((x + y) * 7) % 256], -1)
    array[height // 4 : height // 2, width // 5 : width // 3] = (250, 10, 120)
    return Image.fromarray(array.astype(np.uint8), "RGB")


@pytest.mark.parametrize("key, resample", [("siglip-odd", Image.BICUBIC), ("siglip2", Image.BILINEAR)])
def test_siglip_processor_resizes_without_crop(tower_dirs, key, resample) -> None:
    tower = build_vision_tower(_args(tower_dirs[key]), delay_load=True)
    tower.load_model()
    side = tower.image_size
    image = _photo((90, 40))
    expected = _normalised(image.resize((side, side), resample), [0.5] * 3, [0.5] * 3)
    for aspect in (None, "square"):
        pixels = process_images([image], tower.image_processor, argparse.Namespace(image_aspect_ratio=aspect))
        assert pixels.shape == (1, 3, side, side)
        torch.testing.assert_close(pixels[0].double(), expected, atol=1e-5, rtol=0)


def test_siglip_pad_uses_grey_127(tower_dirs) -> None:
    tower = build_vision_tower(_args(tower_dirs["siglip-odd"]))
    image = _photo((60, 30))
    canvas = Image.new("RGB", (60, 60), (127, 127, 127))
    canvas.paste(image, (0, 15))
    expected = _normalised(canvas.resize((54, 54), Image.BICUBIC), [0.5] * 3, [0.5] * 3)
    pixels = process_images([image], tower.image_processor, argparse.Namespace(image_aspect_ratio="pad"))
    torch.testing.assert_close(pixels[0].double(), expected, atol=1e-5, rtol=0)


def test_clip_processor_crops_the_centre(tower_dirs) -> None:
    tower = build_vision_tower(_args(tower_dirs["clip"]))
    image = _photo((96, 60))  # shortest edge 60 → 48: 77x48 (rounded as transformers does), then crop 48
    resized = image.resize((int(96 * 48 / 60), 48), Image.BICUBIC)
    left = (resized.width - 48) // 2
    expected = _normalised(resized.crop((left, 0, left + 48, 48)), tower.image_processor.image_mean, tower.image_processor.image_std)
    pixels = process_images([image], tower.image_processor, argparse.Namespace(image_aspect_ratio=None))
    torch.testing.assert_close(pixels[0].double(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("key", ["siglip-odd", "clip"])
def test_anyres_views_use_the_tower_side(tower_dirs, key) -> None:
    tower = build_vision_tower(_args(tower_dirs[key]))
    side = tower.image_size
    pinpoints = [[side, 2 * side], [2 * side, side], [2 * side, 2 * side]]
    image = _photo((2 * side + 10, side))  # wide: the 2x1 canvas
    cfg = argparse.Namespace(image_aspect_ratio="anyres", image_grid_pinpoints=pinpoints)
    views = process_images([image], tower.image_processor, cfg)[0]
    assert views.shape == (3, 3, side, side)  # global view + 2 crops of the tower's input side
    if key.startswith("siglip"):
        mean = std = [0.5] * 3
        global_view = _normalised(image.resize((side, side), Image.BICUBIC), mean, std)
        torch.testing.assert_close(views[0].double(), global_view, atol=1e-5, rtol=0)


def test_processor_size_as_a_tuple() -> None:
    from llava.mm_utils import _processor_sides

    class NextStyleSiglip:  # LLaVA-NeXT's own SigLIP processor keeps size as a tuple and a crop_size dict
        size = (384, 384)
        crop_size = {"height": 384, "width": 384}

    assert _processor_sides(NextStyleSiglip()) == (384, 384)


# ---------------------------------------------------------------------- a non-square grid


def test_non_square_grid_is_refused_where_a_square_is_needed(tmp_path, monkeypatch) -> None:
    """CLIP/SigLIP configs only hold one ``image_size``, so no built-in tower has a non-square grid; ViT's config
    takes an (height, width) pair, so a ViT tower registered like a plugin reaches the check with a real model."""
    from transformers import ViTConfig, ViTImageProcessorPil, ViTModel

    monkeypatch.setattr(tower_registry, "_REGISTRY", dict(tower_registry._REGISTRY))

    @register_vision_tower("vit")
    class ViTTower(BaseVisionTower):
        model_class, config_class, processor_class, has_cls_token = ViTModel, ViTConfig, ViTImageProcessorPil, True

    config = ViTConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                       image_size=[24, 40], patch_size=8)
    ViTModel(config, add_pooling_layer=False).save_pretrained(tmp_path / "vit")
    ViTImageProcessorPil(size={"height": 24, "width": 40}).save_pretrained(tmp_path / "vit")
    tower = build_vision_tower(_args(tmp_path / "vit", mm_vision_select_layer=-1))
    assert type(tower) is ViTTower and tower.grid_shape == (3, 5) and tower.num_patches == 15
    assert tower(torch.zeros(2, 3, 24, 40)).shape == (2, 15, 16)
    with pytest.raises(ValueError, match=r"^vision tower '.*vit' gives a 3x5 token grid, which is not square; "):
        tower.num_patches_per_side
    with pytest.raises(ValueError, match=r"takes 24x40-pixel \(non-square\) inputs, so it has no single input side"):
        tower.image_size


# ---------------------------------------------------------------------- cost presets


def test_cost_presets_count_the_tokens_the_registry_tower_gives(tmp_path) -> None:
    """Each `braco cost` preset's tower config, saved and built through the registry, gives the preset's per-view
    token count at the tower's own input side (CLIP-L/336: 576 with CLS dropped; SigLIP-384/14: 27 x 27 = 729;
    SigLIP2-512/16: 32 x 32 = 1024)."""
    from llava.cost.presets import get_preset, list_presets

    checked = 0
    for name in list_presets():
        spec = get_preset(name)
        spec.vision.save_pretrained(tmp_path / name)
        tower = build_vision_tower(_args(tmp_path / name, mm_vision_select_layer=spec.select_layer), delay_load=True)
        assert tower.image_size in {"clip": (336,), "siglip": (384, 512)}[tower.family]
        for inp in spec.inputs:
            if inp.image_size == tower.image_size:
                assert spec.feature_tokens(inp) == inp.views * tower.num_patches == int(inp.label)
                assert spec.visual_tokens(inp) == int(inp.label)
                checked += 1
    assert checked >= 5  # 576, 2880, 729, 3645, 1024


@pytest.mark.parametrize("key", ["clip", "siglip-odd"])
def test_missing_preprocessor_config_falls_back_to_the_towers_default(tower_dirs, tmp_path, key, caplog) -> None:
    import shutil

    folder = shutil.copytree(tower_dirs[key], tmp_path / key)
    saved = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").unlink()
    with caplog.at_level("WARNING"):
        tower = build_vision_tower(_args(folder))
    assert "has no preprocessor_config.json" in caplog.text
    processor = tower.image_processor
    assert list(processor.image_mean) == pytest.approx(saved["image_mean"]) and int(processor.resample) == saved["resample"]
    image = _photo((70, 50))
    fallback = process_images([image], processor, argparse.Namespace(image_aspect_ratio=None))
    reference = build_vision_tower(_args(tower_dirs[key])).image_processor
    torch.testing.assert_close(fallback, process_images([image], reference, argparse.Namespace(image_aspect_ratio=None)))
