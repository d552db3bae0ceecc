"""The pipeline cost engine: analytic FLOPs and measured latency/memory of a LLaVA-style prefill.

- :mod:`.flops` — the FLOP convention and the counts of a vision tower, an ``mlp{N}x_gelu`` projector and an LLM
  prefill, from configs alone;
- :mod:`.presets` — pipelines to cost: published settings and local ``config.json`` files (:class:`PipelineSpec`);
- :mod:`.module` — what a type costs, asked of its plugin's :class:`CostModel` (the plugin API's types);
- :mod:`.pipeline` — full-pipeline FLOPs of a projector type (:class:`Accounting`), and of a saved checkpoint;
- :mod:`.video` — a video of T frames (LLaVA-NeXT / OneVision): frames per module, the LLM over the model's token count;
- :mod:`.measure` — measured latency, peak memory and profiler FLOPs, and a random-weight pipeline to time;
  :mod:`.measure_types` — each projector type measured as built; :mod:`.fast` — ``torch.compile`` / CUDA graphs.

Method plugins contribute their module's FLOPs and their types per budget (``CompressorPlugin.cost``, declared on
:mod:`llava.plugin_api`); the engine never names a method. Names below are imported on first use, so ``import llava.cost`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CONVENTION": "flops", "LMDims": "flops", "VisionDims": "flops", "llm_prefill_flops": "flops", "projector_flops": "flops",
    "total": "flops", "elementwise": "flops", "vision_tower_flops": "flops", "linear_flops": "flops",
    "CostModel": "module", "CostSetting": "module", "ModuleCost": "module", "module_cost": "module", "types_at_budget": "module",
    "expand_types": "module",
    "Accounting": "pipeline", "checkpoint_prefill_flops": "pipeline", "cost_setting": "pipeline",
    "projector_pipeline_flops": "pipeline",
    "Video": "video", "frame_inputs": "video", "video_setting": "video",
    "InputSpec": "presets", "PipelineSpec": "presets", "get_preset": "presets", "list_presets": "presets", "load_spec": "presets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
