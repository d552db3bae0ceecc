"""transformers' output-capturing hooks, installed on the LLM's own layers only (never a second set on the tower).

transformers (5.10 on; checked on 5.24, the version this project runs) records ``output_hidden_states`` / ``output_attentions`` with forward
hooks that a model installs the first time it is asked for them, once (``_output_capturing_hooks_installed`` marks
it). That first install also walks into every pretrained model nested in it and gives each a set, whether or not it
already has its own. LLaVA's vision tower is such a nested model, and it asks its model for hidden states on every
image, so it has its set from the first image on. The LLM's first call with ``output_hidden_states=True`` (or
``output_attentions``) after loading then gave the tower a second set: from that call on every tower layer was
recorded twice, ``hidden_states[mm_vision_select_layer]`` named another layer (``-2`` became the last one), and every
later image got other features than the first call did, with or without a reducer.

:func:`keep_capture_off_nested_models` is a forward pre-hook of the LLaVA base model (:class:`LlavaMetaModel`): on the
first call that asks for captured outputs it installs the LLM's hooks itself, with the children that hold a nested
pretrained model (the tower, a projector built on one) out of the module tree for that moment, and puts them back
in their places. A nested model keeps the one set it installs for itself. Calls that ask for nothing cost one check.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import torch.nn as nn
from transformers import PreTrainedModel

try:  # transformers >= 5.10; earlier 5.x versions patch the layers per call and leave no hooks behind
    from transformers.utils.output_capturing import maybe_install_capturing_hooks
except ImportError:  # pragma: no cover - depends on the installed transformers
    maybe_install_capturing_hooks = None

#: The attribute transformers sets on a model once its capturing hooks are installed.
INSTALLED_FLAG = "_output_capturing_hooks_installed"
#: The configuration switches (and keyword arguments) that ask a transformers model for captured outputs.
CAPTURE_SWITCHES = ("output_hidden_states", "output_attentions")

_lock = threading.Lock()


def capture_requested(config: Any, kwargs: Mapping[str, Any]) -> bool:
    """Whether a call with ``kwargs`` asks the model for captured outputs (a keyword, else the config's default)."""
    return any(kwargs.get(name, getattr(config, name, None)) not in (None, False) for name in CAPTURE_SWITCHES)


def _holds_pretrained_model(module: nn.Module) -> bool:
    return any(isinstance(inner, PreTrainedModel) for inner in module.modules())


def install_llm_capture_hooks(model: nn.Module) -> None:
    """Install ``model``'s capturing hooks (once) with every child that holds a nested pretrained model left out.

    The children are taken out of ``model._modules`` for the install and put back in their order (parameter order,
    and so a checkpoint's key order, stays as it was), also when the install raises. A lock keeps two threads from
    installing at once; the install runs once per model, before that first capturing call's forward.
    """
    if maybe_install_capturing_hooks is None or getattr(model, INSTALLED_FLAG, False):
        return
    with _lock:
        children = list(model._modules.items())
        nested = [name for name, child in children if child is not None and _holds_pretrained_model(child)]
        for name in nested:
            del model._modules[name]
        try:
            maybe_install_capturing_hooks(model)
        finally:
            model._modules.clear()
            model._modules.update(children)


def keep_capture_off_nested_models(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Forward pre-hook (``with_kwargs=True``) of the LLaVA base model: see the module docstring."""
    if not getattr(module, INSTALLED_FLAG, False) and capture_requested(module.config, kwargs):
        install_llm_capture_hooks(module)
