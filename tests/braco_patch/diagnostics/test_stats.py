"""Streaming M = E[X Xᵀ], seeded resampling, image/label loading and vision-tower features."""

import json

import numpy as np
import pytest
import torch

from braco_patch.diagnostics.data import InputError, list_images, load_labelled, resample_indices, split_indices
from braco_patch.diagnostics.stats import MomentAccumulator, resampled_moments, token_moments
from braco_patch.diagnostics.tower import load_tower
from llava.utils import UserError

from .conftest import second_moment


def test_streamed_moment_equals_the_direct_mean_for_any_batching():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(11, 16, 7, generator=gen)
    direct = second_moment(x)
    for sizes in ([11], [1] * 11, [4, 4, 3], [2, 9]):
        acc = MomentAccumulator(keep_grams=5)
        for part in torch.split(x, sizes):
            acc.update(part)
        stats = acc.result()
        assert stats.count == 11 and stats.grid == 4 and stats.dim == 7
        assert torch.allclose(stats.m, direct, rtol=1e-12, atol=1e-12)
        assert stats.grams.shape == (5, 16, 16)
        assert torch.allclose(stats.grams.double(), torch.einsum("sld,smd->slm", x[:5].double(), x[:5].double()), atol=1e-4)


def test_resamples_are_seeded_draws_without_replacement():
    sets = resample_indices(100, 30, 3, seed=0)
    assert [len(s) for s in sets] == [30, 30, 30]
    assert all(len(np.unique(s)) == 30 and s.min() >= 0 and s.max() < 100 for s in sets)
    assert not np.array_equal(sets[0], sets[1])
    assert all(np.array_equal(a, b) for a, b in zip(sets, resample_indices(100, 30, 3, seed=0)))
    assert np.array_equal(resample_indices(100, 30, 1, seed=2)[0], sets[2])  # resample r uses seed + r
    assert all(np.array_equal(s, np.arange(10)) for s in resample_indices(10, 30, 2))


class _CountingTower:
    """Features from the pixels themselves (8 x 8 grid of 2-channel tokens); counts encoded images."""

    def __init__(self):
        self.encoded = 0

    def encode(self, images):
        self.encoded += len(images)
        arrays = [np.asarray(im.resize((8, 8)), dtype=np.float32)[..., :2] / 255 for im in images]
        return torch.from_numpy(np.stack(arrays)).reshape(len(images), 64, 2)


def test_resampled_moments_encode_each_image_once_and_match_per_subset(image_folder):
    paths = list_images(image_folder)
    sets = resample_indices(len(paths), 7, 3, seed=0)
    tower = _CountingTower()
    stats = resampled_moments(tower, paths, sets, batch_size=4, progress=False)
    assert tower.encoded == len(np.unique(np.concatenate(sets)))
    for s, idx in zip(stats, sets):
        alone = token_moments(_CountingTower(), [paths[i] for i in idx], batch_size=3, progress=False)
        assert s.count == 7 and torch.allclose(s.m, alone.m, rtol=1e-10)


def test_labels_from_class_folders_and_from_jsonl(labelled_folder, tmp_path):
    folders = load_labelled(labelled_folder)
    assert folders.classes == ["class0", "class1", "class2"] and np.bincount(folders.labels).tolist() == [10, 10, 10]
    lines = [json.dumps({"image": str(p.relative_to(labelled_folder)), "label": 7 if "class1" in str(p) else "other"})
             for p in folders.paths]
    (tmp_path / "labels.jsonl").write_text("\n".join(lines) + "\n\n")
    jsonl = load_labelled(labelled_folder, tmp_path / "labels.jsonl")
    assert jsonl.classes == ["7", "other"] and np.bincount(jsonl.labels).tolist() == [10, 20]


def test_label_errors_name_the_problem(labelled_folder, tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"image": "class0/0.png", "label": 0}\nnot json\n')
    with pytest.raises(InputError, match="line 2 is not a JSON object with 'image' and 'label'"):
        load_labelled(labelled_folder, tmp_path / "bad.jsonl")
    (tmp_path / "missing.jsonl").write_text('{"image": "class0/nope.png", "label": 0}\n')
    with pytest.raises(InputError, match="line 1 names image .*nope.png'?, which does not exist"):
        load_labelled(labelled_folder, tmp_path / "missing.jsonl")
    (tmp_path / "one.jsonl").write_text('{"image": "class0/0.png", "label": 0}\n')
    with pytest.raises(InputError, match="at least 2 classes"):
        load_labelled(labelled_folder, tmp_path / "one.jsonl")


def test_split_is_stratified_disjoint_and_seeded():
    labels = np.repeat([0, 1, 2], 10)
    splits = split_indices(labels, 0.2, 0.2, seed=0)
    together = np.concatenate(list(splits.values()))
    assert sorted(together.tolist()) == list(range(30))
    assert [np.bincount(labels[splits[k]]).tolist() for k in ("train", "val", "test")] == [[6, 6, 6], [2, 2, 2], [2, 2, 2]]
    with pytest.raises(InputError, match="fractions"):
        split_indices(labels, 0.6, 0.5)


