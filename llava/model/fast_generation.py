"""The fast generation path of a loaded LLaVA model: what ``--fast compile|cudagraph`` switches on.

:func:`enable_fast_path` attaches a :class:`FastGeneration` to the model; from then on
:meth:`LlavaMetaForCausalLM.generate <llava.model.llava_arch.LlavaMetaForCausalLM.generate>` runs every call it
can through it:

- the **vision tower and projector**, for a projector whose token count is fixed (its plugin's
  ``tokens_depend_on_image`` is false) and that reads no text (``ModelNeeds.text`` unset), are captured per pixel
  shape; other projectors (adaptive token counts, a pass of the LLM over the question) run eagerly, said once;
- the **LLM prefill and every decoding step** run on a static cache in prompt-length buckets
  (:mod:`llava.model.fast_decode`), captured.

``cudagraph`` captures the eager steps into CUDA graphs (one shared memory pool); ``compile`` compiles them with
``torch.compile`` (on CUDA, the compiled steps are then captured too). Calls the fast path cannot run exactly as
transformers would (beam search, penalties, a logits processor, a streamer or stop checks with more than one row,
a sliding window shorter than the cache) go to the eager path, and the first of each kind says why in one log
line. One call runs at a time per model (a lock), so concurrent requests to the worker take turns on the static
state.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from .decode_plan import DecodePlan, decode_plan
from .fast_decode import Capture, CaptureFailed, StaticDecoder, cache_length
from .static_cache import MASK_KINDS

logger = logging.getLogger(__name__)

#: Attribute of a model that holds its :class:`FastGeneration`.
ATTRIBUTE = "_llava_fast_generation"
#: Environment variable naming the ``torch.compile`` backend of ``--fast compile`` (default ``inductor``); the test
#: suite sets ``aot_eager`` for most tests (the same tracing, no kernel compilation).
COMPILE_BACKEND_VARIABLE = "LLAVA_FAST_COMPILE_BACKEND"
#: Captured image encoders kept per model (one per pixel shape).
MAX_IMAGE_SHAPES = 4
#: The image encoder of the call running in this thread (``LlavaMetaForCausalLM.encode_images`` reads it).
CAPTURED_IMAGES: contextvars.ContextVar[Callable[[torch.Tensor], torch.Tensor] | None] = contextvars.ContextVar(
    "llava_captured_images", default=None)


def enable_fast_path(model: Any, mode: str, *, capture: Capture | None = None) -> FastGeneration | None:
    """Switch ``model``'s generation to the fast path ``mode`` (``none`` switches it off).

    ``capture`` replaces ``mode``'s way of making a step fast (:func:`make_capture`), e.g. a test's plain call.

    Returns:
        The :class:`FastGeneration`, or ``None`` when ``mode`` is ``none`` or the model cannot take it (a model
        that is not a LLaVA model, a quantized one, an attention implementation that takes no 4-D mask), which is
        logged in one line that says why.
    """
    setattr(model, ATTRIBUTE, None)
    if mode == "none":
        return None
    why = _refusal(model)
    if why is not None:
        logger.warning("--fast %s: %s, so it generates eagerly", mode, why)
        return None
    fast = FastGeneration(model, mode, capture=capture)
    setattr(model, ATTRIBUTE, fast)
    return fast


def fast_path(model: Any) -> FastGeneration | None:
    """The model's :class:`FastGeneration`, or ``None``."""
    return getattr(model, ATTRIBUTE, None)


#: Why a model with an in-LLM reducer generates eagerly.
REDUCER_REFUSAL = "an in-LLM reducer (--reducer) shortens the sequence inside the LLM, which the static KV cache cannot hold"


def _refusal(model: Any) -> str | None:
    if not hasattr(model, "prepare_inputs_labels_for_multimodal"):
        return f"{type(model).__name__} is not a LLaVA model"
    if getattr(model.config, "quantization_config", None) is not None:
        return "the model is quantized (8-bit or 4-bit weights)"
    if getattr(model, "reducers_active", lambda: False)():
        return REDUCER_REFUSAL
    implementation = getattr(model.config, "_attn_implementation", None) or "eager"
    if implementation not in MASK_KINDS:
        return f"its attention implementation {implementation!r} takes no 4-D mask (use sdpa or eager)"
    return None


