"""AnyRes training through ``llava/train/train.py``: both stages, every merge type, a grid-keeping projector and a
Braco budget, with images of different aspect ratios in one batch (so the views differ and batches are lists)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback

from llava.mm_utils import process_images
from llava.train.train_callbacks import register_callback_provider, unregister_callback_provider
from llava.visual_tokens import visual_token_count

from ..model._support import BRACO, load
from .conftest import TrainData, caption_record, chat_record, common_flags, make_image, text_record, write_json

#: Canvases in tower sides (the tiny tower takes 48 px): 1x2, 2x1, 2x2, 3x1, 1x3 as LLaVA-1.6's five.
PINPOINTS = "[[48, 96], [96, 48], [96, 96], [144, 48], [48, 144]]"
#: (size, views): 2x2 → 5 views, 1x2 → 3, 1x3 → 4, 3x1 → 4.
IMAGES = [((100, 90), 5), ((40, 30), 3), ((30, 120), 4), ((150, 40), 4)]
GRID = 6  # the tiny tower's 6x6 patch grid


@pytest.fixture(scope="module")
def anyres_data(tmp_path_factory) -> TrainData:
    root = tmp_path_factory.mktemp("anyres_data")
    images = root / "images"
    images.mkdir()
    for index, (size, _) in enumerate(IMAGES):
        make_image(index).resize(size).save(images / f"img{index}.png")
    pretrain = write_json(root / "pretrain.json", [caption_record(i) for i in range(len(IMAGES))])
    finetune = write_json(root / "finetune.json", [chat_record(i) for i in range(len(IMAGES))] + [text_record(0)])
    return TrainData(root, images, pretrain, finetune)


class BatchRecorder(TrainerCallback):
    """Records, for every forward call of the model, the type of ``images`` and the ``image_sizes`` it got."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list]] = []
        self.handle = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        def hook(module, positional, keywords):
            images = keywords.get("images")
            kind = "list" if isinstance(images, list) else f"{images.ndim}-D" if images is not None else "none"
            self.batches.append((kind, list(keywords.get("image_sizes") or [])))

        self.handle = model.register_forward_pre_hook(hook, with_kwargs=True)

    def on_train_end(self, args, state, control, **kwargs):
        self.handle.remove()


def _run(argv: list[str]) -> tuple[object, BatchRecorder]:
    from llava.train.train import train

    recorder = BatchRecorder()
    provider = lambda model: recorder  # noqa: E731
    register_callback_provider(provider)
    try:
        trainer = train(argv=argv)
    finally:
        unregister_callback_provider(provider)
    return trainer, recorder


def _anyres_flags(merge: str) -> list[str]:
    return ["--image_aspect_ratio", "anyres", "--image_grid_pinpoints", PINPOINTS, "--mm_patch_merge_type", merge,
            "--max_steps", "2", "--per_device_train_batch_size", "2", "--learning_rate", "1e-3"]


