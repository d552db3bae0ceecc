"""The output guard of ``--output_dir``: checked before any model loads, never an input or someone else's folder
(fault cases T05 and the output = input class)."""

from __future__ import annotations

import errno
import shutil

import pytest

import llava.train.train as train_module
from llava import outputs
from llava.outputs import MARKER
from llava.train.train import train
from llava.utils import UserError

from .conftest import stage1_flags


@pytest.fixture
def no_model_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the output folder was checked")

    monkeypatch.setattr(train_module, "load_language_model", refuse)


def test_output_dir_equal_to_the_base_model_is_refused(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, no_model_loading) -> None:
    base = tmp_path / "vicuna"
    shutil.copytree(tiny_base_llm, base)
    before = sorted(p.name for p in base.iterdir())
    with pytest.raises(UserError, match=r"^--output_dir '.*vicuna' is the same folder as --model_name_or_path"):
        train(argv=stage1_flags(base, tiny_tower_dir, train_data, "mlp2x_gelu", base))
    assert sorted(p.name for p in base.iterdir()) == before


def test_output_dir_holding_the_images_is_refused(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, no_model_loading) -> None:
    with pytest.raises(UserError, match=r"is a folder holding --image_folder"):
        train(argv=stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", train_data.root))
    assert not (train_data.root / MARKER).exists()


def test_someone_elses_folder_is_refused_and_left_alone(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, no_model_loading) -> None:
    folder = tmp_path / "my-results"
    folder.mkdir()
    (folder / "config.json").write_text('{"mine": true}')
    with pytest.raises(UserError, match=r"already holds files this command did not write \(config.json\)"):
        train(argv=stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", folder))
    assert (folder / "config.json").read_text() == '{"mine": true}' and not (folder / MARKER).exists()


def test_a_read_only_location_is_one_sentence_before_loading(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, monkeypatch,
                                                           no_model_loading) -> None:
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(outputs.tempfile, "mkstemp", read_only)
    with pytest.raises(UserError, match=r"^--output_dir '.*' cannot be written \(read-only file system\); choose a writable location$"):
        train(argv=stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", tmp_path / "out"))


def test_a_new_folder_is_marked_as_ours(tmp_path, tiny_base_llm, tiny_tower_dir, train_data) -> None:
    output = tmp_path / "llava-new"
    train(argv=stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", output) + ["--max_steps", "1"])
    assert (output / MARKER).is_file() and (output / "mm_projector.bin").is_file()