def make_capture(mode: str, device: torch.device) -> Capture:
    """``capture(fn)`` for ``mode``: a CUDA graph of ``fn`` (``cudagraph``), or ``torch.compile(fn)`` run once
    (``compile``; on CUDA its compiled kernels are then captured too). Every graph shares one memory pool, so the
    captures of a model cost the memory of the largest, not the sum."""
    from llava.capture import CudaGraphCall

    pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None

    def capture(fn: Callable[..., Any], *example: torch.Tensor) -> Callable[..., Any]:
        # The runs below draw random numbers (a sampling step does): the caller's generators get their state back,
        # so that a seeded call that captures samples as the same call replaying.
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type):
            return _capture(fn, example)

    def _capture(fn: Callable[..., Any], example: tuple[torch.Tensor, ...]) -> Callable[..., Any]:
        # Once eagerly first: what a model builds on its first call (transformers' output-recording hooks, installed
        # under a lock that torch.compile cannot trace; a compressor's cached operators) exists before tracing.
        fn(*example)
        if mode == "compile":
            # fullgraph: a graph break is an error (the call then generates eagerly, said once), never a half-compiled step
            fn = torch.compile(fn, dynamic=None, fullgraph=True, backend=os.environ.get(COMPILE_BACKEND_VARIABLE) or "inductor")
            if device.type != "cuda":
                return _compiled_call(fn, example)
        return CudaGraphCall(fn, example, pool=pool)

    return capture


def _compiled_call(compiled: Callable[..., Any], example: tuple[torch.Tensor, ...]) -> Callable[..., Any]:
    """``compiled(*args)`` run on fixed copies of the inputs (as a CUDA graph replay is), compiled now on ``example``,
    and called with dynamo's guards evaluated only where they tell its compiled versions apart.

    Every call passes the same tensors (the state's, updated in place; the copies of the inputs), so the guards
    checked when it was compiled (one per parameter, buffer and config attribute of the model) would pass again:
    checking them costs more than the step of a small model. ``torch.compiler.set_stance(skip_guard_eval_unsafe=
    True)`` (torch >= 2.6) skips them; should dynamo still find that it must compile again, the call is repeated
    with the guards checked.
    """
    inputs = tuple(tensor.clone() for tensor in example)
    compiled(*inputs)  # compiles now, before a call's state is loaded
    set_stance = getattr(torch.compiler, "set_stance", None)
    fast_guards = set_stance is not None and "skip_guard_eval_unsafe" in inspect.signature(set_stance).parameters

    def call(*args: torch.Tensor) -> Any:
        for target, source in zip(inputs, args):
            target.copy_(source)
        if fast_guards:
            try:
                with set_stance(skip_guard_eval_unsafe=True):
                    return compiled(*inputs)
            except RuntimeError as error:  # raised before the step runs: compile again, with every guard checked
                if "skip_guard_eval_unsafe" not in str(error):
                    raise
        return compiled(*inputs)

    return call


class FastGeneration:
    """A model's fast path (see the module docstring).

    Args:
        model: A LLaVA causal LM, in eval mode.
        mode: ``compile`` or ``cudagraph``.
        capture: Replaces :func:`make_capture`'s.
    """

    def __init__(self, model: Any, mode: str, *, capture: Capture | None = None) -> None:
        from .multimodal_projector.plugins import projector_needs, tokens_depend_on_image

        self.mode, self.device = mode, model.device
        self.capture = capture or make_capture(mode, self.device)
        self.decoder = StaticDecoder(model, MASK_KINDS[getattr(model.config, "_attn_implementation", None) or "eager"],
                                     self.capture)
        self.lock = threading.Lock()
        self.window = _sliding_window(model.config)
        self.said: set[str] = set()
        self.broken: str | None = None
        projector = getattr(model.get_model(), "mm_projector", None)
        self.images: CapturedImages | None = None
        if projector is not None:
            if tokens_depend_on_image(model.config):
                self._say("the projector's token count depends on the image, so the vision tower and projector run "
                          "eagerly (the language model is still captured)")
            elif projector_needs(projector).prompt:
                self._say("the projector reads the question through the language model, so the vision tower and "
                          "projector run eagerly (the language model is still captured)")
            else:
                self.images = CapturedImages(model, self.capture)

    def _say(self, why: str) -> None:
        """Log ``why`` once per model."""
        if why not in self.said:
            self.said.add(why)
            logger.info("--fast %s: %s", self.mode, why)

    @contextmanager
    def call(self, options: Mapping[str, Any]) -> Iterator[FastCall | None]:
        """One ``generate`` call: a :class:`FastCall` holding the model's lock (with the captured image encoder in
        force in this thread), or ``None`` when the call goes to the eager path (the first time for each reason,
        logged)."""
        plan, why = decode_plan(self.model_generation_config, options) if self.broken is None else (None, self.broken)
        if plan is not None and self.decoder.model.reducers_active():  # a reducer set after --fast was applied
            plan, why = None, REDUCER_REFUSAL
        if plan is None:
            self._say(f"{why} is not on the fast path; such calls generate eagerly")
            yield None
            return
        # Inference mode throughout, whatever the caller's grad mode: the static state is made and updated in it.
        with self.lock, torch.inference_mode():
            token = CAPTURED_IMAGES.set(self.images.encode if self.images is not None else None)
            try:
                yield FastCall(self, plan)
            finally:
                CAPTURED_IMAGES.reset(token)

    @property
    def model_generation_config(self) -> Any:
        return self.decoder.model.generation_config


