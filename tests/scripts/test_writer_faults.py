"""Fault cases of the scripts that write checkpoints or weights (issue 22: X02-X04, M03, A01, S03, S07).

Every case is run the way a user runs it (the script's ``main`` through ``cli_main``: one sentence, exit 2) and
checks that nothing the user made changed.
"""

from __future__ import annotations

import builtins
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from llava.outputs import MARKER
from llava.utils import cli_main

from .test_upstream_scripts import PROBLEMS, _script


class _Hostile:
    """A pickle that creates ``marker`` when unpickled with ``weights_only=False`` (the attack X03 stands for)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",)


def _bin_checkpoint(source: Path, target: Path) -> Path:
    """``source`` re-saved with a ``pytorch_model.bin`` shard (upstream's released layout) instead of safetensors."""
    shutil.copytree(source, target)
    weights = load_file(str(target / "model.safetensors"))
    (target / "model.safetensors").unlink()
    torch.save(weights, target / "pytorch_model.bin")
    return target


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _run(main, argv: list[str], capsys) -> tuple[int, str]:
    code = cli_main(main, argv)
    return code, capsys.readouterr().err.strip()


# ---------------------------------------------------------------------------------------------- extract_mm_projector


def test_output_that_is_the_checkpoints_own_weights_is_refused(tiny_llava_checkpoint, tmp_path, capsys):
    # X04: the 553 KB model was replaced by a 27 KB pickle of the projector, and the checkpoint no longer loaded.
    checkpoint = Path(shutil.copytree(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "ckpt"))
    before = (checkpoint / "model.safetensors").read_bytes()
    for spelling in (checkpoint / "model.safetensors", tmp_path / "ckpt" / ".." / "ckpt" / "model.safetensors"):
        code, message = _run(_script("extract_mm_projector").main, ["--model-path", str(checkpoint), "--output", str(spelling)], capsys)
        assert code == 2 and "is the same file as --model-path's weights file model.safetensors" in message
        assert message.count("\n") == 0
    code, message = _run(_script("extract_mm_projector").main, ["--model-path", str(checkpoint), "--output", str(checkpoint / "config.json")], capsys)
    assert code == 2 and "--model-path's config.json" in message
    assert (checkpoint / "model.safetensors").read_bytes() == before


def test_truncated_bin_shard_is_one_sentence(tiny_llava_checkpoint, tmp_path, capsys):
    # X02: a raw "OSError: [Errno 22] Invalid argument" from torch.load before.
    checkpoint = _bin_checkpoint(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-binshard-corrupt")
    shard = checkpoint / "pytorch_model.bin"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    code, message = _run(_script("extract_mm_projector").main, ["--model-path", str(checkpoint), "--output", str(tmp_path / "mm.bin")], capsys)
    assert code == 2 and "pytorch_model.bin' is not a readable weights file" in message and "weights_only" not in message
    assert not (tmp_path / "mm.bin").exists()


def test_truncated_safetensors_shard_is_one_sentence(tiny_llava_checkpoint, tmp_path, capsys):
    checkpoint = Path(shutil.copytree(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-st-corrupt"))
    shard = checkpoint / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:50])
    code, message = _run(_script("extract_mm_projector").main, ["--model-path", str(checkpoint), "--output", str(tmp_path / "mm.bin")], capsys)
    assert code == 2 and "model.safetensors' is not a readable weights file" in message


def test_hostile_pickle_shard_is_refused_without_weights_only_advice(tiny_llava_checkpoint, tmp_path, capsys):
    # X03: no code ran before either, but the traceback advised re-running with weights_only=False.
    checkpoint = _bin_checkpoint(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-binshard-evil")
    marker = tmp_path / "code-ran"
    weights = torch.load(checkpoint / "pytorch_model.bin", weights_only=True)
    torch.save({**weights, "payload": _Hostile(marker)}, checkpoint / "pytorch_model.bin")
    code, message = _run(_script("extract_mm_projector").main, ["--model-path", str(checkpoint), "--output", str(tmp_path / "mm.bin")], capsys)
    assert code == 2 and "holds pickled Python objects that are not tensors (exec), so it was not loaded" in message
    assert "weights_only" not in message and not marker.exists()


def test_projector_from_a_bin_shard_is_written_with_the_umask(tiny_llava_checkpoint, tmp_path, umask_022):
    # A01 for this writer: atomic writes used to leave every output at 0600 whatever the umask.
    checkpoint = _bin_checkpoint(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-bin")
    output = tmp_path / "out" / "mm_projector.bin"
    saved = _script("extract_mm_projector").main(["--model-path", str(checkpoint), "--output", str(output)])
    assert stat.S_IMODE(output.stat().st_mode) == 0o644
    everything = torch.load(checkpoint / "pytorch_model.bin", weights_only=True)
    assert sorted(saved) == sorted(key for key in everything if "mm_projector" in key)
    assert all(torch.equal(torch.load(output, weights_only=True)[key], everything[key]) for key in saved)


# ---------------------------------------------------------------------------------------------- merge_lora_weights


def test_merge_into_a_foreign_checkpoint_folder_is_refused(tiny_llava_checkpoint, tiny_tokenizer_dir, tmp_path, capsys):
    # M03: the other checkpoint's config, weights and tokenizer were overwritten, leaving a broken hybrid.
    keep = Path(shutil.copytree(tiny_tokenizer_dir, tmp_path / "llava-qwen-keep"))
    (keep / "config.json").write_text('{"model_type": "qwen2"}')
    before = {path.name: path.read_bytes() for path in keep.iterdir()}
    checkpoint = tiny_llava_checkpoint("mlp2x_gelu")
    code, message = _run(_script("merge_lora_weights").main, ["--model-path", str(checkpoint), "--save-model-path", str(keep)], capsys)
    assert code == 2 and "--save-model-path" in message and "already holds files this command did not write" in message
    assert {path.name: path.read_bytes() for path in keep.iterdir()} == before


def test_merged_checkpoint_is_written_whole_and_can_be_replaced(tiny_llava_checkpoint, tmp_path, umask_022):
    checkpoint = tiny_llava_checkpoint("mlp2x_gelu")
    target = tmp_path / "merged"
    merge = _script("merge_lora_weights")
    merge.main(["--model-path", str(checkpoint), "--save-model-path", str(target)])
    assert (target / MARKER).is_file() and (target / "model.safetensors").is_file()
    assert stat.S_IMODE((target / "config.json").stat().st_mode) == 0o644 and stat.S_IMODE(target.stat().st_mode) == 0o755
    merge.main(["--model-path", str(checkpoint), "--save-model-path", str(target)])  # our own folder: replaced
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".merged")]  # no staging left behind


# ---------------------------------------------------------------------------------------------- convert_sqa_to_llava


def test_split_naming_a_missing_problem_is_one_sentence(tmp_path, capsys):
    # S03: a raw KeyError: '3' before.
    (tmp_path / "problems.json").write_text(json.dumps(PROBLEMS))
    (tmp_path / "pid_splits.json").write_text(json.dumps({"train": ["7", "3", "9"]}))
    code, message = _run(_script("convert_sqa_to_llava").main, ["convert_to_llava", "--base-dir", str(tmp_path), "--split", "train"], capsys)
    assert code == 2 and "pid_splits.json lists problem '3' in split 'train', but problems.json has no such problem" in message
    assert not list(tmp_path.glob("llava_*"))


def test_read_only_base_dir_is_one_sentence_before_converting(tmp_path, capsys, monkeypatch):
    # S07: a raw "OSError: [Errno 30] Read-only file system" from the temporary file before.
    import errno
    import tempfile

    (tmp_path / "problems.json").write_text(json.dumps(PROBLEMS))
    (tmp_path / "pid_splits.json").write_text(json.dumps({"train": ["7", "9"]}))

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    module = _script("convert_sqa_to_llava")
    converted = []
    monkeypatch.setattr(module, "build_prompt_chatbot", lambda *args: converted.append(args) or {})
    monkeypatch.setattr(tempfile, "mkstemp", read_only)  # what a read-only mount does to every new file
    code, message = _run(module.main, ["convert_to_llava", "--base-dir", str(tmp_path), "--split", "train"], capsys)
    assert code == 2 and "read-only file system" in message and "llava_train_QCM-LEPA.json" in message
    assert not converted  # refused up front, before the conversion


def test_sqa_outputs_get_the_umask(tmp_path, umask_022):
    (tmp_path / "problems.json").write_text(json.dumps(PROBLEMS))
    (tmp_path / "pid_splits.json").write_text(json.dumps({"train": ["7", "9"]}))
    path = _script("convert_sqa_to_llava").main(["convert_to_jsonl", "--base-dir", str(tmp_path), "--split", "train"])
    assert stat.S_IMODE(Path(path).stat().st_mode) == 0o644 and len(Path(path).read_text().splitlines()) == 2



# ---------------------------------------------------------------------------------------------- LoRA folders (2026-11-26)


@pytest.fixture(scope="module")
def lora_folder(tmp_path_factory, tiny_projector_checkpoint, tiny_base_llm) -> Path:
    """A LoRA stage-2 folder as upstream's trainer writes it: the stage-1 config, a PEFT adapter
    (``adapter_config.json`` + ``adapter_model.safetensors``) and ``non_lora_trainables.bin`` holding the projector
    under PEFT's names."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("lora") / "llava-lora"
    shutil.copytree(tiny_projector_checkpoint(), folder)
    projector = torch.load(folder / "mm_projector.bin", weights_only=True)
    (folder / "mm_projector.bin").unlink()
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_base_llm),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    model.save_pretrained(folder)
    torch.save({f"base_model.model.{key}": value for key, value in projector.items()}, folder / "non_lora_trainables.bin")
    return folder


def test_x03_the_projector_of_a_lora_folder_is_extracted_from_non_lora_trainables(lora_folder, tmp_path, capsys):
    # Before: "has no mm_projector weights (is it a LLaVA checkpoint?)": only the adapter's safetensors were read.
    from llava.model.weights_io import load_weights_file, projector_state_dict

    code, err = _run(_script("extract_mm_projector").main, ["--model-path", str(lora_folder), "--output", str(tmp_path / "p.bin")], capsys)
    assert code == 0, err
    extracted = torch.load(tmp_path / "p.bin", weights_only=True)
    stored = load_weights_file(lora_folder / "non_lora_trainables.bin")
    assert sorted(extracted) == sorted(key.removeprefix("base_model.model.") for key in stored)  # model.mm_projector.*
    assert all(torch.equal(extracted[key.removeprefix("base_model.model.")], value) for key, value in stored.items())
    assert projector_state_dict(extracted).keys() == {"0.weight", "0.bias", "2.weight", "2.bias"}
    without = tmp_path / "no-trainables"
    shutil.copytree(lora_folder, without)
    (without / "non_lora_trainables.bin").unlink()
    code, err = _run(_script("extract_mm_projector").main, ["--model-path", str(without), "--output", str(tmp_path / "q.bin")], capsys)
    assert code == 2 and "is a LoRA checkpoint without non_lora_trainables.safetensors or non_lora_trainables.bin" in err
    assert "merge it first with scripts/merge_lora_weights.py" in err and not (tmp_path / "q.bin").exists()


def test_old_m07_a_hostile_adapter_bin_is_refused_by_the_weights_reader(lora_folder, tiny_base_llm, tmp_path, capsys):
    # Before: PEFT's own torch.load refused it with torch's traceback (and its advice to retry with weights_only=False).
    from safetensors.torch import load_file as load_safetensors

    lora = tmp_path / "lora"
    shutil.copytree(lora_folder, lora)
    (lora / "adapter_model.safetensors").unlink()
    marker = tmp_path / "PWNED"
    torch.save({"weights": _Hostile(marker), **load_safetensors(lora_folder / "adapter_model.safetensors")}, lora / "adapter_model.bin")
    code, err = _run(_script("merge_lora_weights").main, ["--model-path", str(lora), "--model-base", str(tiny_base_llm),
                                                          "--save-model-path", str(tmp_path / "out")], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and not marker.exists() and not (tmp_path / "out").exists()
    assert f"weights file '{lora / 'adapter_model.bin'}' " in err and "weights_only=False" not in err
    (lora / "adapter_model.bin").write_bytes((lora_folder / "adapter_config.json").read_bytes()[:10])  # not a weights file
    code, err = _run(_script("merge_lora_weights").main, ["--model-path", str(lora), "--model-base", str(tiny_base_llm),
                                                          "--save-model-path", str(tmp_path / "out")], capsys)
    assert code == 2 and "is not a readable weights file" in err
    (lora / "adapter_config.json").write_text('{"r": 2,')
    code, err = _run(_script("merge_lora_weights").main, ["--model-path", str(lora), "--model-base", str(tiny_base_llm),
                                                          "--save-model-path", str(tmp_path / "out")], capsys)
    assert code == 2 and "adapter_config.json is not valid JSON" in err
