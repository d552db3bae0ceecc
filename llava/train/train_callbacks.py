"""Training callbacks that a model asks for.

A compressor plugin declares ``callbacks(model) -> list[TrainerCallback]``
(:class:`llava.model.multimodal_projector.plugins.CompressorPlugin`); :func:`callbacks_for_model` asks the plugin of
the model's ``mm_projector_type``. Code outside a plugin (tests, experiments) may also register a *provider*:
``provider(model) -> TrainerCallback | None``. ``train.py`` adds every callback either returns, so the trainer
needs no knowledge of any projector's internals.

This module imports nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from llava.model.multimodal_projector.plugins import plugin_for
from llava.train.saving import llava_config

if TYPE_CHECKING:
    from transformers import TrainerCallback

CallbackProvider = Callable[[Any], "TrainerCallback | None"]

_PROVIDERS: list[CallbackProvider] = []


def register_callback_provider(provider: CallbackProvider) -> CallbackProvider:
    """Register ``provider(model) -> TrainerCallback | None`` (usable as a decorator; registering twice is a no-op)."""
    if provider not in _PROVIDERS:
        _PROVIDERS.append(provider)
    return provider


def unregister_callback_provider(provider: CallbackProvider) -> None:
    """Remove ``provider`` (a no-op if it is not registered)."""
    if provider in _PROVIDERS:
        _PROVIDERS.remove(provider)


def callbacks_for_model(model: Any) -> list["TrainerCallback"]:
    """The callbacks of the model's compressor plugin, then those of the registered providers (``None`` dropped)."""
    callbacks: list[Any] = []
    plugin = plugin_for(getattr(llava_config(model), "mm_projector_type", None))
    if plugin is not None and plugin.callbacks is not None:
        callbacks.extend(plugin.callbacks(model))
    for provider in _PROVIDERS:
        callback = provider(model)
        if callback is not None:
            callbacks.append(callback)
    return callbacks


__all__ = [
    "CallbackProvider",
    "callbacks_for_model",
    "register_callback_provider",
    "unregister_callback_provider",
]
