"""Resuming only what belongs to this run: settings recorded per checkpoint, completeness markers, DeepSpeed.

Issue 14, items 3 (a finished run's checkpoints silently reused with new hyper-parameters), 10 (a checkpoint
half-written when the run was killed blocks resume) and 14 (DeepSpeed resumes a planted checkpoint-* on its own).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from llava.train.resume import COMPLETE_MARKER, RUN_FILE, resume_point
from llava.train.train import train
from llava.utils import UserError

from .conftest import SimulatedKill, recording, stage1_flags


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_base_llm, tiny_tower_dir, train_data) -> tuple[Path, list[str]]:
    """A finished stage-1 ``mlp2x_gelu`` run (6 steps) with ``checkpoint-6``; the argv that made it."""
    output = tmp_path_factory.mktemp("resume") / "run"
    argv = stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", output)
    argv[argv.index("--save_steps") + 1] = "3"
    train(argv=argv)
    assert sorted(p.name for p in output.glob("checkpoint-*")) == ["checkpoint-6"]
    return output, argv


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    argv = list(argv)
    argv[argv.index(flag) + 1] = value
    return argv


def test_checkpoints_record_the_run_and_are_marked_complete(finished):
    output, _ = finished
    recorded = json.loads((output / "checkpoint-6" / RUN_FILE).read_text())
    assert (output / "checkpoint-6" / COMPLETE_MARKER).is_file()
    assert recorded["learning_rate"] == 1e-3 and recorded["mm_projector_type"] == "mlp2x_gelu"
    assert recorded["tune_mm_mlp_adapter"] is True and recorded["version"] == "plain"
    assert recorded["data_path"]["size"] == Path(_arg(finished[1], "--data_path")).stat().st_size


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("flag, value, named", [
    ("--learning_rate", "5e-4", "learning_rate"),
    ("--num_train_epochs", "2", "num_train_epochs"),
    ("--mm_projector_type", "linear", "mm_projector_type"),
    ("--per_device_train_batch_size", "3", "per_device_train_batch_size"),
])
def test_rerun_with_other_settings_is_refused(finished, flag, value, named):
    output, argv = finished
    with pytest.raises(UserError, match=rf"\({named} differs\).*--overwrite_output_dir.*--output_dir"):
        train(argv=_with(argv, flag, value))


def test_rerun_after_the_data_changed_is_refused(finished, tmp_path: Path):
    output, argv = finished
    data = tmp_path / "pretrain.json"
    records = json.loads(Path(_arg(argv, "--data_path")).read_text())
    data.write_text(json.dumps(records[:10]))
    with pytest.raises(UserError, match=r"data_path.*differ"):
        train(argv=_with(argv, "--data_path", str(data)))


def test_same_settings_resume_loudly_and_train_nothing(finished, caplog):
    output, argv = finished
    before = torch.load(output / "mm_projector.bin", weights_only=True)
    with recording() as seen, caplog.at_level(logging.WARNING, logger="llava.train.resume"):
        train(argv=argv)
    assert seen.first_step == seen.final_step == 6
    assert "RESUMING from" in caplog.text and "already finished all 6 steps" in caplog.text
    after = torch.load(output / "mm_projector.bin", weights_only=True)
    assert all(torch.equal(before[key], after[key]) for key in before)


def test_overwrite_output_dir_trains_from_the_start(finished, tmp_path: Path):
    output = tmp_path / "copy"
    shutil.copytree(finished[0], output)
    argv = _with(_with(finished[1], "--output_dir", str(output)), "--learning_rate", "5e-4")
    with recording() as seen:
        train(argv=argv + ["--overwrite_output_dir", "True"])
    assert seen.first_step == 0 and seen.final_step == 6
    assert json.loads((output / "checkpoint-6" / RUN_FILE).read_text())["learning_rate"] == 5e-4


def test_killed_while_saving_resumes_from_the_newest_complete_checkpoint(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, caplog):
    output = tmp_path / "run"
    argv = stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", output)
    argv[argv.index("--save_steps") + 1] = "2"
    with recording(kill_at_step=5), pytest.raises(SimulatedKill):
        train(argv=argv)
    assert sorted(p.name for p in output.glob("checkpoint-*")) == ["checkpoint-4"]
    # What a kill halfway through writing checkpoint-6 leaves: a truncated weights file and no marker.
    half = output / "checkpoint-6"
    shutil.copytree(output / "checkpoint-4", half)
    (half / COMPLETE_MARKER).unlink()
    (half / "mm_projector.bin").write_bytes((half / "mm_projector.bin").read_bytes()[:100])
    with recording() as seen, caplog.at_level(logging.WARNING, logger="llava.train.resume"):
        train(argv=argv)
    assert seen.first_step == 4 and seen.final_step == 6
    assert "skipping incomplete checkpoints" in caplog.text and "checkpoint-6" in caplog.text
    # T02: the last word used to be "had already finished all 6 steps: nothing was trained" after training 2 steps.
    assert "nothing was trained" not in caplog.text
    assert "checkpoint-4 at step 4 and trained steps 5-6 (2 steps) of 6" in caplog.text


class _Hostile:
    """Creates ``marker`` when unpickled without ``weights_only`` (what a planted checkpoint file would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import builtins

        return builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",)


@pytest.mark.parametrize("planted", ["rng_state.pth", "optimizer.pt"])
def test_hostile_trainer_file_is_refused_before_the_model_loads(finished, tmp_path: Path, monkeypatch, planted):
    # T16: no code ran, but the traceback ended with torch's advice to re-run with weights_only=False.
    import llava.train.train as train_module

    output = tmp_path / "copy"
    shutil.copytree(finished[0], output)
    marker = tmp_path / "code-ran"
    torch.save({"state": _Hostile(marker)}, output / "checkpoint-6" / planted)
    monkeypatch.setattr(train_module, "build_model", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    with pytest.raises(UserError, match=rf"checkpoint-6/{planted}' holds pickled Python objects that are not tensors") as error:
        train(argv=_with(finished[1], "--output_dir", str(output)))
    assert "weights_only" not in str(error.value) and not marker.exists()


def test_the_trainer_files_of_a_real_checkpoint_pass_the_check(finished):
    from llava.train.resume import check_trainer_files

    folder = finished[0] / "checkpoint-6"
    assert {"rng_state.pth", "optimizer.pt", "scheduler.pt"} <= {path.name for path in folder.iterdir()}
    check_trainer_files(folder)  # numpy's RNG state inside rng_state.pth is accepted, as the trainer accepts it


# ---------------------------------------------------------------------------------------------- the decision alone


def _checkpoint(root: Path, step: int, settings: dict, complete: bool = True) -> Path:
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / RUN_FILE).write_text(json.dumps(settings))
    if complete:
        (folder / COMPLETE_MARKER).write_text("")
    return folder


SETTINGS = {"learning_rate": 0.001, "data_path": {"path": "/d.json", "size": 3, "mtime_ns": 5}}


def test_only_incomplete_checkpoints_name_what_to_delete(tmp_path: Path):
    _checkpoint(tmp_path, 2, SETTINGS, complete=False)
    with pytest.raises(UserError, match=r"only incomplete checkpoints \(checkpoint-2.*delete them"):
        resume_point(str(tmp_path), None, SETTINGS)


def test_an_explicit_incomplete_checkpoint_is_refused(tmp_path: Path):
    folder = _checkpoint(tmp_path, 2, SETTINGS, complete=False)
    with pytest.raises(UserError, match=r"is incomplete"):
        resume_point(str(tmp_path), str(folder), SETTINGS)


def test_a_checkpoint_without_a_record_is_refused(tmp_path: Path):
    folder = _checkpoint(tmp_path, 2, SETTINGS)
    (folder / RUN_FILE).unlink()
    with pytest.raises(UserError, match=r"no readable record.*--overwrite_output_dir"):
        resume_point(str(tmp_path), None, SETTINGS)


def test_deepspeed_never_resumes_on_its_own(tmp_path: Path):
    _checkpoint(tmp_path, 2, SETTINGS)
    with pytest.raises(UserError, match=r"DeepSpeed.*--resume_from_checkpoint True.*--overwrite_output_dir"):
        resume_point(str(tmp_path), None, SETTINGS, deepspeed=True)
    newest = _checkpoint(tmp_path, 4, SETTINGS)
    _checkpoint(tmp_path, 6, SETTINGS, complete=False)
    assert resume_point(str(tmp_path), "True", SETTINGS, deepspeed=True) == str(newest)
    assert resume_point(str(tmp_path), None, SETTINGS, deepspeed=True, overwrite=True) is None


def test_no_checkpoint_is_a_fresh_start(tmp_path: Path):
    assert resume_point(str(tmp_path / "absent"), None, SETTINGS) is None
    (tmp_path / "checkpoint-x").mkdir()
    assert resume_point(str(tmp_path), None, SETTINGS) is None


@pytest.mark.parametrize("flag", ["--model_name_or_path", "--vision_tower"])
def test_a_missing_model_folder_is_named_before_anything_loads(tmp_path, tiny_base_llm, tiny_tower_dir, train_data, flag):
    argv = stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", tmp_path / "out")
    missing = str(tmp_path / "models" / "nowhere")
    argv[argv.index(flag) + 1] = missing
    with pytest.raises(UserError, match=rf"{flag} '{missing}' does not exist"):
        train(argv=argv)


def test_a_finished_run_without_checkpoints_is_not_taken_over_by_another_run(tmp_path, tiny_base_llm, tiny_tower_dir,
                                                                            train_data, monkeypatch):
    # Issue 31, T01: a run that kept no checkpoint-* (--save_strategy no) left only the .llava-output marker, so a
    # second run with another projector took the folder as its own and rewrote the first run's model.
    output = tmp_path / "run"
    argv = _with(stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "mlp2x_gelu", output), "--save_strategy", "no")
    train(argv=argv + ["--max_steps", "2"])
    assert not list(output.glob("checkpoint-*")) and json.loads((output / RUN_FILE).read_text())["mm_projector_type"] == "mlp2x_gelu"
    before = {path.name: path.read_bytes() for path in output.iterdir() if path.is_file()}
    other = _with(argv, "--mm_projector_type", "linear") + ["--max_steps", "2"]
    monkeypatch.setattr("llava.train.train.build_model", lambda *args, **kwargs: pytest.fail("the model loaded"))
    with pytest.raises(UserError, match=rf"^{output} holds a run that was trained with other settings \(mm_projector_type "
                                        r"differs\); pass --overwrite_output_dir to start afresh, or use a new --output_dir$"):
        train(argv=other)
    assert {path.name: path.read_bytes() for path in output.iterdir() if path.is_file()} == before
    monkeypatch.undo()
    train(argv=other + ["--overwrite_output_dir", "True"])  # explicit: the folder becomes the new run's
    assert json.loads((output / "config.json").read_text())["mm_projector_type"] == "linear"
    assert json.loads((output / RUN_FILE).read_text())["mm_projector_type"] == "linear"
    train(argv=other)  # the same settings again: its own folder
