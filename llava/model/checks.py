"""Checks that turn a broken checkpoint or path into one sentence, before a library gives a misleading error.

Each function is called from one line of :mod:`llava.model.builder`:

- :func:`check_model_path`: a ``--model-path`` that is a local path but does not exist (huggingface_hub would
  say "Repo id must be in the form ...");
- :func:`check_llava_config`: a LLaVA ``config.json`` without ``mm_vision_tower`` (the projector weights would be
  blamed), and LLaVA's generic boolean keys stored as strings (``"false"`` is truthy in Python);
- :func:`check_tokenizer_files`: a checkpoint folder without tokenizer files (transformers asks to install
  sentencepiece, which is installed);
- :func:`check_weight_files`: a truncated or corrupt ``*.safetensors`` (a raw ``SafetensorError``) or
  ``pytorch_model*.bin`` shard (truncated, or holding pickled objects other than tensors);
- :func:`check_loaded_weights`: weights of the model that the checkpoint does not hold (they would stay
  random and the model would generate garbage), unless the caller opts out with ``allow_missing_weights``;
- :func:`~llava.model.weights_io.weights_file_error` (the reader's own): the sentence for an unreadable
  ``.bin``/``.safetensors`` file, which never repeats torch's advice to retry with ``weights_only=False`` (arbitrary
  code execution for an untrusted file);
- :func:`check_llava_key_types`: LLaVA's own ``config.json`` keys of the wrong JSON type (a list where a name
  belongs would reach a regex as a ``TypeError``);
- :func:`reading_config`: a config value that transformers' config class refuses (``"hidden_size": "64"``),
  as a sentence naming the file and the key;
- :func:`check_generation_config`: a ``generation_config.json`` that transformers would silently skip;
- :func:`check_patch_merge`: a projector whose token count depends on the image with an AnyRes merge that needs
  the same count in every view (the refusal would otherwise come per image, hours into a run).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from llava.utils import BOOLEAN_WORDS, UserError, parse_bool

#: Files any one of which makes a folder's tokenizer loadable (sentencepiece, tokenizers, GPT-2-style BPE).
TOKENIZER_FILES = ("tokenizer.model", "tokenizer.json", "vocab.json")
#: LLaVA's own boolean config keys (upstream's names); a plugin's keys are checked by its own settings.
BOOLEAN_KEYS = (
    "mm_use_im_start_end", "mm_use_im_patch_token", "tune_mm_mlp_adapter", "freeze_mm_mlp_adapter", "use_mm_proj",
    "unfreeze_mm_vision_tower",
)
#: Weight names a full checkpoint may lack: the tower is loaded from its own folder.
_OPTIONAL_PREFIXES = ("model.vision_tower.",)
_SHOWN = 5
#: LLaVA's own config keys and the JSON types they take (``null`` is always accepted: upstream writes some).
LLAVA_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "mm_vision_tower": (str,), "vision_tower": (str,), "mm_projector_type": (str,), "mm_hidden_size": (int,),
    "mm_vision_select_layer": (int,), "mm_vision_select_feature": (str,), "mm_patch_merge_type": (str,),
    "image_aspect_ratio": (str,), "image_grid_pinpoints": (list, str), "tokenizer_padding_side": (str,),
    "tokenizer_model_max_length": (int,),
}
_JSON_TYPE_NAMES = {str: "a string", int: "an integer", list: "a list", float: "a number", bool: "a boolean", dict: "an object"}
GENERATION_CONFIG_FILE = "generation_config.json"


def _looks_like_a_path(name: str) -> bool:
    """Whether ``name`` can only be a local path (a hub id is ``name`` or ``namespace/name``)."""
    if os.path.isabs(name) or name.startswith((".", "~")) or "\\" in name or name.count("/") > 1:
        return True
    head = name.split("/", 1)[0]
    return "/" in name and os.path.isdir(head)


def check_model_path(model_path: str, flag: str = "--model-path") -> None:
    """Raise when ``model_path`` is meant as a local folder that does not exist, or is a file."""
    if not os.path.exists(os.path.expanduser(model_path)) and _looks_like_a_path(model_path):
        raise UserError(f"{flag} {model_path!r} does not exist; pass a checkpoint folder or a hub id such as 'liuhaotian/llava-v1.5-7b'")
    if os.path.isfile(os.path.expanduser(model_path)):
        raise UserError(f"{flag} {model_path!r} is a file; pass the checkpoint folder that holds config.json and the weights")


def read_boolean(key: str, value: Any) -> bool:
    """``value`` of config key ``key`` as a bool, by the project's one rule (:func:`llava.utils.parse_bool`)."""
    parsed = parse_bool(value)
    if parsed is None:
        raise UserError(f"config.json key {key} must be a boolean ({BOOLEAN_WORDS}), got {value!r}")
    return parsed


