"""A compressor plugin declared in a test goes the whole way: training flags (in ``--help``, checked), run
defaults and callbacks, ``config.json``, ``load_pretrained_model`` with no flags, the prompt it asked for; and
its keys are checked on load (unknown key → the close match; string booleans; ranges)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import HfArgumentParser, TrainerCallback

from llava.constants import IGNORE_INDEX, IMAGE_TOKEN_INDEX
from llava.model.builder import load_pretrained_model
from llava.model.multimodal_projector.builder import list_projectors
from llava.model.multimodal_projector.plugins import (
    BuildContext,
    BuiltProjector,
    CompressorPlugin,
    ModelNeeds,
    ProjectorType,
    RunInfo,
    Setting,
    apply_runtime_settings,
    register_plugin,
    unregister_plugin,
)
from llava.train.arguments import model_arguments_class, parse_arguments

from .conftest import common_flags

PATTERN = r"tinypool_k(\d+)"


class TinyPool(nn.Module):
    """Average-pools the patch tokens to K, projects, scales by a learned gain; optionally adds the mean of the
    prompt's embedded tokens (so that its output depends on the question)."""

    def __init__(self, dim: int, hidden: int, tokens: int, gain_init: float, use_prompt: bool) -> None:
        super().__init__()
        self.tokens, self.use_prompt = tokens, use_prompt
        self.gain = nn.Parameter(torch.full((1,), float(gain_init)))
        self.proj = nn.Linear(dim, hidden)
        self.seen_prompt_ids: list[list[int]] = []

    def apply_settings(self, values: dict) -> None:
        self.tokens = values.get("mm_tinypool_tokens", self.tokens)

    def forward(self, features: torch.Tensor, inputs=None) -> torch.Tensor:
        side = int(features.shape[1] ** 0.5)
        patches = features[:, 1:] if features.shape[1] == side * side + 1 else features
        pooled = F.adaptive_avg_pool1d(patches.transpose(1, 2), self.tokens).transpose(1, 2)
        out = self.proj(pooled) * self.gain
        if self.use_prompt:
            assert inputs is not None, "a prompt-needing projector is called with CompressorInputs"
            if inputs.prompt is not None:
                self.seen_prompt_ids = [ids.tolist() for ids in inputs.prompt_ids]
                out = out + torch.stack([p.mean(dim=0) for p in inputs.prompt]).unsqueeze(1).to(out)
        return out


class CountingCallback(TrainerCallback):
    starts = 0

    def on_train_begin(self, args, state, control, **kwargs):
        CountingCallback.starts += 1


def _factory(context: BuildContext) -> BuiltProjector:
    gain = context.setting("mm_tinypool_gain_init", 1.0)  # the resolved value is returned to be saved, as plugins do
    use_prompt = bool(context.setting("mm_tinypool_use_prompt", False))
    module = TinyPool(context.mm_hidden, context.hidden, int(context.match.group(1)), gain, use_prompt)
    needs = ModelNeeds(text="prompt" if use_prompt else None, square_grid=True)
    return BuiltProjector(module, {"mm_tinypool_gain_init": gain}, needs)


TINY_PLUGIN = CompressorPlugin(
    name="tinypool",
    projectors=(ProjectorType(PATTERN, _factory, "test compressor: average pooling to K tokens", examples=("tinypool_k4",)),),
    settings=(
        Setting("mm_tinypool_gain_init", float, "initial output gain", default=1.0, minimum=0.0),
        Setting("mm_tinypool_use_prompt", bool, "add the prompt's mean embedding", default=False),
        Setting("mm_tinypool_tokens", int, "tokens per image at inference (<= the name's K)", minimum=1, runtime=True),
    ),
    key_prefixes=("mm_tinypool_",),
    run_defaults=lambda run: {"mm_tinypool_gain_init": 0.5 if run.stage == "pretrain" else 0.25},
    callbacks=lambda model: [CountingCallback()],
    needs=ModelNeeds(square_grid=True),
)


@pytest.fixture(scope="module")
def tiny_plugin():
    list_projectors()  # entry points first, so the test plugin is registered after them
    register_plugin(TINY_PLUGIN)
    yield TINY_PLUGIN
    unregister_plugin(TINY_PLUGIN.name)


@pytest.fixture(scope="module")
def trained(tiny_plugin, tmp_path_factory, tiny_base_llm, tiny_tower_dir, train_data) -> Path:
    """Stage 2 straight from the base LLM (no adapter), 2 optimizer steps, with the plugin's flags."""
    from llava.train.train import train

    output = tmp_path_factory.mktemp("runs") / "llava-tiny-tinypool"
    argv = common_flags(tiny_base_llm, tiny_tower_dir, train_data, "tinypool_k4") + [
        "--version", "v1", "--data_path", str(train_data.finetune), "--image_aspect_ratio", "pad",
        "--per_device_train_batch_size", "2", "--max_steps", "2", "--learning_rate", "1e-2", "--output_dir", str(output),
        "--mm_tinypool_use_prompt", "yes",
    ]
    CountingCallback.starts = 0
    train(argv=argv)
    return output


