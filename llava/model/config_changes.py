"""LLaVA-NeXT's config keywords of ``load_pretrained_model``, checked when the model is loaded, not when it first runs.

* ``customized_config``: a ``config.json`` path, a folder holding one, a ``dict`` (converted to the checkpoint's
  config class) or a config object, read in place of the checkpoint's own ``config.json``. A path that does not
  exist, a file that is not a JSON object, or a value of another type is one sentence naming the keyword (a path
  was taken for a hub id, a list failed on ``.get``, a dict was blamed on the checkpoint's file).
* ``overwrite_config``: ``{key: value}`` set on that config. A value of the wrong JSON type for one of LLaVA's
  keys, and a video key NeXT would refuse at the first video (``mm_spatial_pool_stride`` as a string), are
  refused here.
* Either may not change what the checkpoint's weights were saved with (:data:`SHAPE_KEYS`, compared with the
  checkpoint's ``config.json``): ``overwrite_config={"hidden_size": 128}`` on a 64-wide model is one sentence
  naming the key and both values, before transformers loads anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llava.utils import UserError

from .checkpoint_layout import CONFIG_FILE, read_config_file
from .checks import check_llava_config, check_llava_key_types, reading_config

#: Config keys that fix the shapes of a checkpoint's weights (the LLM's and the projector's input). Not
#: ``mm_projector_type``: another type is NeXT's way to put a training-free compressor in front of the checkpoint's
#: projector (``--projector-type``), and the projector's weights are checked by name and shape when they load, so a
#: type whose weights differ is refused there, naming the missing and unexpected keys.
SHAPE_KEYS = (
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "vocab_size", "mm_hidden_size",
)


def _config_file(path: str | os.PathLike[str]) -> str:
    """The ``config.json`` a ``customized_config`` path names (the file itself, or inside a folder)."""
    shown = os.fspath(path)
    resolved = os.path.expanduser(shown)
    if os.path.isdir(resolved):
        resolved = os.path.join(resolved, CONFIG_FILE)
    if not os.path.isfile(resolved):
        raise UserError(f"customized_config {shown!r} does not exist; pass a config.json path, a folder holding one, "
                        "a dict or a config object")
    return resolved


@dataclass(frozen=True)
class ConfigChanges:
    """LLaVA-NeXT's ``customized_config`` and ``overwrite_config``, checked (:meth:`checked`) and applied
    (:meth:`config`) before the model is built."""

    customized: Any = None
    overwrite: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def checked(cls, customized: Any, overwrite: Any) -> ConfigChanges:
        """The two keywords, their types and a ``customized_config`` file checked.

        Raises:
            UserError: For a keyword of another type, a missing path, or a file that is not a JSON object.
        """
        from transformers import PretrainedConfig

        overwrite = {} if overwrite is None else overwrite
        if not isinstance(overwrite, Mapping) or not all(isinstance(key, str) for key in overwrite):
            raise UserError(f"overwrite_config must be a dict of config keys to values, got {type(overwrite).__name__}")
        check_llava_key_types("overwrite_config", dict(overwrite))
        if isinstance(customized, (str, os.PathLike)):
            path = _config_file(customized)
            read_config_file(path, "customized_config")  # a JSON object, or one sentence naming the file
            customized = path
        elif customized is not None and not isinstance(customized, (Mapping, PretrainedConfig)):
            raise UserError(f"customized_config must be a config.json path, a dict or a config object, got "
                            f"{type(customized).__name__}")
        return cls(customized, dict(overwrite))

    def config(self, config_class: Any, model_path: str) -> Any:
        """The config the model is built from: the checkpoint's (or ``customized_config``), ``overwrite_config``
        set on it, every LLaVA and video key checked, nothing that contradicts the weights.

        Raises:
            UserError: Naming the keyword (or the checkpoint's file), the key and the value.
        """
        where = f"{model_path}/{CONFIG_FILE}"
        if self.customized is None or isinstance(self.customized, str):
            if self.customized:
                where = f"customized_config {self.customized!r}"
            with reading_config(model_path, where=where):
                config = config_class.from_pretrained(self.customized or model_path)
        elif isinstance(self.customized, Mapping):
            where = "customized_config (a dict)"
            with reading_config(model_path, where=where):
                config = config_class.from_dict(dict(self.customized))
        else:
            config = self.customized
            where = f"customized_config (a {type(config).__name__})"
        for key, value in self.overwrite.items():
            setattr(config, key, value)
        if self.overwrite:
            where += f" with overwrite_config {sorted(self.overwrite)}"
        check_llava_config(model_path, config, where=where)
        video_keys = sorted(set(VIDEO_KEYS) & set(self.overwrite))
        _check_video_keys(config, f"overwrite_config {video_keys}" if video_keys else where)
        self._check_weights_fit(config, model_path)
        return config

    def _check_weights_fit(self, config: Any, model_path: str) -> None:
        """Refuse a changed :data:`SHAPE_KEYS` value (compared with the checkpoint's own ``config.json``)."""
        if self.customized is None and not self.overwrite:
            return
        saved_file = os.path.join(model_path, CONFIG_FILE)
        if not os.path.isfile(saved_file):
            return  # a hub id: its config cannot be read without downloading
        saved = read_config_file(saved_file)
        for key in SHAPE_KEYS:
            if key not in saved or not hasattr(config, key) or getattr(config, key) == saved[key]:
                continue
            keyword = "overwrite_config" if key in self.overwrite else "customized_config"
            raise UserError(
                f"{keyword} sets {key}={getattr(config, key)!r}, which contradicts the checkpoint's weights: they were "
                f"saved with {key}={saved[key]!r} ({saved_file}); leave {key} out of {keyword}"
            )


#: The video keys NeXT's ``overwrite_config`` sets most (lmms-eval passes them as strings at times).
VIDEO_KEYS = ("mm_spatial_pool_mode", "mm_spatial_pool_stride", "mm_newline_position")


def _check_video_keys(config: Any, where: str) -> None:
    """The video keys NeXT reads at the first video (pool mode, stride, newline position), checked at load."""
    from .video import check_video_keys

    try:
        check_video_keys(config)
    except ValueError as error:
        raise UserError(f"{where}: {error}") from None


__all__ = ["SHAPE_KEYS", "VIDEO_KEYS", "ConfigChanges"]
