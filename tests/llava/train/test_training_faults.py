"""Training faults of issue 22: an unwritable or wrong ``--output_dir`` (T05), a ``--model_max_length`` that cuts the
``<image>`` marker (T08), an adaptive-count projector with an AnyRes merge that needs equal counts (T15), and a
disk that fills up while checkpoints are written."""

from __future__ import annotations

import errno

import pytest

import llava.train.train as train_module
from llava.model.multimodal_projector.builder import resolve_projector
from llava.train.train import train
from llava.utils import UserError

from .conftest import stage1_flags


def _with(argv: list[str], **flags: str) -> list[str]:
    argv = list(argv)
    for flag, value in flags.items():
        name = "--" + flag
        if name in argv:
            argv[argv.index(name) + 1] = value
        else:
            argv += [name, value]
    return argv


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if the run gets as far as loading the model."""
    monkeypatch.setattr(train_module, "build_model", lambda *args, **kwargs: pytest.fail("the model was loaded"))


def test_read_only_output_dir_is_one_sentence_before_the_model_loads(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, read_only_under, no_model):
    # T05: the model loaded, then a raw "OSError: [Errno 30] Read-only file system" came from the trainer.
    read_only = read_only_under(tmp_path / "ro")
    argv = stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", read_only / "out")
    with pytest.raises(UserError, match=r"^--output_dir '.*ro/out' cannot be written \(read-only file system\)"):
        train(argv=argv)


@pytest.mark.parametrize("flag", ["--model_name_or_path", "--vision_tower"])
def test_output_dir_that_is_an_input_folder_is_refused(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, no_model, flag):
    argv = stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", tmp_path / "out")
    argv = _with(argv, output_dir=argv[argv.index(flag) + 1] + "/.")
    with pytest.raises(UserError, match=rf"--output_dir .* is the same folder as {flag} .*; writing it would destroy the input"):
        train(argv=argv)


def test_disk_full_while_saving_is_one_sentence(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, monkeypatch):
    from llava.train import saving

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(saving.torch, "save", full)
    argv = _with(stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", tmp_path / "out"), max_steps="1")
    with pytest.raises(UserError, match=r"^--output_dir '.*out' cannot be written \(no space left on the device\); free space"):
        train(argv=argv)


def test_max_length_that_cuts_the_image_marker_is_named_as_truncation(tmp_path, tiny_base_llm, tiny_tower_dir, train_data):
    # T08: "4 image(s) were given but no prompt contains an <image> marker" although every sample has one.
    argv = stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", tmp_path / "out")
    argv = _with(argv, version="v1", data_path=str(train_data.finetune), model_max_length="8", max_steps="1")
    with pytest.raises(UserError, match=r"sample \d+ \(id 'chat\d+'\): --model_max_length 8 truncates its \d+ tokens before the <image> marker at token \d+; raise --model_max_length"):
        train(argv=argv)


def _prumerge_installed() -> bool:
    try:
        resolve_projector("prumerge")
    except ValueError:
        return False
    return True


ADAPTIVE = pytest.mark.skipif(not _prumerge_installed(), reason="the baselines plugin (adaptive PruMerge) is not installed")
ANYRES = {"image_aspect_ratio": "anyres", "image_grid_pinpoints": "[[48,96],[96,48]]"}


@ADAPTIVE
@pytest.mark.parametrize("merge", ["spatial", "spatial_unpad"])
def test_adaptive_projector_with_a_spatial_anyres_merge_is_refused_at_start(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, no_model, merge):
    # T15: it trained, and the refusal came per image when an image's views happened to get different counts.
    argv = stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "prumerge", tmp_path / "out")
    argv = _with(argv, mm_patch_merge_type=merge, **ANYRES)
    with pytest.raises(UserError, match=rf"mm_projector_type 'prumerge' keeps a number of visual tokens that depends on the image, but mm_patch_merge_type '{merge}' with image_aspect_ratio 'anyres' needs the same number in every view"):
        train(argv=argv)


@ADAPTIVE
@pytest.mark.parametrize("projector, merge, aspect, refused", [
    ("prumerge", "spatial", "anyres", True),
    ("prumerge_plus", "spatial", "anyres_max_4", True),
    ("prumerge_k4", "spatial", "anyres", False),  # a fixed count per view stitches fine
    ("prumerge", "flat", "anyres", False),
    ("prumerge", "spatial_unpad", "pad", False),  # one view per image: nothing to make equal
    ("mlp2x_gelu", "spatial_unpad", "anyres", False),
])
def test_the_rule_asks_the_projectors_plugin(projector, merge, aspect, refused):
    from types import SimpleNamespace

    from llava.model.checks import check_patch_merge

    config = SimpleNamespace(mm_projector_type=projector, mm_patch_merge_type=merge, image_aspect_ratio=aspect)
    if refused:
        with pytest.raises(UserError, match="depends on the image"):
            check_patch_merge(config)
    else:
        check_patch_merge(config)
