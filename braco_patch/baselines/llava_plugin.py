"""The seam between the paper's baselines and LLaVA: finds every method file of this package and registers its plugin.

Loaded through the ``llava.projectors`` entry point ``baselines = braco_patch.baselines.llava_plugin`` (setup.py).
Each method is one file of :mod:`braco_patch.baselines` holding its module, FLOPs, factory, cost, view and ``PLUGIN``
declaration, written against the plugin API alone (:mod:`llava.plugin_api`); this module imports every module of
the package whose name does not start with ``_`` (shared pieces) and registers the ``PLUGIN`` it declares, in the
order of the module names. Adding a method is adding its file: nothing here or anywhere else lists it. Name grammar,
settings and layouts: docs/BASELINES.md.

=====================================  ==========================================================  ========
projector type                         module (state-dict keys)                                    boundary
=====================================  ==========================================================  ========
``prumerge_k{K}``, ``prumerge``        PruMerge (none), then mlp2x_gelu (``0.*``, ``2.*``)          pre
``prumerge_plus_k{K}``, ``prumerge_plus``  PruMerge+ (none), then mlp2x_gelu (``0.*``, ``2.*``)     pre
``divprune_k{K}``                      mlp2x_gelu (``0.*``, ``2.*``), then DivPrune (none)          post
``mqt_k{K}``, ``mqt_q{Q}``             MQT query abstractor, replaces the projector                 pre
``quecc_k{K}``                         QueCC (``compressor.*``), then mlp2x_gelu (``0.*``, ``2.*``)  pre
``tokenpacker_k{K}``                   TokenPacker, replaces the projector                          post
``fouriervlm_k{K}``                    Fourier-VLM (none), then mlp2x_gelu (``0.*``, ``2.*``)       pre
=====================================  ==========================================================  ========

The parameter-free methods (PruMerge, DivPrune, Fourier-VLM) keep exactly ``mlp2x_gelu``'s keys, so any
``mlp2x_gelu`` checkpoint (stage-1 ``mm_projector.bin`` or a full stage-2 checkpoint) loads under their
projector types unchanged: that is how they run training-free.
"""

from __future__ import annotations

import importlib

from llava.model.multimodal_projector.registry import register_plugin
from llava.plugin_api import CompressorPlugin

from . import method_modules

__all__ = ["PLUGINS", "discover"]


def discover(package: str = __package__) -> tuple[CompressorPlugin, ...]:
    """The ``PLUGIN`` of every module of ``package`` (modules named ``_*`` and this one left out), by module name."""
    found = []
    for name in method_modules(importlib.import_module(package).__path__):
        plugin = getattr(importlib.import_module(f"{package}.{name}"), "PLUGIN", None)
        if isinstance(plugin, CompressorPlugin):
            found.append(plugin)
    if not found:
        raise RuntimeError(f"no method file of {package!r} declares a PLUGIN; the package is incomplete")
    return tuple(found)


#: The baselines' plugins, registered.
PLUGINS = tuple(register_plugin(plugin) for plugin in discover())
