"""Braco measured (``braco cost --measure``): the coder at its boundary, ours next to the official computation, and
the full prefill of vanilla vs each budget on a random-weight pipeline of the preset's shape.

The protocol (warm-up, timed calls, peak memory, profiler FLOPs) is :mod:`llava.cost.measure`'s, the paper's
(App. "Hardware scaling and measurement protocol").
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import torch
import torch.nn as nn

from llava.capture import check_close, make_fast
from llava.cost.flops import elementwise, projector_flops, total
from llava.cost.measure import OOM, MeasureOptions, RandomPipeline, is_oom, measure_call
from llava.cost.pipeline import Accounting
from llava.cost.presets import InputSpec, PipelineSpec
from llava.model.multimodal_projector.builder import mlp_projector

from ..coder import BracoCoder
from ..config import BracoConfig
from ..reference import official_forward
from .coder_flops import compressor_flops
from .pipeline import allocation_label, pipeline_cost

__all__ = ["braco_projector", "measure_boundary", "measure_pipeline"]

logger = logging.getLogger(__name__)


def braco_projector(spec: PipelineSpec, alloc: BracoConfig | None, opts: MeasureOptions) -> nn.Module:
    """``mlp{depth}x_gelu`` (``alloc`` ``None``) or ``Sequential(coder, mlp)`` of ``spec``'s widths, in eval mode."""
    mlp = mlp_projector(spec.mm_hidden, spec.lm_dims.hidden, spec.projector_depth)
    layers = mlp if alloc is None else [BracoCoder.from_config(spec.mm_hidden, alloc), *mlp]
    return nn.Sequential(*layers).to(opts.device, opts.dtype).eval()


# -- compressor boundary -----------------------------------------------------------------------------
def measure_boundary(
    spec: PipelineSpec, inputs: tuple[InputSpec, ...], allocations: list[BracoConfig], opts: MeasureOptions
) -> list[dict[str, Any]]:
    """The compressor alone (pre-projector) and with the MLP (post-projector), ours and official, per batch.

    One view of the first input; the coder's input is the tower's output, CLS token included.
    """
    inp = inputs[0]
    grid = spec.grid(inp)
    tokens = grid[0] * grid[1] + int(spec.vision_dims.cls_token)
    dim, hidden, dev, dtype = spec.mm_hidden, spec.lm_dims.hidden, opts.device, opts.dtype
    torch.manual_seed(0)
    mlp = nn.Sequential(*mlp_projector(dim, hidden, spec.projector_depth)).to(dev, dtype).eval()
    rows = []
    for batch in opts.batch_sizes:
        try:
            x = torch.randn(batch, tokens, dim, device=dev, dtype=dtype)
        except (RuntimeError, torch.OutOfMemoryError) as exc:
            if not is_oom(exc):
                raise
            rows.append({"batch": batch, "variant": "input", "boundary": "-", "status": OOM})
            continue
        vanilla = total(projector_flops(grid[0] * grid[1], dim, hidden, spec.projector_depth))
        with torch.no_grad():
            rows.append({"batch": batch, "variant": f"mlp{spec.projector_depth}x_gelu (no compressor)", "boundary": "post",
                         **measure_call(lambda: mlp(x[:, int(spec.vision_dims.cls_token):]), opts, vanilla * batch, vanilla * batch)})
        for alloc in allocations:
            rows += _boundary_rows(alloc, x, mlp, grid, dim, hidden, spec.projector_depth, batch, opts)
        logger.info("boundary: batch %d done", batch)
    return rows


