"""What every LLaVA config class shares: reading released ``config.json`` files whose ``model_type`` is an
alias (upstream LLaVA-1.5's ``llava``) or the plain LLM's type (``qwen2`` for a plain Qwen2 directory) as the
registered LLaVA ``model_type``, so transformers neither warns about nor rejects them. LLaVA-OneVision's files
(``"model_type": "llava"`` with ``"architectures": ["LlavaQwenForCausalLM"]``) read as ``llava_qwen``: the class
they name decides."""

from __future__ import annotations

import logging
import os
from typing import Any

from .registry import entry_for_config

logger = logging.getLogger(__name__)


class LlavaConfigMixin:
    """Mixed in before the plain LLM's config class; the subclass sets ``model_type`` (e.g. ``llava_qwen``).

    The config carries LLaVA's flat ``mm_*`` keys (``mm_vision_tower``, ``mm_projector_type``,
    ``mm_hidden_size``, ...) as plain attributes, as upstream's and LLaVA-NeXT's ``config.json`` do.
    """

    model_type: str

    @classmethod
    def _remap_model_type(cls, config_dict: dict[str, Any]) -> dict[str, Any]:
        model_type = config_dict.get("model_type")
        try:
            target = entry_for_config(config_dict).model_type
        except ValueError:  # an unknown model_type: transformers' own checks report it
            target = None
        if model_type != cls.model_type and target == cls.model_type:
            logger.info("reading a config with model_type %r as %r", model_type, cls.model_type)
            config_dict = {**config_dict, "model_type": cls.model_type}
        return config_dict

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path: str | os.PathLike[str], **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)  # type: ignore[misc]
        return cls._remap_model_type(config_dict), kwargs

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> Any:
        return super().from_dict(cls._remap_model_type(config_dict), **kwargs)  # type: ignore[misc]
