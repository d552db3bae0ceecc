"""Measured cost of any LLaVA-style pipeline: latency, peak memory and profiler FLOPs, one protocol for all.

- Latency: ``warmup`` untimed calls (default 20), then ``iters`` timed calls (100); median and standard
  deviation. CUDA: one pair of CUDA events per call; CPU: ``time.perf_counter``. Variants compared as a ratio
  (:func:`time_calls`) are timed in interleaved rounds.
- Peak memory of one call, above what was allocated before it (inputs, weights and cached constants excluded).
  CUDA: ``torch.cuda.max_memory_allocated``. CPU: :class:`LiveTensorBytes`, the peak of the bytes of live tensors
  created by ATen ops during the call (kernel-internal workspaces and allocator rounding are not seen; a compiled
  function runs eagerly under it, so for ``--fast compile`` on CPU it reports the eager peak).
- ``torch.profiler`` FLOPs (``with_flops``) next to the analytic count (:mod:`.flops`). The profiler counts
  ``mm``/``addmm``/``bmm``/``conv2d`` and ``add``/``mul``; it does not count SDPA attention.
- :class:`RandomPipeline`: a vision tower and an LLM of a :class:`~.presets.PipelineSpec`'s shape with **random
  weights** (latency does not depend on the values), for full-prefill timing; an out-of-memory call is ``OOM``.

Calls run under ``torch.no_grad()``, not ``inference_mode``: a reference implementation may cache tensors
process-wide, and inference tensors in such a cache would break later autograd use in the same process.
"""

from __future__ import annotations

import logging
import os
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .kineto import without_trace_markers
from .presets import PipelineSpec

__all__ = [
    "MeasureOptions", "LiveTensorBytes", "describe_device", "time_call", "time_calls", "peak_memory", "profiler_flops", "measure_call",
    "is_oom", "check_weights_fit", "model_classes", "with_layers", "RandomPipeline", "OOM", "VALUES_NOTE",
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


# -- device ----------------------------------------------------------------------------------------
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


def is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text or "can't allocate memory" in text


# -- timing, memory, profiler ------------------------------------------------------------------------
def time_call(fn: Callable[[], Any], device: torch.device, warmup: int, iters: int) -> dict[str, float]:
    """Median and standard deviation (ms) of ``iters`` timed calls after ``warmup`` untimed ones."""
    return time_calls([fn], device, warmup, iters)[0]


def time_calls(fns: Sequence[Callable[[], Any]], device: torch.device, warmup: int, iters: int) -> list[dict[str, float]]:
    """:func:`time_call` of several functions at once, their calls interleaved: ``warmup`` untimed rounds, then
    ``iters`` timed rounds of one call of each, so that a change of the machine's load during the run weighs on
    every function alike (what a ratio between them needs on a shared machine)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    _sync(device)
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(iters):
        for fn, times in zip(fns, samples):
            times.append(_timed(fn, device))
    return [{"median_ms": statistics.median(times), "std_ms": statistics.stdev(times) if len(times) > 1 else 0.0}
            for times in samples]


def _timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Milliseconds of one call: CUDA events on a GPU, ``time.perf_counter`` on a CPU."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


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
    with without_trace_markers(), torch.profiler.profile(activities=activities, with_flops=True) as prof:
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


def measure_call(fn: Callable[[], Any], opts: MeasureOptions, analytic: int, analytic_matmul: int, fast: bool = False,
                 timing: dict[str, float] | None = None) -> dict[str, Any]:
    """Latency, peak memory and profiler FLOPs of ``fn`` (or ``OOM``), next to the analytic FLOPs; ``timing``: its
    latency already measured (a :func:`time_calls` entry), so only memory and FLOPs are taken here."""
    counts = {"analytic": analytic, "analytic_matmul": analytic_matmul}
    try:
        row: dict[str, Any] = dict(timing) if timing is not None else time_call(fn, opts.device, opts.warmup, opts.iters)
        row.update(peak_memory(fn, opts.device))
        if fast and opts.device.type == "cpu":
            row["memory_method"] += " (compiled code runs eagerly under the account: this is the eager peak)"
        row.update(profiler_flops(fn, opts.device))
    except (RuntimeError, torch.OutOfMemoryError) as exc:
        if not is_oom(exc):
            raise
        if opts.device.type == "cuda":
            torch.cuda.empty_cache()
        return {"status": OOM, **counts}
    return {"status": "ok", **counts, **row}


# -- full pipeline with random weights ----------------------------------------------------------------
def with_layers(config: Any, layers: int | None) -> Any:
    """``config`` with ``num_hidden_layers`` capped at ``layers`` (unchanged for ``None`` or a cap at or above it)."""
    if layers is None or layers >= config.num_hidden_layers:
        return config
    values = config.to_dict()
    values["num_hidden_layers"] = layers
    values.pop("layer_types", None)  # Qwen2 derives it from the layer count
    return type(config)(**values)


def model_classes(spec: PipelineSpec) -> tuple[type, type]:
    """The transformers classes of ``spec``'s vision tower and LLM (CLIP or SigLIP; LLaMA or Qwen2)."""
    from transformers import CLIPVisionModel, LlamaForCausalLM, Qwen2ForCausalLM, SiglipVisionModel

    vision = CLIPVisionModel if spec.vision.model_type == "clip_vision_model" else SiglipVisionModel
    llm = Qwen2ForCausalLM if spec.llm.model_type == "qwen2" else LlamaForCausalLM
    return vision, llm


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_weights_fit(name: str, models: Any, opts: MeasureOptions) -> None:
    """Refuse, in one sentence, random weights of ``models`` (``(class, config)`` pairs) that would not fit the device.

    Raises:
        ValueError: When they need more than 90 % of the device's free memory.
    """
    with torch.device("meta"):
        need = sum(p.numel() for cls, config in models for p in cls(config).parameters())
    need *= torch.finfo(opts.dtype).bits // 8
    free = _free_bytes(opts.device)
    if need > 0.9 * free:
        raise ValueError(
            f"random {name} weights need {need / 2**30:.1f} GiB in {str(opts.dtype).removeprefix('torch.')} but {opts.device.type} has "
            f"{free / 2**30:.1f} GiB free; cap the LLM with --layers N"
        )


class RandomPipeline:
    """Vision tower + projector + LLM of ``spec``'s shape with random weights, for prefill timing."""

    def __init__(self, spec: PipelineSpec, opts: MeasureOptions, lm_head: str = "all") -> None:
        vision_cls, llm_cls = model_classes(spec)
        self.spec, self.opts = spec, opts
        self.vision_config = with_layers(spec.vision, opts.vision_layers)
        self.llm_config = with_layers(spec.llm, opts.llm_layers)
        check_weights_fit(spec.name, ((vision_cls, self.vision_config), (llm_cls, self.llm_config)), opts)
        torch.manual_seed(0)
        with torch.device(opts.device):
            self.vision = vision_cls._from_config(self.vision_config, dtype=opts.dtype, attn_implementation="sdpa").eval()
            self.llm = llm_cls._from_config(self.llm_config, dtype=opts.dtype, attn_implementation="sdpa").eval()
        self.logits_to_keep = 0 if lm_head == "all" else 1

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