def _losses(trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


@pytest.mark.parametrize("merge", ["flat", "spatial", "spatial_unpad"])
@pytest.mark.parametrize("projector, per_view", [
    pytest.param("mlp2x_gelu", None, id="mlp2x_gelu"),
    pytest.param("braco_k4", 4, id="braco_k4", marks=BRACO),
])
def test_anyres_two_stages(tmp_path: Path, tiny_base_llm, tiny_tower_dir, anyres_data, merge, projector, per_view) -> None:
    common = common_flags(tiny_base_llm, tiny_tower_dir, anyres_data, projector)
    stage1 = tmp_path / "pretrain"
    trainer, seen = _run(common + _anyres_flags(merge) + [
        "--version", "plain", "--data_path", str(anyres_data.pretrain), "--tune_mm_mlp_adapter", "True",
        "--output_dir", str(stage1),
    ])
    assert len(_losses(trainer)) == 2 and all(math.isfinite(loss) for loss in _losses(trainer))
    # a batch is 5-D when its images have equal view counts, else a list; one (width, height) per image
    views = dict(IMAGES)
    assert len(seen.batches) == 2 and all(len(sizes) == 2 and set(sizes) <= set(views) for _, sizes in seen.batches)
    assert [kind for kind, _ in seen.batches] == [
        "5-D" if len({views[size] for size in sizes}) == 1 else "list" for _, sizes in seen.batches
    ]
    assert "list" in [kind for kind, _ in seen.batches]  # only 2 of the 4 images share a view count

    stage2 = tmp_path / "llava-anyres"
    trainer, seen = _run(common + _anyres_flags(merge) + [
        "--version", "v1", "--data_path", str(anyres_data.finetune), "--pretrain_mm_mlp_adapter",
        str(stage1 / "mm_projector.bin"), "--output_dir", str(stage2),
    ])
    assert len(_losses(trainer)) == 2 and all(math.isfinite(loss) for loss in _losses(trainer))

    config = json.loads((stage2 / "config.json").read_text())
    assert config["image_aspect_ratio"] == "anyres" and config["mm_patch_merge_type"] == merge
    assert config["image_grid_pinpoints"] == json.loads(PINPOINTS)
    # the trained checkpoint loads and gives each image the documented count: 36 per view, or the budget, merged
    _, model, processor, _ = load(stage2)
    for size, views in IMAGES:
        pixels = process_images([make_image(0).resize(size)], processor, model.config)
        assert pixels.shape[:2] == (1, views)
        with torch.no_grad():
            tokens = model.image_features(pixels, [size])[0].shape[0]
        assert tokens == visual_token_count(size, PINPOINTS, 48, GRID, per_view, merge)
        if merge != "spatial_unpad":
            assert tokens == views * (per_view or GRID * GRID)
        elif per_view is not None:
            assert tokens == views * (per_view + 1)


def test_collator_stacks_equal_views_and_lists_unequal_ones(tiny_tower_dir, tiny_tokenizer_dir, anyres_data) -> None:
    from transformers import AutoTokenizer

    from llava.mm_utils import parse_grid_pinpoints
    from llava.model.multimodal_encoder.builder import build_vision_tower
    from llava.train.preprocess import conversation_template
    from llava.train.supervised_data import DataCollatorForSupervisedDataset, LazySupervisedDataset, read_records

    class Args:
        mm_vision_tower = str(tiny_tower_dir)
        mm_vision_select_layer = -2

    processor = build_vision_tower(Args()).image_processor
    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    dataset = LazySupervisedDataset(
        read_records(anyres_data.finetune), tokenizer, conversation_template("v1"), image_folder=str(anyres_data.images),
        image_processor=processor, image_aspect_ratio="anyres", image_grid_pinpoints=parse_grid_pinpoints(PINPOINTS),
    )
    items = [dataset[index] for index in range(len(dataset))]
    assert [tuple(item["image"].shape) for item in items[:4]] == [(views, 3, 48, 48) for _, views in IMAGES]
    assert [item["image_size"] for item in items[:4]] == [size for size, _ in IMAGES]
    collate = DataCollatorForSupervisedDataset(pad_token_id=0, model_max_length=256)

    same = collate([items[2], items[3]])  # 4 views each → [2, 4, 3, 48, 48]
    assert same["images"].shape == (2, 4, 3, 48, 48) and same["image_sizes"] == [IMAGES[2][0], IMAGES[3][0]]
    mixed = collate([items[0], items[4], items[1]])  # 5 views, text-only, 3 views → a list
    assert isinstance(mixed["images"], list) and [tuple(image.shape[:1]) for image in mixed["images"]] == [(5,), (5,), (3,)]
    assert not mixed["images"][1].any()  # the text-only sample's stand-in: zeros shaped (and sized) like the first image
    assert mixed["image_sizes"] == [IMAGES[0][0], IMAGES[0][0], IMAGES[1][0]]
