"""Where the model keeps what a projector needs: resolved once, when the projector is built, and kept on it.

The types (:class:`~llava.plugin_api.ModelNeeds`, :class:`~llava.plugin_api.CompressorInputs`) are the plugin API's;
docs/PLUGINS.md, "How the projector is called", says how ``encode_images`` uses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llava.plugin_api import ModelNeeds

if TYPE_CHECKING:
    import torch

#: Attribute of a built projector that holds its resolved :class:`ModelNeeds`.
NEEDS_ATTRIBUTE = "compressor_needs"


def attach_needs(projector: torch.nn.Module, needs: ModelNeeds) -> torch.nn.Module:
    """Keep ``needs`` on the built ``projector`` (done once, by ``build_vision_projector``); returns the projector."""
    setattr(projector, NEEDS_ATTRIBUTE, needs)
    return projector


def projector_needs(projector: torch.nn.Module) -> ModelNeeds:
    """The needs resolved when ``projector`` was built (:func:`attach_needs`); a projector built by hand, outside
    ``build_vision_projector``, belongs to no plugin and needs nothing beyond the select layer."""
    needs = getattr(projector, NEEDS_ATTRIBUTE, None)
    return needs if isinstance(needs, ModelNeeds) else ModelNeeds()


__all__ = ["NEEDS_ATTRIBUTE", "attach_needs", "projector_needs"]
