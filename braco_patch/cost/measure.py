"""Measured cost (``braco cost --measure``): the paper's protocol (App. "Hardware scaling and measurement protocol").

- Latency: ``warmup`` untimed calls (20), then ``iters`` timed calls (100); median and standard deviation.
  CUDA: one pair of CUDA events per call; CPU: ``time.perf_counter``.
- Peak memory at the compressor boundary, above what was allocated before the call (inputs, weights and
  cached constants excluded). CUDA: ``torch.cuda.max_memory_allocated``. CPU: :class:`LiveTensorBytes`, the
  peak of the bytes of live tensors created by ATen ops during the call (kernel-internal workspaces and
  allocator rounding are not seen; a compiled function runs eagerly under it, so for ``--fast compile`` on
  CPU it reports the eager peak).
- ``torch.profiler`` FLOPs (``with_flops``) next to the analytic count (:mod:`.flops`). The profiler counts
  ``mm``/``addmm``/``bmm``/``conv2d`` and ``add``/``mul``; it does not count SDPA attention.
- Full-pipeline prefill of vanilla vs each budget, with **random weights of the preset's shape** (latency does
  not depend on the values), for each batch size; an out-of-memory batch is reported as ``OOM``.

Calls run under ``torch.no_grad()``, not ``inference_mode``: the official reference caches its DCT matrices
process-wide, and inference tensors in that cache would break later autograd use in the same process.
"""

from __future__ import annotations

import logging
import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ..coder import BracoCoder
from ..config import BracoConfig
from ..reference import official_forward
from .fast import check_close, make_fast
from .flops import compressor_flops, elementwise, projector_flops, total
from .pipeline import Accounting, allocation_label, pipeline_cost
from .presets import InputSpec, PipelineSpec

__all__ = [
    "MeasureOptions", "LiveTensorBytes", "resolve_device", "resolve_dtype", "describe_device", "time_call",
    "peak_memory", "profiler_flops", "measure_boundary", "measure_pipeline", "RandomPipeline", "OOM",
]

logger = logging.getLogger(__name__)

OOM = "OOM"
VALUES_NOTE = "random weights of the preset's shape: latency does not depend on the weight values"
_MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::conv1d", "aten::conv2d", "aten::convolution", "aten::_convolution"}


@dataclass(frozen=True)
class MeasureOptions:
    device: torch.device
    dtype: torch.dtype
    warmup: int = 20
    iters: int = 100
    batch_sizes: tuple[int, ...] = (1,)
    llm_layers: int | None = None
    vision_layers: int | None = None
    fast: str = "none"
    compile_mode: str | None = None


# -- device and dtype --------------------------------------------------------------------------------
def resolve_device(name: str | None) -> torch.device:
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {name!r}; expected 'cpu' or 'cuda'")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device cuda needs a GPU and a CUDA build of PyTorch; this machine has none (torch {torch.__version__})")
    return torch.device(name)


def resolve_dtype(name: str | None, device: torch.device) -> torch.dtype:
    """``None``: float16 on CUDA (the paper's), float32 on CPU."""
    if name is None:
        return torch.float16 if device.type == "cuda" else torch.float32
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if name not in dtypes:
        raise ValueError(f"unknown dtype {name!r}; expected one of {list(dtypes)}")
    return dtypes[name]


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model}, {torch.get_num_threads()} threads"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text or "can't allocate memory" in text


# -- timing, memory, profiler ------------------------------------------------------------------------
def time_call(fn: Callable[[], Any], device: torch.device, warmup: int, iters: int) -> dict[str, float]:
    """Median and standard deviation (ms) of ``iters`` timed calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    _sync(device)
    samples = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(samples), "std_ms": statistics.stdev(samples) if len(samples) > 1 else 0.0}


class LiveTensorBytes(TorchDispatchMode):
    """Peak bytes of live tensor storages created by ATen ops while the mode is active.

    An op output whose storage is also an input's (views, in-place ops) is not new; a storage leaves the
    account when its last reference dies. Storages that existed before (inputs, weights) never enter it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = 0
        self.peak = 0

    def _collect(self) -> None:
        for key in [k for k, (ref, _) in self._live.items() if ref.expired()]:
            self.current -= self._live.pop(key)[1]

    def __exit__(self, *exc_info):
        self._collect()  # storages freed after the last op
        return super().__exit__(*exc_info)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._collect()
        seen = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if storage.nbytes() == 0 or key in seen or key in self._live:
                continue
            self._live[key] = (StorageWeakRef(storage), storage.nbytes())
            self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        return out


