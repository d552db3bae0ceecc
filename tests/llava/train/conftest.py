"""Tiny training data and two-stage runs shared by the training tests.

The runs go through ``llava.train.train`` with upstream's command-line flags (``scripts/v1_5/pretrain.sh`` and
``finetune.sh`` minus ``deepspeed``), on the session's tiny tower / LLaMA / tokenizer (tests/conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from transformers import TrainerCallback

from llava.train.train_callbacks import register_callback_provider, unregister_callback_provider

#: (size, colour) of the training images; different sizes so that padding to square matters.
IMAGE_SPECS = [((40, 30), (200, 40, 30)), ((32, 32), (30, 180, 60)), ((24, 48), (20, 40, 220)), ((50, 20), (120, 120, 0))]
PRETRAIN_SAMPLES = 12
FINETUNE_IMAGE_SAMPLES = 10
FINETUNE_TEXT_SAMPLES = 2


@dataclass(frozen=True)
class TrainData:
    root: Path
    images: Path
    pretrain: Path
    finetune: Path


def make_image(index: int) -> Image.Image:
    size, colour = IMAGE_SPECS[index % len(IMAGE_SPECS)]
    image = Image.new("RGB", size, colour)
    image.paste((250, 250, 250), (2, 2, 2 + size[0] // 3, 2 + size[1] // 3))
    return image


def write_json(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(records, indent=1))
    return path


def caption_record(index: int) -> dict[str, Any]:
    return {"id": f"cap{index}", "image": f"img{index}.png", "conversations": [
        {"from": "human", "value": "<image>\nDescribe the image."},
        {"from": "gpt", "value": f"A square next to a circle, number {index}."},
    ]}


def chat_record(index: int) -> dict[str, Any]:
    return {"id": f"chat{index}", "image": f"img{index}.png", "conversations": [
        {"from": "human", "value": "What is shown in the image?\n<image>"},
        {"from": "gpt", "value": "A red square on a white background."},
        {"from": "human", "value": "How many circles are there?"},
        {"from": "gpt", "value": f"There are {index % 4} circles."},
    ]}


def text_record(index: int) -> dict[str, Any]:
    return {"id": f"text{index}", "conversations": [
        {"from": "human", "value": "Answer the question using a single word or phrase. Yes or no?"},
        {"from": "gpt", "value": "Yes"},
    ]}


@pytest.fixture(scope="session")
def train_data(tmp_path_factory: pytest.TempPathFactory) -> TrainData:
    root = tmp_path_factory.mktemp("train_data")
    images = root / "images"
    images.mkdir()
    for index in range(PRETRAIN_SAMPLES):
        make_image(index).save(images / f"img{index}.png")
    pretrain = write_json(root / "pretrain.json", [caption_record(i) for i in range(PRETRAIN_SAMPLES)])
    finetune = write_json(
        root / "finetune.json",
        [chat_record(i) for i in range(FINETUNE_IMAGE_SAMPLES)] + [text_record(i) for i in range(FINETUNE_TEXT_SAMPLES)],
    )
    return TrainData(root, images, pretrain, finetune)


def common_flags(base: Path, tower: Path, data: TrainData, projector: str) -> list[str]:
    """The flags upstream's v1.5 scripts pass, with tiny sizes (no deepspeed, bf16, tf32 or wandb on a CPU)."""
    return [
        "--model_name_or_path", str(base), "--vision_tower", str(tower), "--mm_projector_type", projector,
        "--mm_vision_select_layer", "-2", "--mm_use_im_start_end", "False", "--mm_use_im_patch_token", "False",
        "--image_folder", str(data.images), "--num_train_epochs", "1", "--per_device_eval_batch_size", "4",
        "--gradient_accumulation_steps", "1", "--evaluation_strategy", "no", "--save_strategy", "steps",
        "--save_steps", "24000", "--save_total_limit", "1", "--weight_decay", "0.", "--warmup_ratio", "0.03",
        "--lr_scheduler_type", "cosine", "--logging_steps", "1", "--model_max_length", "256",
        "--dataloader_num_workers", "0", "--lazy_preprocess", "True", "--report_to", "none", "--use_cpu", "True",
    ]