def check_llava_config(model_path: str, config: Any) -> None:
    """Require ``mm_vision_tower``, normalise LLaVA's boolean keys in place and check the merge (see the module docstring)."""
    if not getattr(config, "mm_vision_tower", None) and not getattr(config, "vision_tower", None):
        raise UserError(
            f"{model_path}/config.json has no 'mm_vision_tower' (the vision tower's hub id or folder), which every "
            "LLaVA checkpoint needs; add it, e.g. \"mm_vision_tower\": \"openai/clip-vit-large-patch14-336\""
        )
    for key in BOOLEAN_KEYS:
        value = getattr(config, key, None)
        if value is not None:
            try:
                setattr(config, key, read_boolean(key, value))
            except UserError:
                raise UserError(f"{model_path}/config.json: {key} must be a boolean ({BOOLEAN_WORDS}), got {value!r}") from None
    check_patch_merge(config, f"{model_path}/config.json")


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def check_llava_key_types(config_file: str, config: dict[str, Any]) -> None:
    """Raise naming the file and the key when one of :data:`LLAVA_KEY_TYPES` holds another JSON type."""
    for key, types in LLAVA_KEY_TYPES.items():
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            wanted = " or ".join(_JSON_TYPE_NAMES[kind] for kind in types)
            raise UserError(f"{config_file}: key {key!r} must be {wanted}, got {_json_type(value)} {value!r}; fix config.json")


_FIELD = re.compile(r"field '([^']+)'")


@contextlib.contextmanager
def reading_config(model_path: str) -> Iterator[None]:
    """Turn a value that a transformers config class refuses into one sentence naming the file and the key.

    transformers 5 configs are strict dataclasses: ``"hidden_size": "64"`` raises a
    ``StrictDataclassFieldValidationError`` whose text is a two-line report; the key is in it.
    """
    from huggingface_hub.errors import StrictDataclassError

    try:
        yield
    except StrictDataclassError as error:
        match = _FIELD.search(str(error))
        cause = error.__cause__ or error
        key = f"key {match.group(1)!r}" if match else "a value"
        raise UserError(f"{model_path}/config.json: {key} is not accepted ({cause}); fix config.json") from None


