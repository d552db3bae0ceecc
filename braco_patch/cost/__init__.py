"""``braco cost``: FLOPs, latency and memory of a LLaVA-style prefill with Braco (paper Table 1, App. cost tables).

- :mod:`.flops` — analytic FLOPs from configs (the convention is in its docstring);
- :mod:`.presets` — the paper's pipelines and local ``config.json`` files;
- :mod:`.pipeline` — full-pipeline accounting (:class:`Accounting`; defaults reproduce the paper);
- :mod:`.report` — the tables; :mod:`.measure` — measured latency/memory/profiler FLOPs;
- :mod:`.fast` — ``torch.compile`` / CUDA-graph fast paths; :mod:`.cli` — the command;
- :mod:`.projectors` — any projector type's cost, asked of its plugin (the ``module_flops`` tool contract);
  :mod:`.baselines` — the baselines' counts in that form; :mod:`.by_type` — tables over types and methods;
  :mod:`.measure_types` — each type measured as built.
"""

from .flops import (
    LMDims,
    VisionDims,
    compressor_flops,
    llm_prefill_flops,
    official_compressor_flops,
    ours_compressor_flops,
    projector_flops,
    total,
    vision_tower_flops,
)
from .pipeline import Accounting, PipelineCost, pipeline_cost
from .presets import PipelineSpec, get_preset, list_presets, load_spec
from .projectors import CostSetting, ModuleCost, module_cost

__all__ = [
    "Accounting",
    "CostSetting",
    "LMDims",
    "ModuleCost",
    "PipelineCost",
    "PipelineSpec",
    "VisionDims",
    "compressor_flops",
    "get_preset",
    "list_presets",
    "llm_prefill_flops",
    "load_spec",
    "module_cost",
    "official_compressor_flops",
    "ours_compressor_flops",
    "pipeline_cost",
    "projector_flops",
    "total",
    "vision_tower_flops",
]
