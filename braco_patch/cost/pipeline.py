"""Full-pipeline prefill FLOPs of vanilla vs Braco budgets (paper Table 1): tower → coder → projector → LLM.

The accounting is :class:`llava.cost.pipeline.Accounting`; its defaults reproduce the paper's Table 1 FLOPs column
(8.67 / 1.37 / 1.25 / 1.15 / 1.09 T) within 0.7 % for every row. The paper states "a fixed-length prompt" but not
its length; 52 tokens is the fit, and :func:`prompt_range` gives every length that keeps all rows within 2 %.
The compressor is counted as the official code computes it (full-lattice DCT and embedding) unless the
accounting says ``computation="ours"``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from llava.cost.flops import elementwise, llm_prefill_flops, projector_flops, total, vision_layers_run, vision_tower_flops
from llava.cost.pipeline import Accounting
from llava.cost.presets import InputSpec, PipelineSpec
from llava.cost.video import Video

from ..config import BracoConfig
from . import paper
from .coder_flops import check_allocation, compressor_flops

__all__ = ["PipelineCost", "pipeline_cost", "prompt_range", "allocation_label"]


@dataclass(frozen=True)
class PipelineCost:
    """FLOPs of one image's (or one video's) prefill, by part."""

    label: str
    visual_tokens: int
    llm_tokens: int
    vision: int
    compressor: int
    projector: int
    llm: int
    compressor_elementwise: int = 0

    @property
    def matmul(self) -> int:
        """Matrix-product FLOPs (what ``torch.profiler`` counts as mm/addmm/bmm/conv)."""
        return self.total - self.compressor_elementwise

    @property
    def total(self) -> int:
        return self.vision + self.compressor + self.projector + self.llm

    def to_dict(self) -> dict:
        return {**asdict(self), "total": self.total, "matmul": self.matmul}


def allocation_label(cfg: BracoConfig | None) -> str:
    return "vanilla" if cfg is None else f"Braco-{cfg.output_tokens} ({cfg.name})"


def pipeline_cost(
    spec: PipelineSpec,
    inp: InputSpec,
    allocation: BracoConfig | None,
    acc: Accounting = Accounting(),
    *,
    llm_layers: int | None = None,
    vision_layers: int | None = None,
    batch: int = 1,
    video: Video | None = None,
) -> PipelineCost:
    """Prefill FLOPs of ``spec`` on ``inp`` with a Braco ``allocation`` per view (``None``: vanilla projector).

    ``llm_layers``/``vision_layers`` cap the layer counts (to match a capped measured run); ``batch`` images
    go through one call of each module (the compressor's input-independent work is done once per call).
    With ``video`` (:func:`llava.cost.video.video_setting`), ``inp`` is one frame (a single view) and the cost is
    one video's: its frames through the tower, the coder and the MLP in one call each, the LLM over the video's
    tokens (the model's pool and newline rule).
    """
    vdims, ldims = spec.vision_dims, spec.lm_dims.capped(llm_layers)
    grid = spec.grid(inp)
    layers = vision_layers_run(vdims, spec.select_layer, acc.vision_layers)
    if vision_layers is not None:
        layers = min(layers, vision_layers)
    vision = total(vision_tower_flops(vdims, image_size=inp.image_size, layers=layers, count_attention=acc.count_attention))
    if video is not None and (inp.views != 1 or video.layout.grid != grid):
        raise ValueError(f"a video frame is one view of grid {video.layout.grid}; input {inp.label} has {inp.views} of {grid}")
    units = inp.views if video is None else video.frames  # tower inputs per image or per video
    if allocation is None:
        per_view_tokens, compressor, compressor_ew = None, 0, 0
    else:
        check_allocation(allocation, grid, f"budget {allocation.output_tokens} ({allocation.name})")
        per_view_tokens = allocation.output_tokens
        parts = compressor_flops(allocation, spec.mm_hidden, grid, acc.computation, batch=batch * units)
        compressor, compressor_ew = total(parts), elementwise(parts)
    if video is None:
        visual = spec.visual_tokens(inp, per_view_tokens)  # the model's own count (flat merge), base view + crops
        projected = visual
    else:
        # the MLP runs on every frame's tokens; NeXT's pool (a grid-keeping projector) comes after it
        per_frame = grid[0] * grid[1] if per_view_tokens is None else per_view_tokens
        visual, projected = video.tokens(per_frame), per_frame * video.frames
    projector = total(projector_flops(projected, spec.mm_hidden, ldims.hidden, spec.projector_depth))
    llm_tokens = visual + acc.prompt_tokens
    llm = total(llm_prefill_flops(ldims, llm_tokens, count_attention=acc.count_attention, lm_head=acc.lm_head))
    return PipelineCost(
        label=allocation_label(allocation), visual_tokens=visual, llm_tokens=llm_tokens,
        vision=vision * units * batch, compressor=compressor, projector=projector * batch, llm=llm * batch,
        compressor_elementwise=compressor_ew,
    )


def prompt_range(spec: PipelineSpec, inp: InputSpec, acc: Accounting, rel: float = 0.02, search: int = 1000) -> tuple[int, int] | None:
    """Smallest and largest prompt length keeping every paper row of ``inp`` within ``rel`` (``None``: none does)."""
    refs = paper.pipeline_tflops(spec.name, inp.label)
    if not refs:
        return None
    ok = []
    for p in range(search + 1):
        trial = Accounting(**{**acc.to_dict(), "prompt_tokens": p})
        good = True
        for key, ref in refs.items():
            alloc = None if key == "vanilla" else BracoConfig.from_budget(int(key))
            got = pipeline_cost(spec, inp, alloc, trial).total / 1e12
            if abs(got / ref - 1) > rel:
                good = False
                break
        if good:
            ok.append(p)
    return (min(ok), max(ok)) if ok else None
