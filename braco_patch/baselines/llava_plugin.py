"""The seam between the paper's baselines and LLaVA: finds every method file of this package and registers its plugin.

Loaded through the ``llava.projectors`` entry point ``baselines = braco_patch.baselines.llava_plugin`` (setup.py).
Each method is one file of :mod:`braco_patch.baselines` holding its module, FLOPs, factory, cost, view and ``PLUGIN``
declaration, written against the plugin API alone (:mod:`llava.plugin_api`); this module imports every module of
the package whose name does not start with ``_`` (shared pieces) and registers the ``PLUGIN`` it declares, in the
order of the module names. Adding a method is adding its file: nothing here or anywhere else lists it. Name grammar,
settings and layouts: docs/BASELINES.md.

The types, their checkpoint layouts and boundaries are in each method file's docstring and docs/BASELINES.md. The
parameter-free methods (PruMerge, DivPrune, Fourier-VLM) keep exactly ``mlp2x_gelu``'s keys, so any ``mlp2x_gelu``
checkpoint (stage-1 ``mm_projector.bin`` or a full stage-2 checkpoint) loads under their types unchanged: that is how
they run training-free.
"""

from __future__ import annotations

from llava.model.multimodal_projector.registry import register_plugin
from llava.plugin_api import CompressorPlugin

from ..discovery import declared_plugins

__all__ = ["PLUGINS", "discover"]


def discover(package: str = __package__) -> tuple[CompressorPlugin, ...]:
    """The ``CompressorPlugin`` of every method file of ``package``, by file name (:func:`braco_patch.discovery.declared_plugins`;
    a package declaring none is a RuntimeError)."""
    return declared_plugins(package, CompressorPlugin)


#: The baselines' plugins, registered.
PLUGINS = tuple(register_plugin(plugin) for plugin in discover())