class FastCall:
    """One fast ``generate`` call (from :meth:`FastGeneration.call`)."""

    def __init__(self, owner: FastGeneration, plan: DecodePlan) -> None:
        self.owner, self.plan = owner, plan

    def decode(self, embeds: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None) -> torch.Tensor | None:
        """The new tokens, or ``None`` when this call needs the eager path after all (logged once per reason)."""
        owner, plan = self.owner, self.plan
        if plan.watches and embeds.shape[0] > 1:
            owner._say("a streamer or stopping criteria with more than one prompt is not on the fast path")
            return None
        needed = cache_length(embeds.shape[1] + plan.max_new_tokens, owner.decoder.model_max)
        if owner.window is not None and needed > owner.window:
            owner._say(f"a sliding attention window ({owner.window}) shorter than the cache ({needed}) is not on the fast path")
            return None
        try:
            return owner.decoder.decode(embeds, mask, positions, plan)
        except CaptureFailed as error:
            owner.broken = f"capturing failed ({error})"
            logger.warning("--fast %s: %s; this model generates eagerly from now on", owner.mode, owner.broken)
            return None


class CapturedImages:
    """The vision tower and projector of a fixed-count projector, captured per pixel shape."""

    def __init__(self, model: Any, capture: Callable[..., Any]) -> None:
        self.model, self.capture = model, capture
        self.runs: OrderedDict[tuple[int, ...], Callable[..., torch.Tensor]] = OrderedDict()
        self.failed = False

    def encode(self, pixels: torch.Tensor) -> torch.Tensor | None:
        """``[N, K, hidden]`` for ``[N, 3, H, W]`` pixels (a copy, so a later replay cannot change it), or ``None``
        when this encoder cannot capture (the caller encodes eagerly)."""
        if self.failed:
            return None
        key = (*pixels.shape, pixels.dtype)
        if key not in self.runs:
            try:
                self.runs[key] = self.capture(self._eager, pixels)
            except Exception as error:  # noqa: BLE001 - any capture failure means: encode eagerly, said once
                self.failed = True
                first_line = (str(error).strip().splitlines() or [""])[0]
                logger.warning("the vision tower and projector could not be captured (%s: %s); they run eagerly",
                               type(error).__name__, first_line)
                return None
            if len(self.runs) > MAX_IMAGE_SHAPES:
                self.runs.popitem(last=False)
        self.runs.move_to_end(key)
        return self.runs[key](pixels).clone()

    def _eager(self, pixels: torch.Tensor) -> torch.Tensor:
        from .image_encoding import encode_images

        model = self.model
        return encode_images(model.get_vision_tower(), model.get_model().mm_projector, pixels, model.config, text=None,
                             run_language_model=None)


def _sliding_window(config: Any) -> int | None:
    """The sliding attention window some layer of the LLM uses, or ``None``."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if window is None or (layer_types is not None and "sliding_attention" not in layer_types):
        return None
    if layer_types is None and getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)


__all__ = ["ATTRIBUTE", "CAPTURED_IMAGES", "CaptureFailed", "FastCall", "FastGeneration", "enable_fast_path", "fast_path",
           "make_capture"]