def test_settings_are_training_flags_in_help(tiny_plugin):
    text = HfArgumentParser(model_arguments_class()).format_help()
    assert "--mm_tinypool_gain_init" in text and "[tinypool] initial output gain; default: 1.0" in text
    args, _, _ = parse_arguments(["--data_path", "d.json", "--output_dir", "o", "--mm_projector_type", "tinypool_k4",
                                  "--mm_tinypool_use_prompt", "no", "--mm_tinypool_gain_init", "2"])
    assert args.mm_tinypool_use_prompt is False and args.mm_tinypool_gain_init == 2.0
    with pytest.raises(ValueError, match="mm_tinypool_gain_init must be between 0 and inf, got -1.0"):
        parse_arguments(["--data_path", "d.json", "--output_dir", "o", "--mm_projector_type", "tinypool_k4",
                         "--mm_tinypool_gain_init", "-1"])


def test_training_writes_the_settings_and_runs_the_callbacks(trained: Path):
    config = json.loads((trained / "config.json").read_text())
    assert config["mm_projector_type"] == "tinypool_k4"
    assert config["mm_tinypool_use_prompt"] is True  # the flag, as given ("yes")
    assert config["mm_tinypool_gain_init"] == 0.25  # the plugin's stage-2 run default
    assert CountingCallback.starts == 1


def test_checkpoint_loads_with_no_flags_and_gets_the_prompt(trained: Path):
    tokenizer, model, processor, _ = load_pretrained_model(str(trained), None, trained.name, device="cpu")
    projector = model.get_model().mm_projector
    assert isinstance(projector, TinyPool) and projector.use_prompt and projector.tokens == 4
    assert not torch.equal(projector.gain.detach(), torch.tensor([0.25]))  # trained weights, not a fresh init

    text = tokenizer("Describe the colours", add_special_tokens=False).input_ids
    answer = tokenizer(" red", add_special_tokens=False).input_ids
    ids = torch.tensor([[1, *text[:2], IMAGE_TOKEN_INDEX, *text[2:], *answer]])
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, -len(answer):] = ids[0, -len(answer):]  # the answer is a training target: not part of the prompt
    image = torch.zeros(1, 3, 48, 48)
    model.prepare_inputs_labels_for_multimodal(ids, None, torch.ones_like(ids), None, labels, image)
    assert projector.seen_prompt_ids == [[1, *text]]

    def visual_tokens(question: str) -> torch.Tensor:
        words = tokenizer(question, add_special_tokens=False).input_ids
        prompt = torch.tensor([[1, IMAGE_TOKEN_INDEX, *words]])
        embeds = model.prepare_inputs_labels_for_multimodal(prompt, None, None, None, None, image)[4]
        return embeds[0, 1:5]

    with torch.no_grad():
        assert not torch.allclose(visual_tokens("What colour is it?"), visual_tokens("How many circles?"))


def _copy_with(trained: Path, tmp_path: Path, **changes) -> Path:
    target = tmp_path / "llava-tiny-tinypool-edited"
    shutil.copytree(trained, target)
    config = json.loads((target / "config.json").read_text())
    config.update(changes)
    (target / "config.json").write_text(json.dumps(config))
    return target


def test_unknown_plugin_key_names_the_close_match(trained: Path, tmp_path: Path):
    edited = _copy_with(trained, tmp_path, mm_tinypool_gian_init=0.3)
    with pytest.raises(ValueError, match="'mm_tinypool_gian_init' is not a setting of the 'tinypool' compressor; did you mean 'mm_tinypool_gain_init'"):
        load_pretrained_model(str(edited), None, edited.name, device="cpu")


@pytest.mark.parametrize("stored, expected", [("no", False), ("false", False), ("True", True), (0, False)])
def test_string_booleans_in_config_read_as_booleans(trained: Path, tmp_path: Path, stored, expected):
    edited = _copy_with(trained, tmp_path, mm_tinypool_use_prompt=stored)
    _, model, _, _ = load_pretrained_model(str(edited), None, edited.name, device="cpu")
    assert model.config.mm_tinypool_use_prompt is expected and model.get_model().mm_projector.use_prompt is expected


@pytest.mark.parametrize("changes, message", [
    ({"mm_tinypool_gain_init": -2}, "mm_tinypool_gain_init must be between 0 and inf"),
    ({"mm_tinypool_use_prompt": "maybe"}, "mm_tinypool_use_prompt must be a boolean"),
    ({"mm_fourier_C": 3}, "config key 'mm_fourier_C' belongs to the 'braco' compressor"),
])
def test_bad_plugin_values_in_config_are_refused(trained: Path, tmp_path: Path, changes, message):
    edited = _copy_with(trained, tmp_path, **changes)
    with pytest.raises(ValueError, match=message):
        load_pretrained_model(str(edited), None, edited.name, device="cpu")


def test_run_info_reaches_run_defaults(tiny_plugin):
    assert tiny_plugin.run_defaults(RunInfo("pretrain", 10, "tinypool_k4")) == {"mm_tinypool_gain_init": 0.5}


def test_runtime_settings_change_a_loaded_model(trained: Path):
    _, model, _, _ = load_pretrained_model(str(trained), None, trained.name, device="cpu")
    image = torch.zeros(1, 3, 48, 48)
    with torch.no_grad():
        assert model.encode_images(image).shape[1] == 4
        apply_runtime_settings(model, {"mm_tinypool_tokens": "2"})
        assert model.encode_images(image).shape[1] == 2 and model.config.mm_tinypool_tokens == 2
    with pytest.raises(ValueError, match="'mm_tinypool_gain_init' is not a runtime setting of the 'tinypool' compressor"):
        apply_runtime_settings(model, {"mm_tinypool_gain_init": 1.0})
    with pytest.raises(ValueError, match="mm_tinypool_tokens must be between 1 and inf, got 0"):
        apply_runtime_settings(model, {"mm_tinypool_tokens": 0})
