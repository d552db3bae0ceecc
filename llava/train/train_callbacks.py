"""Training callbacks that a model asks for: a registry that projector plugins fill.

A projector with training-time state (e.g. a temperature schedule that must follow the optimiser step)
registers a *provider*: a function that looks at the model about to be trained and returns a
``transformers.TrainerCallback`` for it, or ``None`` when the model has nothing to drive. ``train.py``
adds every callback the providers return, so the trainer needs no knowledge of any projector's internals.

This module imports nothing heavy: plugins import it at registration time, also during inference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

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


def callback_providers() -> list[CallbackProvider]:
    """The registered providers, in registration order."""
    return list(_PROVIDERS)


def callbacks_for_model(model: Any) -> list["TrainerCallback"]:
    """The callbacks that the registered providers return for ``model`` (``None`` answers dropped)."""
    callbacks = []
    for provider in _PROVIDERS:
        callback = provider(model)
        if callback is not None:
            callbacks.append(callback)
    return callbacks


__all__ = [
    "CallbackProvider",
    "callback_providers",
    "callbacks_for_model",
    "register_callback_provider",
    "unregister_callback_provider",
]