def check_generation_config(model_path: str | None) -> None:
    """Raise when a local folder's ``generation_config.json`` cannot be read.

    transformers skips an unreadable file with an INFO line and builds decoding defaults from ``config.json``, so
    the checkpoint's own stop tokens (``eos_token_id``), pad id and defaults would be dropped without a word and
    the answers would change. An error costs one edit (repair or delete the file); a silent fallback costs a run.
    """
    if not model_path or not os.path.isdir(model_path):
        return
    path = os.path.join(model_path, GENERATION_CONFIG_FILE)
    if not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        reason = str(error) if isinstance(error, json.JSONDecodeError) else "not UTF-8 text"
        raise UserError(
            f"{path} is not valid JSON ({reason}), so its decoding settings (eos_token_id, pad_token_id, ...) would be "
            "ignored; repair it, or delete it to use the ids in config.json"
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{path} holds a JSON {type(data).__name__}, but {GENERATION_CONFIG_FILE} must be a JSON object")
    from transformers import GenerationConfig

    try:
        GenerationConfig.from_dict(data)
    except (TypeError, ValueError) as error:
        raise UserError(f"{path} has a value transformers cannot use ({error}); repair it, or delete the file") from None


def check_patch_merge(config: Any, where: str = "config.json") -> None:
    """Refuse an adaptive-count projector (its plugin says so) with a merge that stitches views of equal counts.

    Args:
        config: Anything with ``mm_projector_type``, ``mm_patch_merge_type``, ``image_aspect_ratio`` (a model
            config, or the training arguments) and the projector plugin's keys.
        where: Where the values come from, for the message.

    Raises:
        UserError: Naming the three values and the fix.
    """
    from llava.mm_utils import is_anyres
    from llava.model.multimodal_projector.plugins import tokens_depend_on_image

    merge = getattr(config, "mm_patch_merge_type", None) or "flat"
    aspect = getattr(config, "image_aspect_ratio", None)
    if merge == "flat" or not is_anyres(aspect) or not tokens_depend_on_image(config):
        return
    raise UserError(
        f"{where}: mm_projector_type {config.mm_projector_type!r} keeps a number of visual tokens that depends on the "
        f"image, but mm_patch_merge_type {merge!r} with image_aspect_ratio {aspect!r} needs the same number in every "
        "view; use mm_patch_merge_type 'flat', or a projector type with a fixed token count"
    )


def check_tokenizer_files(path: str) -> None:
    """Raise when a local folder has none of :data:`TOKENIZER_FILES`."""
    if os.path.isdir(path) and not any(os.path.isfile(os.path.join(path, name)) for name in TOKENIZER_FILES):
        raise UserError(
            f"{path!r} has no tokenizer files (tokenizer.model or tokenizer.json); copy them from the base LLM the "
            "checkpoint was trained from"
        )


def check_weight_files(model_path: str) -> None:
    """Open every weights file of a local folder cheaply and raise on a broken one: the header of each
    ``*.safetensors``, and, when the folder has no safetensors weights (transformers would then read the
    ``pytorch_model*.bin`` shards), each shard as :func:`~llava.model.weights_io.load_weights_file` reads it
    (``weights_only=True``, tensors mapped, not read), so a truncated or hostile shard is one sentence."""
    if not os.path.isdir(model_path):
        return
    from safetensors import safe_open

    from .weights_io import load_weights_file, weights_file_error  # torch: imported when a folder is checked

    names = sorted(os.listdir(model_path))
    for name in names:
        if name.endswith(".safetensors"):
            path = os.path.join(model_path, name)
            try:
                with safe_open(path, framework="pt"):
                    pass
            except Exception as error:  # SafetensorError, OSError: any failure means the file is unusable
                raise weights_file_error(path, error) from None
    if any(name.startswith("model") and name.endswith(".safetensors") for name in names):
        return
    for name in names:
        if name.startswith("pytorch_model") and name.endswith(".bin"):
            load_weights_file(os.path.join(model_path, name), mmap=True)


def check_loaded_weights(
    missing_keys: Iterable[str], source: str, *, unexpected_keys: Iterable[str] = (), allow_missing: bool = False
) -> None:
    """Raise naming the weights ``source`` lacks (they would stay random) unless ``allow_missing``, and the
    weights it holds that the model has no place for (a renamed or foreign layer would be dropped silently)."""
    missing = sorted(key for key in missing_keys if not key.startswith(_OPTIONAL_PREFIXES))
    if missing and not allow_missing:
        raise UserError(
            f"{source!r} is missing {len(missing)} weights ({_some(missing)}), which would stay random; use a complete "
            "checkpoint, or pass allow_missing_weights=True to load_pretrained_model for a deliberate partial load"
        )
    unexpected = sorted(key for key in unexpected_keys if not key.startswith(_OPTIONAL_PREFIXES))
    if unexpected:
        raise UserError(
            f"{source!r} holds {len(unexpected)} weights this model has no place for ({_some(unexpected)}); it was "
            "saved from another architecture or its config.json does not match it"
        )


def _some(keys: list[str]) -> str:
    return ", ".join(keys[:_SHOWN]) + (f", ... ({len(keys) - _SHOWN} more)" if len(keys) > _SHOWN else "")


__all__ = [
    "BOOLEAN_KEYS",
    "LLAVA_KEY_TYPES",
    "TOKENIZER_FILES",
    "check_generation_config",
    "check_llava_config",
    "check_llava_key_types",
    "check_loaded_weights",
    "check_model_path",
    "check_patch_merge",
    "check_tokenizer_files",
    "check_weight_files",
    "read_boolean",
    "reading_config",
]