def stage1_flags(base: Path, tower: Path, data: TrainData, projector: str, output: Path, batch: int = 2) -> list[str]:
    return common_flags(base, tower, data, projector) + [
        "--version", "plain", "--data_path", str(data.pretrain), "--tune_mm_mlp_adapter", "True",
        "--per_device_train_batch_size", str(batch), "--learning_rate", "1e-3", "--output_dir", str(output),
    ]


def stage2_flags(base: Path, tower: Path, data: TrainData, projector: str, output: Path, adapter: Path) -> list[str]:
    return common_flags(base, tower, data, projector) + [
        "--version", "v1", "--data_path", str(data.finetune), "--pretrain_mm_mlp_adapter", str(adapter),
        "--image_aspect_ratio", "pad", "--group_by_modality_length", "True", "--per_device_train_batch_size", "4",
        "--learning_rate", "1e-3", "--output_dir", str(output),
    ]


# ---------------------------------------------------------------------------------------------- observing runs


@dataclass
class Observation:
    """What a :class:`Recorder` saw during one run."""

    temperatures: list[tuple[int, float]] = field(default_factory=list)  # (global step, τ) at each coder forward
    first_step: int | None = None
    max_steps: int | None = None
    final_step: int | None = None
    projector_at_start: dict[str, torch.Tensor] = field(default_factory=dict)


class SimulatedKill(RuntimeError):
    """Raised by a :class:`Recorder` to stop a run the way a crash would (no final save)."""


class Recorder(TrainerCallback):
    """Records the sparsemax temperature every coder sees in its forward pass, and the step bookkeeping."""

    def __init__(self, observation: Observation, kill_at_step: int | None = None) -> None:
        self.observation = observation
        self.kill_at_step = kill_at_step
        self.hooks: list[Any] = []
        self.state: Any = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.state = state
        self.observation.first_step = state.global_step
        self.observation.max_steps = state.max_steps
        projector = model.get_model().mm_projector
        self.observation.projector_at_start = {k: v.detach().clone() for k, v in projector.state_dict().items()}
        for module in model.modules():
            if hasattr(module, "temperature_cur"):
                self.hooks.append(module.register_forward_pre_hook(self._record))

    def _record(self, module, inputs):
        self.observation.temperatures.append((self.state.global_step, float(module.temperature_cur)))

    def on_step_end(self, args, state, control, **kwargs):
        if self.kill_at_step is not None and state.global_step == self.kill_at_step:
            self._remove()
            raise SimulatedKill(f"simulated kill after optimizer step {state.global_step}")

    def on_train_end(self, args, state, control, **kwargs):
        self.observation.final_step = state.global_step
        self._remove()

    def _remove(self) -> None:
        for hook in self.hooks:
            hook.remove()
        self.hooks.clear()


@contextmanager
def recording(kill_at_step: int | None = None) -> Iterator[Observation]:
    """Register a :class:`Recorder` for the runs inside the block (through the callback-provider registry)."""
    observation = Observation()

    def provider(model):
        return Recorder(observation, kill_at_step)

    register_callback_provider(provider)
    try:
        yield observation
    finally:
        unregister_callback_provider(provider)


# ---------------------------------------------------------------------------------------------- shared runs


@dataclass
class Run:
    output: Path
    trainer: Any
    observation: Observation
    argv: list[str]


@pytest.fixture(scope="session")
def stage1_braco(tmp_path_factory, tiny_base_llm, tiny_tower_dir, train_data) -> Run:
    """Stage 1 with ``braco_c2s5`` (12 captions, batch 2: 6 optimizer steps), observed."""
    from llava.train.train import train

    output = tmp_path_factory.mktemp("runs") / "llava-tiny-braco-pretrain"
    argv = stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "braco_c2s5", output)
    with recording() as observation:
        trainer = train(argv=argv)
    return Run(output, trainer, observation, argv)


@pytest.fixture(scope="session")
def stage2_braco(tmp_path_factory, tiny_base_llm, tiny_tower_dir, train_data, stage1_braco) -> Run:
    """Stage 2 from the stage-1 projector, launched like upstream (``train_mem.py``), observed."""
    from llava.train import train_mem

    output = tmp_path_factory.mktemp("runs") / "llava-tiny-braco"
    argv = stage2_flags(tiny_base_llm, tiny_tower_dir, train_data, "braco_c2s5", output, stage1_braco.output / "mm_projector.bin")
    with recording() as observation:
        trainer = train_mem.main(argv)
    return Run(output, trainer, observation, argv)