def test_clip_tower_features_are_the_penultimate_patch_tokens(tiny_tower, image_folder):
    from PIL import Image
    from transformers import CLIPVisionModel

    tower = load_tower(tiny_tower)
    images = [Image.open(p).convert("RGB") for p in list_images(image_folder)[:3]]
    features = tower.encode(images)
    assert features.shape == (3, 36, 32) and tower.select_layer == -2
    pixels = tower.processor(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        hidden = CLIPVisionModel.from_pretrained(str(tiny_tower))(pixel_values=pixels, output_hidden_states=True).hidden_states
    assert torch.allclose(features, hidden[-2][:, 1:], atol=1e-6)
    assert torch.allclose(load_tower(tiny_tower, select_layer=-1).encode(images), hidden[-1][:, 1:], atol=1e-6)


def test_siglip_tower_keeps_every_token(tmp_path, image_folder):
    from PIL import Image
    from transformers import SiglipImageProcessor, SiglipVisionConfig, SiglipVisionModel

    config = SiglipVisionConfig(image_size=40, patch_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4)
    SiglipVisionModel(config).save_pretrained(tmp_path)
    SiglipImageProcessor(size={"height": 40, "width": 40}).save_pretrained(tmp_path)
    tower = load_tower(tmp_path)
    features = tower.encode([Image.open(list_images(image_folder)[0]).convert("RGB")])
    assert tower.family == "siglip" and features.shape == (1, 25, 32)  # 5 x 5, no CLS


def test_llava_checkpoint_names_its_tower_and_layer(tiny_tower, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava_llama", "mm_vision_tower": str(tiny_tower),
                                                      "mm_vision_select_layer": -1}))
    tower = load_tower(tmp_path)
    assert tower.select_layer == -1 and tower.name == tiny_tower.name
    assert load_tower(tmp_path, select_layer=-2).select_layer == -2
    (tmp_path / "config.json").write_text(json.dumps({"mm_vision_tower": "openai/clip-vit-large-patch14-336"}))
    with pytest.raises(InputError, match="mm_vision_tower 'openai/clip-vit-large-patch14-336' .* is not a local folder"):
        load_tower(tmp_path)


def test_tower_errors_name_the_bad_value(tiny_tower, tmp_path):
    with pytest.raises(InputError, match="does not exist or is not a folder"):
        load_tower(tmp_path / "missing")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(InputError, match="unknown vision tower model_type 'llama' .*; registered model_types: clip, "):
        load_tower(tmp_path)
    with pytest.raises(InputError, match="mm_vision_select_layer 5 is out of range for the 2-layer vision tower"):
        load_tower(tiny_tower, select_layer=5)


def test_unreadable_images_are_named(image_folder, tmp_path):
    from braco_patch.diagnostics.data import open_image

    first = list_images(image_folder)[0]
    (tmp_path / "cut.png").write_bytes(first.read_bytes()[:2000])
    (tmp_path / "text.jpg").write_text("not an image")
    # The loaders' sentences (llava.mm_utils.open_image), the one image rule
    with pytest.raises(UserError, match=r"image file '.*cut.png' is not a readable image \(damaged or truncated: image file is truncated"):
        open_image(tmp_path / "cut.png")
    with pytest.raises(UserError, match=r"image file '.*text.jpg' is not a readable image \(not a known image format\)"):
        open_image(tmp_path / "text.jpg")
    with pytest.raises(InputError, match="does not exist or is not a folder"):
        list_images(tmp_path / "nowhere")


def test_towers_come_from_the_llava_registry(image_folder, tmp_path, monkeypatch):
    """A full SiglipModel checkpoint (as released) loads through LLaVA's tower registry; the features are the
    model's own hidden_states[-2] with nothing dropped."""
    from PIL import Image
    from transformers import SiglipVisionModel

    from llava.model.multimodal_encoder import SiglipVisionTower, registry
    from llava.testing.tiny import build_tiny_siglip_tower

    folder = build_tiny_siglip_tower(tmp_path / "siglip", image_size=54, patch_size=6, full_model=True)
    tower = load_tower(folder)
    images = [Image.open(p).convert("RGB") for p in list_images(image_folder)[:2]]
    pixels = tower.processor(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        hidden = SiglipVisionModel.from_pretrained(str(folder))(pixel_values=pixels, output_hidden_states=True).hidden_states
    assert tower.family == "siglip" and isinstance(tower.model, SiglipVisionTower)
    assert torch.allclose(tower.encode(images), hidden[-2], atol=1e-6)  # 9 x 9 = 81 tokens, no CLS

    # No second loader: without the registry entry the diagnostics cannot load the tower either.
    monkeypatch.setattr(registry, "_REGISTRY", {k: v for k, v in registry._REGISTRY.items() if k != "siglip"})
    with pytest.raises(InputError, match="unknown vision tower model_type 'siglip' .*; registered model_types: "):
        load_tower(folder)