def peak_memory(fn: Callable[[], Any], device: torch.device) -> dict[str, Any]:
    """Peak bytes allocated by one call, above the allocation before it (see the module docstring)."""
    if device.type == "cuda":
        _sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        out = fn()
        _sync(device)
        peak = torch.cuda.max_memory_allocated(device) - base
        del out
        return {"peak_bytes": peak, "memory_method": "torch.cuda.max_memory_allocated minus allocated before the call"}
    with LiveTensorBytes() as tracker:
        out = fn()
    del out
    return {"peak_bytes": tracker.peak, "memory_method": "peak live bytes of tensors created by ATen ops during the call"}


def profiler_flops(fn: Callable[[], Any], device: torch.device) -> dict[str, int]:
    """``torch.profiler`` FLOPs of one call: matrix products, and everything it counts (adds ``add``/``mul``)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, with_flops=True) as prof:
        fn()
        _sync(device)
    matmul = other = 0
    for event in prof.key_averages():
        if event.flops:
            if event.key in _MATMUL_OPS:
                matmul += int(event.flops)
            else:
                other += int(event.flops)
    return {"profiler_matmul": matmul, "profiler_total": matmul + other}


def _measure(fn: Callable[[], Any], opts: MeasureOptions, analytic: int, analytic_matmul: int, fast: bool = False) -> dict[str, Any]:
    """Latency, peak memory and profiler FLOPs of ``fn`` (or ``OOM``), next to the analytic FLOPs."""
    counts = {"analytic": analytic, "analytic_matmul": analytic_matmul}
    try:
        row: dict[str, Any] = time_call(fn, opts.device, opts.warmup, opts.iters)
        row.update(peak_memory(fn, opts.device))
        if fast and opts.device.type == "cpu":
            row["memory_method"] += " (compiled code runs eagerly under the account: this is the eager peak)"
        row.update(profiler_flops(fn, opts.device))
    except (RuntimeError, torch.OutOfMemoryError) as exc:
        if not _is_oom(exc):
            raise
        if opts.device.type == "cuda":
            torch.cuda.empty_cache()
        return {"status": OOM, **counts}
    return {"status": "ok", **counts, **row}


def _mlp(dim: int, hidden: int, depth: int) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(dim, hidden)]
    for _ in range(depth - 1):
        layers += [nn.GELU(), nn.Linear(hidden, hidden)]
    return nn.Sequential(*layers)


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
    mlp = _mlp(dim, hidden, spec.projector_depth).to(dev, dtype).eval()
    rows = []
    for batch in opts.batch_sizes:
        try:
            x = torch.randn(batch, tokens, dim, device=dev, dtype=dtype)
        except (RuntimeError, torch.OutOfMemoryError) as exc:
            if not _is_oom(exc):
                raise
            rows.append({"batch": batch, "variant": "input", "boundary": "-", "status": OOM})
            continue
        vanilla = total(projector_flops(grid[0] * grid[1], dim, hidden, spec.projector_depth))
        with torch.no_grad():
            rows.append({"batch": batch, "variant": f"mlp{spec.projector_depth}x_gelu (no compressor)", "boundary": "post",
                         **_measure(lambda: mlp(x[:, int(spec.vision_dims.cls_token):]), opts, vanilla * batch, vanilla * batch)})
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
                   "boundary": boundary, **_measure(fn, opts, flops, flops - ew, fast="+" in name)}
            if "+" in name:
                row["max_abs_diff"] = diffs[boundary]
            rows.append(row)
    return rows


# -- full pipeline -----------------------------------------------------------------------------------
def _with_layers(config: Any, layers: int | None) -> Any:
    if layers is None or layers >= config.num_hidden_layers:
        return config
    values = config.to_dict()
    values["num_hidden_layers"] = layers
    values.pop("layer_types", None)  # Qwen2 derives it from the layer count
    return type(config)(**values)


def _model_classes(spec: PipelineSpec):
    from transformers import CLIPVisionModel, LlamaForCausalLM, Qwen2ForCausalLM, SiglipVisionModel

    vision = CLIPVisionModel if spec.vision.model_type == "clip_vision_model" else SiglipVisionModel
    llm = Qwen2ForCausalLM if spec.llm.model_type == "qwen2" else LlamaForCausalLM
    return vision, llm


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class RandomPipeline:
    """Vision tower + projector + LLM of ``spec``'s shape with random weights, for prefill timing."""

    def __init__(self, spec: PipelineSpec, opts: MeasureOptions, lm_head: str = "all") -> None:
        vision_cls, llm_cls = _model_classes(spec)
        self.spec, self.opts = spec, opts
        self.vision_config = _with_layers(spec.vision, opts.vision_layers)
        self.llm_config = _with_layers(spec.llm, opts.llm_layers)
        with torch.device("meta"):
            need = sum(p.numel() for m in (vision_cls(self.vision_config), llm_cls(self.llm_config)) for p in m.parameters())
        need *= torch.finfo(opts.dtype).bits // 8
        free = _free_bytes(opts.device)
        if need > 0.9 * free:
            raise ValueError(
                f"random {spec.name} weights need {need / 2**30:.1f} GiB in {str(opts.dtype).removeprefix('torch.')} but {opts.device.type} has "
                f"{free / 2**30:.1f} GiB free; cap the LLM with --layers N"
            )
        torch.manual_seed(0)
        with torch.device(opts.device):
            self.vision = vision_cls._from_config(self.vision_config, dtype=opts.dtype, attn_implementation="sdpa").eval()
            self.llm = llm_cls._from_config(self.llm_config, dtype=opts.dtype, attn_implementation="sdpa").eval()
        self.logits_to_keep = 0 if lm_head == "all" else 1

    def projector(self, alloc: BracoConfig | None) -> nn.Module:
        spec, opts = self.spec, self.opts
        mlp = _mlp(spec.mm_hidden, spec.lm_dims.hidden, spec.projector_depth)
        module = mlp if alloc is None else nn.Sequential(BracoCoder.from_config(spec.mm_hidden, alloc), *mlp)
        return module.to(opts.device, opts.dtype).eval()

    def inputs(self, batch: int, image_size: int, views: int, prompt_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        dev, dtype = self.opts.device, self.opts.dtype
        pixels = torch.randn(batch * views, 3, image_size, image_size, device=dev, dtype=dtype)
        text = torch.randn(batch, prompt_tokens, self.llm_config.hidden_size, device=dev, dtype=dtype) * 0.02
        return pixels, text

    def prefill(self, projector: nn.Module, pixels: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Tower → ``hidden_states[select_layer]`` (CLS dropped) → projector per view → LLM prefill → logits."""
        hidden = self.vision(pixel_values=pixels, output_hidden_states=True).hidden_states[self.spec.select_layer]
        if self.spec.vision_dims.cls_token:
            hidden = hidden[:, 1:]
        visual = projector(hidden)
        visual = visual.reshape(text.shape[0], -1, visual.shape[-1])
        embeds = torch.cat([text, visual], dim=1)
        # KV-cache writes are left out of the timed call (a copy, < 1 % of prefill time); use_cache=False keeps
        # the call free of Python-side cache objects so it can be compiled or captured.
        return self.llm(inputs_embeds=embeds, use_cache=False, logits_to_keep=self.logits_to_keep).logits


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
    projectors = {allocation_label(a): pipe.projector(a) for a in variants}
    for inp, batch, alloc in tqdm(jobs, desc="prefill", disable=None):
        label = allocation_label(alloc)
        cost = pipeline_cost(spec, inp, alloc, profiled, llm_layers=opts.llm_layers, vision_layers=opts.vision_layers, batch=batch)
        row: dict[str, Any] = {"input": inp.label, "batch": batch, "variant": label, "llm_tokens": cost.llm_tokens}
        try:
            row.update(_prefill_row(pipe, projectors[label], label, inp, batch, acc.prompt_tokens, opts, cost))
        except (RuntimeError, torch.OutOfMemoryError) as exc:
            if not _is_oom(exc):
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
        out.update(_measure(fn, opts, cost.total, cost.matmul, fast=opts.fast != "none"))
    return out
