"""Broken checkpoints and paths give one sentence naming the problem (issue 14, items 5, 6 and 12)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from llava.utils import UserError

from ._support import load, make_images, pixels, prompt_ids


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def _edit_config(path: Path, drop: tuple[str, ...] = (), **changes: object) -> None:
    config = json.loads((path / "config.json").read_text())
    for key in drop:
        config.pop(key, None)
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("spelling", ["{tmp}/checkpoints/llava-v1.5-7b", "../checkpoints/llava-missing", "checkpoints/llava-a/b"])
def test_missing_model_path_names_the_path(tmp_path, spelling: str):
    path = spelling.format(tmp=tmp_path)
    with pytest.raises(UserError, match=r"--model-path .* does not exist") as error:
        load(Path(path))
    assert path in str(error.value) and "Repo id" not in str(error.value)


def test_missing_model_base_names_the_path(tiny_projector_checkpoint, tmp_path):
    base = tmp_path / "models" / "vicuna-7b"
    with pytest.raises(UserError, match=rf"--model-base '{base}' does not exist"):
        load(tiny_projector_checkpoint("mlp2x_gelu", "bin"), model_base=base)


def test_relative_path_under_an_existing_folder_is_a_path(tmp_path, monkeypatch):
    (tmp_path / "checkpoints").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"'checkpoints/llava-7b' does not exist"):
        load(Path("checkpoints/llava-7b"))


def test_config_without_vision_tower_names_the_key(tiny_llava_checkpoint, tmp_path):
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-no-tower")
    _edit_config(path, drop=("mm_vision_tower",))
    with pytest.raises(UserError, match=r"config\.json has no 'mm_vision_tower'"):
        load(path)


@pytest.mark.parametrize("removed", [("tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")])
def test_missing_tokenizer_files_are_named(tiny_llava_checkpoint, tmp_path, removed):
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-no-tokenizer")
    for name in removed:
        (path / name).unlink(missing_ok=True)
    with pytest.raises(UserError, match=r"has no tokenizer files \(tokenizer\.model or tokenizer\.json\)") as error:
        load(path)
    assert "sentencepiece" not in str(error.value)


@pytest.mark.parametrize("content", [b"", b"\x80\x02garbage", b"PK\x03\x04truncated zip"])
def test_corrupt_projector_bin_never_suggests_weights_only_false(tiny_projector_checkpoint, tiny_base_llm, tmp_path, content):
    path = _copy(tiny_projector_checkpoint("mlp2x_gelu", "bin"), tmp_path / "llava-pretrain-corrupt")
    (path / "mm_projector.bin").write_bytes(content)
    with pytest.raises(UserError, match=r"mm_projector\.bin' is not a readable weights file") as error:
        load(path, model_base=tiny_base_llm)
    assert "weights_only" not in str(error.value) and "\n" not in str(error.value)


def test_truncated_safetensors_is_one_sentence(tiny_llava_checkpoint, tmp_path):
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-truncated")
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match=r"model\.safetensors.*is not a readable weights file"):
        load(path)


def test_missing_language_model_weights_are_named(tiny_llava_checkpoint, tmp_path):
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-no-layer-1")
    weights = load_file(path / "model.safetensors")
    dropped = sorted(key for key in weights if key.startswith("model.layers.1."))
    assert dropped
    save_file({k: v for k, v in weights.items() if k not in dropped}, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"is missing \d+ weights \(model\.layers\.1\..*allow_missing_weights=True") as error:
        load(path)
    assert dropped[0] in str(error.value)
    # The explicit opt-out loads it (e.g. to inspect a partial checkpoint).
    _, model, _, _ = load(path, allow_missing_weights=True)
    assert model is not None


def test_unexpected_language_model_weights_are_named(tiny_llava_checkpoint, tmp_path):
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-renamed-layer")
    weights = load_file(path / "model.safetensors")
    renamed = {k.replace("model.layers.1.", "model.layerz.1.") if k.startswith("model.layers.1.") else k: v for k, v in weights.items()}
    save_file(renamed, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"is missing"):
        load(path)
    with pytest.raises(UserError, match=r"holds \d+ weights this model has no place for \(model\.layerz\.1\."):
        load(path, allow_missing_weights=True)


def test_a_complete_checkpoint_still_loads_and_answers(tiny_llava_checkpoint):
    tokenizer, model, processor, _ = load(tiny_llava_checkpoint("mlp2x_gelu"))
    images = pixels(make_images(1), processor, model)
    out = model.generate(prompt_ids(tokenizer, "What?").unsqueeze(0), images=images, image_sizes=[(40, 30)],
                         do_sample=False, max_new_tokens=2)
    assert out.shape[0] == 1


@pytest.mark.parametrize("stored, expected", [("false", False), ("no", False), ("true", True), (False, False)])
def test_string_booleans_in_generic_keys_are_read_as_booleans(tiny_llava_checkpoint, tmp_path, stored, expected):
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-string-bool")
    _edit_config(path, mm_use_im_start_end=stored, mm_use_im_patch_token=stored)
    _, model, _, _ = load(path)
    assert model.config.mm_use_im_start_end is expected and model.config.mm_use_im_patch_token is expected


def test_a_non_boolean_generic_key_is_refused(tiny_llava_checkpoint, tmp_path):
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-bad-bool")
    _edit_config(path, mm_use_im_start_end="maybe")
    with pytest.raises(UserError, match=r"mm_use_im_start_end must be a boolean .*got 'maybe'"):
        load(path)


# ---------------------------------------------------------------------------------------------- config files (I01-I11)


def test_config_value_of_the_wrong_type_names_file_and_key(tiny_llava_checkpoint, tmp_path):
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-strhidden")
    _edit_config(path, hidden_size="64")  # I01: transformers' strict config refuses it with a two-line report
    with pytest.raises(UserError, match=r"llava-strhidden/config\.json: key 'hidden_size' is not accepted .*expected int, got str"):
        load(path)


def test_projector_type_that_is_not_a_string_names_file_and_key(tiny_llava_checkpoint, tmp_path):
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-listptype")
    _edit_config(path, mm_projector_type=["mlp2x_gelu"])  # I03: a TypeError inside the projector regex before
    with pytest.raises(UserError, match=r"llava-listptype/config\.json: key 'mm_projector_type' must be a string, got a list"):
        load(path)


@pytest.mark.parametrize("content, reason", [
    ('{"model_type": "llava_llama", "hidden_size": 6', r"is not valid JSON \(Expecting .*: line 1 column \d+ \(char \d+\)\)"),  # I05
    # json's own wording, not "starting at at line 1" (its message ends in "at")
    ('{"model_type": "llava_ll', r"is not valid JSON \(Unterminated string starting at: line 1 column 16 \(char 15\)\);"),
    ('["llava"]', r"holds a JSON list, but config\.json must be a JSON object"),
    ("\udcff", r"is not a text file"),
])
def test_config_that_is_not_a_json_object_names_the_file(tiny_llava_checkpoint, tmp_path, content, reason):
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-badjson")
    (path / "config.json").write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(UserError, match=rf"llava-badjson/config\.json {reason}"):
        load(path)


@pytest.mark.parametrize("content, reason", [
    ('{"eos_token_id": 2, ', r"is not valid JSON .*eos_token_id, pad_token_id.*delete it to use the ids in config\.json"),
    ('{"eos_token_id": "2', r"is not valid JSON \(Unterminated string starting at: line 1 column 18 \(char 17\)\), so"),
    ('[2]', r"holds a JSON list"),
])
def test_unreadable_generation_config_is_named_not_skipped(tiny_llava_checkpoint, tmp_path, content, reason):
    # I11: transformers skips the file with an INFO line and the checkpoint's stop ids are lost without a word.
    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-badgencfg")
    (path / "generation_config.json").write_text(content)
    with pytest.raises(UserError, match=rf"llava-badgencfg/generation_config\.json {reason}"):
        load(path)


def test_plain_language_model_config_of_the_wrong_type_is_named(tiny_base_llm, tmp_path):
    path = _copy(tiny_base_llm, tmp_path / "vicuna-strlayers")
    _edit_config(path, num_hidden_layers="2")
    with pytest.raises(UserError, match=r"vicuna-strlayers/config\.json: key 'num_hidden_layers' is not accepted"):
        load(path)


def test_adaptive_projector_with_a_spatial_anyres_merge_is_refused_on_load(tiny_llava_checkpoint, tmp_path):
    # T15 at inference: the refusal came per image, for the images whose views happened to get different counts.
    from llava.model.multimodal_projector.builder import resolve_projector

    try:
        resolve_projector("prumerge")
    except ValueError:
        pytest.skip("the baselines plugin (adaptive PruMerge) is not installed")
    path = _copy(tiny_llava_checkpoint("prumerge"), tmp_path / "llava-pm-anyres")
    _edit_config(path, image_aspect_ratio="anyres", mm_patch_merge_type="spatial", image_grid_pinpoints=[[48, 96], [96, 48]])
    with pytest.raises(UserError, match=r"llava-pm-anyres/config\.json: mm_projector_type 'prumerge' keeps a number of visual tokens that depends on the image"):
        load(path)


def _bin_shard_checkpoint(source: Path, target: Path) -> Path:
    """``source`` with a ``pytorch_model.bin`` shard (the released LLaVA-1.5 layout) instead of safetensors."""
    import torch

    _copy(source, target)
    weights = load_file(str(target / "model.safetensors"))
    (target / "model.safetensors").unlink()
    torch.save(weights, target / "pytorch_model.bin")
    return target


class _Hostile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import builtins

        return builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",)


def test_bin_shard_checkpoint_loads_and_broken_shards_are_one_sentence(tiny_llava_checkpoint, tmp_path):
    import torch

    path = _bin_shard_checkpoint(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "ckpt-bin")
    _, model, _, _ = load(path)  # the intact shard passes the check and loads
    stored = torch.load(path / "pytorch_model.bin", weights_only=True)
    assert torch.equal(model.lm_head.weight, stored["lm_head.weight"])
    shard = path / "pytorch_model.bin"
    intact = shard.read_bytes()
    shard.write_bytes(intact[: len(intact) // 2])  # X02 on load: a truncated shard
    with pytest.raises(UserError, match=r"pytorch_model\.bin' is not a readable weights file") as error:
        load(path)
    assert "weights_only" not in str(error.value)
    marker = tmp_path / "code-ran"
    torch.save({**stored, "payload": _Hostile(marker)}, shard)  # X03 on load: a hostile shard
    with pytest.raises(UserError, match=r"pytorch_model\.bin' holds pickled Python objects that are not tensors"):
        load(path)
    assert not marker.exists()


@pytest.mark.parametrize("name, content, reason", [
    ("tokenizer.json", '{"version": "1.0", "added_tokens": [{"id": 0', r"is not valid JSON \(Expecting .*\); restore it from the "
                                                                      "original checkpoint$"),
    ("tokenizer_config.json", "[1]", r"holds a JSON list, but tokenizer file tokenizer_config\.json must be a JSON object$"),
    ("special_tokens_map.json", "\udcff", r"is not a text file, so not a valid tokenizer file special_tokens_map\.json"),
])
def test_old_i10_a_damaged_tokenizer_file_is_named(tiny_llava_checkpoint, tmp_path, name, content, reason):
    # Before: json.decoder.JSONDecodeError from inside transformers, naming no file.
    from llava.model.tokenizer_loading import load_tokenizer

    path = _copy(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-badtok")
    (path / name).write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(UserError, match=rf"^{path / name} {reason}"):
        load(path)
    with pytest.raises(UserError, match=rf"^{path / name} {reason}"):  # the one door every tokenizer load goes through
        load_tokenizer(str(path))