def _boundary_rows(alloc, x, mlp, grid, dim, hidden, depth, batch, opts) -> list[dict[str, Any]]:
    coder = BracoCoder.from_config(dim, alloc).to(opts.device, opts.dtype).eval()
    params = dict(coder.named_parameters())
    mlp_k = total(projector_flops(alloc.output_tokens * batch, dim, hidden, depth))
    official = compressor_flops(alloc, dim, grid, "official", batch=batch)
    ours = compressor_flops(alloc, dim, grid, "ours", batch=batch)
    pre = {"official": (total(official), elementwise(official)), "ours": (total(ours), elementwise(ours))}
    post_fn = lambda t: mlp(coder(t))  # noqa: E731
    variants: list[tuple[str, str, Callable[[], Any]]] = [
        ("ours", "pre", lambda: coder(x)),
        ("ours", "post", lambda: post_fn(x)),
        ("official", "pre", lambda: official_forward(params, x, alloc)),
        ("official", "post", lambda: mlp(official_forward(params, x, alloc))),
    ]
    diffs: dict[str, float] = {}
    rows = []
    with torch.no_grad():
        if opts.fast != "none":
            eager_pre = coder(x)  # also builds the cached operator and embedding before tracing/capture
            fast_pre = make_fast(coder, opts.fast, opts.device, (x,), compile_mode=opts.compile_mode)
            fast_post = make_fast(post_fn, opts.fast, opts.device, (x,), compile_mode=opts.compile_mode)
            diffs = {"pre": check_close(eager_pre, fast_pre(x), f"{alloc.name} ours+{opts.fast} pre"),
                     "post": check_close(post_fn(x), fast_post(x), f"{alloc.name} ours+{opts.fast} post")}
            variants += [(f"ours+{opts.fast}", "pre", lambda: fast_pre(x)), (f"ours+{opts.fast}", "post", lambda: fast_post(x))]
        for name, boundary, fn in variants:
            flops, ew = pre[name.split("+")[0]]
            flops += mlp_k if boundary == "post" else 0
            row = {"batch": batch, "variant": f"{alloc.name} {name}", "allocation": alloc.name, "computation": name,
                   "boundary": boundary, **measure_call(fn, opts, flops, flops - ew, fast="+" in name)}
            if "+" in name:
                row["max_abs_diff"] = diffs[boundary]
            rows.append(row)
    return rows


def measure_pipeline(
    spec: PipelineSpec, inputs: tuple[InputSpec, ...], allocations: list[BracoConfig], acc: Accounting, opts: MeasureOptions
) -> list[dict[str, Any]]:
    """Prefill latency, peak memory and FLOPs of vanilla and each budget, per input and batch size."""
    from tqdm.auto import tqdm

    pipe = RandomPipeline(spec, opts, acc.lm_head)
    # What the measured run executes: every (capped) tower layer and our coder; the profiler does not count SDPA.
    profiled = Accounting(**{**acc.to_dict(), "count_attention": False, "vision_layers": "all", "computation": "ours"})
    variants = [None, *allocations]
    rows = []
    jobs = [(inp, batch, alloc) for inp in inputs for batch in opts.batch_sizes for alloc in variants]
    projectors = {allocation_label(a): braco_projector(spec, a, opts) for a in variants}
    for inp, batch, alloc in tqdm(jobs, desc="prefill", disable=None):
        label = allocation_label(alloc)
        cost = pipeline_cost(spec, inp, alloc, profiled, llm_layers=opts.llm_layers, vision_layers=opts.vision_layers, batch=batch)
        row: dict[str, Any] = {"input": inp.label, "batch": batch, "variant": label, "llm_tokens": cost.llm_tokens}
        try:
            row.update(_prefill_row(pipe, projectors[label], label, inp, batch, acc.prompt_tokens, opts, cost))
        except (RuntimeError, torch.OutOfMemoryError) as exc:
            if not is_oom(exc):
                raise
            if opts.device.type == "cuda":
                torch.cuda.empty_cache()
            row.update({"status": OOM, "analytic": cost.total, "analytic_matmul": cost.matmul})
        rows.append(row)
    return rows


def _prefill_row(pipe, projector, label, inp, batch, prompt_tokens, opts, cost) -> dict[str, Any]:
    pixels, text = pipe.inputs(batch, inp.image_size, inp.views, prompt_tokens)
    out: dict[str, Any] = {}
    with torch.no_grad():
        fn = lambda: pipe.prefill(projector, pixels, text)  # noqa: E731
        if opts.fast != "none":
            eager = fn()
            fast = make_fast(lambda p, t: pipe.prefill(projector, p, t), opts.fast, opts.device, (pixels, text),
                             compile_mode=opts.compile_mode)
            out["max_abs_diff"] = check_close(eager, fast(pixels, text), f"prefill {label} +{opts.fast}")
            del eager
            fn = lambda: fast(pixels, text)  # noqa: E731
        out.update(measure_call(fn, opts, cost.total, cost.matmul, fast=opts.fast != "none"))
    return out
