"""Serve this project's checkpoints with vLLM: an out-of-tree plugin (docs/SERVING.md, "vLLM").

Installed with the project, it is the entry point ``llava = llava.serve.vllm_plugin:register`` of the group
``vllm.general_plugins``, which vLLM calls in every one of its processes. :func:`register`:

* registers this project's LLaVA configs with transformers (``llava_llama``, ``llava_qwen``, ``llava_mistral``: the
  language-model registry) and each one's causal-LM architecture (``LlavaLlamaForCausalLM``, ...) with vLLM's
  ``ModelRegistry``, as :class:`llava.serve.vllm_plugin.model.LlavaForVllm` (imported lazily, by vLLM);
* registers, as vLLM's fallback chat template for those model types, the Jinja rendering of the conversation
  template the checkpoint's name selects (:func:`llava.conversation.template_for_model`, the rule of every llava
  command; :mod:`.chat_template`). ``vllm serve CKPT --chat-template FILE`` overrides it.

Then ``vllm serve CHECKPOINT`` answers ``/v1/chat/completions`` with images. Nothing here imports vLLM at
``import llava`` time; only :func:`register` and :mod:`.model` do.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

#: What vLLM's ``ModelRegistry`` gets for each architecture (``module:class``, imported by vLLM when needed).
MODEL_CLASS = "llava.serve.vllm_plugin.model:LlavaForVllm"

_TEMPLATE_DIR: Path | None = None


def conv_mode_for(checkpoint: str) -> str:
    """The conversation template of a checkpoint, from its name (the rule every llava command uses)."""
    from llava.conversation import template_for_model
    from llava.mm_utils import get_model_name_from_path

    return template_for_model(get_model_name_from_path(checkpoint))


def chat_template_file(checkpoint: str) -> Path:
    """A file holding the chat template of ``checkpoint`` (written once per template and process, in a private
    temporary folder)."""
    from .chat_template import chat_template

    global _TEMPLATE_DIR
    conv_mode = conv_mode_for(checkpoint)
    if _TEMPLATE_DIR is None:
        _TEMPLATE_DIR = Path(tempfile.mkdtemp(prefix="llava-chat-templates-"))
    path = _TEMPLATE_DIR / f"{conv_mode}.jinja"
    if not path.is_file():
        path.write_text(chat_template(conv_mode), encoding="utf-8")
        logger.info("chat template for %s: llava conversation template %r (pass --chat-template to choose another)",
                    os.path.basename(os.path.normpath(checkpoint)), conv_mode)
    return path


def register() -> None:
    """vLLM's entry point (see the module docstring)."""
    from vllm import ModelRegistry
    from vllm.transformers_utils.chat_templates.registry import register_chat_template_fallback_path

    from llava.model.language_model.registry import list_language_models, resolve_language_model

    for model_type in list_language_models():
        entry = resolve_language_model(model_type)
        architecture = entry.causal_lm_class.__name__
        if architecture not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(architecture, MODEL_CLASS)
        # Not the aliases: ``llava`` is also transformers' own LLaVA, whose checkpoints bring their own templates.
        register_chat_template_fallback_path(entry.model_type, chat_template_file)


__all__ = ["MODEL_CLASS", "chat_template_file", "conv_mode_for", "register"]
