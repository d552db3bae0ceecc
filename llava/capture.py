"""Selectable fast paths for a compressor or a whole prefill (``--fast none|compile|cudagraph``).

- ``none``: eager PyTorch.
- ``compile``: ``torch.compile``; mode ``max-autotune-no-cudagraphs`` on CPU, ``reduce-overhead`` (inductor
  kernels replayed through CUDA graphs) on CUDA.
- ``cudagraph``: the eager function captured once into a ``torch.cuda.CUDAGraph`` and replayed (CUDA only).
  The call copies its inputs into the captured buffers and returns the captured output buffer, which the
  next call overwrites (clone it to keep it).

Both rely on the function doing no host reads (no ``.item()``; DESIGN "Numerics"). :func:`check_close` is the
"numerically equal to eager" gate: the cost measurements run it before timing a fast path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # torch is imported where it runs, so that the CLI can name FAST_MODES in its --help cheaply
    import torch

__all__ = ["FAST_MODES", "COMPILE_MODES", "TOLERANCES", "make_fast", "CudaGraphCall", "check_close"]

FAST_MODES = ("none", "compile", "cudagraph")

#: ``torch.compile`` mode per device type.
COMPILE_MODES = {"cpu": "max-autotune-no-cudagraphs", "cuda": "reduce-overhead"}

#: (rtol, atol) for fast-vs-eager equality, per dtype name; scaled by the eager output's largest magnitude.
TOLERANCES = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}


def make_fast(
    fn: Callable[..., Any],
    mode: str,
    device: torch.device | str,
    example_args: tuple[torch.Tensor, ...] | None = None,
    *,
    compile_mode: str | None = None,
) -> Callable[..., Any]:
    """Return ``fn`` (``none``), ``torch.compile(fn)`` (``compile``) or a CUDA-graph replay of it (``cudagraph``).

    Args:
        fn: a function of tensors (a module or a closure), already warmed up in eager mode so that caches
            (the coder's operators and embedding) exist before tracing or capture.
        device: where ``fn`` runs; picks the compile mode and gates ``cudagraph``.
        example_args: inputs to capture with (``cudagraph`` only).
        compile_mode: overrides :data:`COMPILE_MODES`.
    """
    import torch

    device = torch.device(device)
    if mode == "none":
        return fn
    if mode == "compile":
        return torch.compile(fn, mode=compile_mode or COMPILE_MODES.get(device.type, "default"), dynamic=False)
    if mode == "cudagraph":
        if device.type != "cuda" or not torch.cuda.is_available():
            raise ValueError(f"--fast cudagraph needs a CUDA device, got {device.type!r}; use --fast compile or none")
        if example_args is None:
            raise ValueError("--fast cudagraph needs example inputs to capture with")
        return CudaGraphCall(fn, example_args)
    raise ValueError(f"unknown fast path {mode!r}; expected one of {list(FAST_MODES)}")


class CudaGraphCall:
    """``fn(*args)`` captured into one CUDA graph on static copies of ``example_args``."""

    def __init__(self, fn: Callable[..., Any], example_args: tuple[torch.Tensor, ...], warmup: int = 3, *,
                 pool: Any = None) -> None:
        """``pool``: a ``torch.cuda.graph_pool_handle()`` shared with other graphs that never replay at the same time
        (each graph's intermediate tensors then reuse one pool)."""
        import torch

        self.static_args = tuple(a.clone() for a in example_args)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up off the capture stream, as torch.cuda.graphs documents
            for _ in range(warmup):
                fn(*self.static_args)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: eager CUDA work of other threads (a server's other requests) may go on during a capture
            with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
                self.static_out = fn(*self.static_args)
        except RuntimeError as exc:
            raise RuntimeError(f"CUDA graph capture failed ({exc}); use --fast compile or none") from exc

    def __call__(self, *args: torch.Tensor) -> Any:
        if len(args) != len(self.static_args):
            raise ValueError(f"expected {len(self.static_args)} inputs (as captured), got {len(args)}")
        for dst, src in zip(self.static_args, args):
            if src.shape != dst.shape:
                raise ValueError(f"CUDA graph was captured for input shape {tuple(dst.shape)}, got {tuple(src.shape)}")
            if src.data_ptr() != dst.data_ptr():
                dst.copy_(src)
        self.graph.replay()
        return self.static_out


def check_close(reference: torch.Tensor, candidate: torch.Tensor, what: str = "fast path") -> float:
    """Max abs difference of ``candidate`` from ``reference``; ``RuntimeError`` beyond :data:`TOLERANCES`."""
    if reference.shape != candidate.shape:
        raise RuntimeError(f"{what}: output shape {tuple(candidate.shape)} differs from eager {tuple(reference.shape)}")
    rtol, atol = TOLERANCES.get(str(reference.dtype).removeprefix("torch."), (1e-4, 1e-4))
    ref, cand = reference.float(), candidate.float()
    diff = float((ref - cand).abs().max()) if ref.numel() else 0.0
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    if not diff <= atol + rtol * scale:
        raise RuntimeError(f"{what}: max |difference| {diff:.3g} from eager exceeds {atol + rtol * scale:.3g} ({reference.dtype})")
    return diff
