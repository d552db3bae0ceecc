"""The registry's example configurations, for tests that run over every registered projector type (as timm's tests
run over ``list_models()``): registering a type with its examples enrols it in those tests."""

from __future__ import annotations

from typing import Any

__all__ = ["registered_examples"]


def registered_examples() -> list[Any]:
    """One ``pytest.param(name, settings, id=name)`` per example of every registered projector type."""
    import pytest

    from llava.model.multimodal_projector.registry import list_plugins

    return [
        pytest.param(name, dict(entry.example_settings), id=name)
        for plugin in list_plugins() for entry in plugin.projectors for name in entry.examples
    ]
