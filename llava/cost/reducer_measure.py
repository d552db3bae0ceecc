"""Measured LLM prefill with each in-LLM reducer against the same prefill without it (the cost command's ``--reducer NAME
--measure``).

What runs: ONE language model of the pipeline's shape with random weights (latency does not depend on the values),
capped at ``llm_layers`` decoder layers (``--layers``), carrying the reducer seam's hooks
(:func:`llava.model.reduction.install_hooks`) exactly as a loaded LLaVA model does after ``--reducer``. A reducer's
steps are built by :func:`llava.model.reducers.build_steps` against the pipeline's **whole** LLM (so a method whose
layers depend on the depth acts as it does there); each timed call makes the prompt's
:class:`~llava.model.reduction.ReductionState` (:func:`~llava.model.reduction.prompt_state`, as the LLaVA forward does
for every prompt) and runs the LLM with it. The call without a reducer is the same model on the same inputs with no
state: the hooks pass it through untouched, so it is the plain model.

Inputs: per prompt, ``visual`` image-token embeddings followed by ``text`` prompt-token embeddings (random); every
text token is an instruction token and the last one is the prompt's last token, as the analytic count
(:mod:`.reducer`) assumes. Timing, peak memory and profiler FLOPs follow :mod:`.measure` (:func:`~.measure.measure_call`);
the analytic figures are :func:`~.reducer.reducer_prefill` over the same timed layers.

A capped run times the first ``llm_layers`` layers of the reducer's real run on the whole LLM (later layers cannot change
earlier ones): steps at later layers do not run and are reported; a cap that stops before the first layer running on
fewer image tokens is refused (:func:`check_depth`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from llava.plugin_api import LMDims

from .measure import MeasureOptions, check_weights_fit, is_oom, measure_call, model_classes, time_calls, with_layers
from .presets import PipelineSpec
from .reducer import ReducerPrefill, reducer_prefill

__all__ = ["ReducerLLM", "ReducerPlan", "check_depth", "measure_reducers", "plan_reducer", "plan_reducers"]


class ReducerLLM:
    """The LLM of ``spec``'s shape (random weights, ``opts.llm_layers`` deep) with the reducer seam installed."""

    def __init__(self, spec: PipelineSpec, opts: MeasureOptions) -> None:
        from llava.model.reduction import install_hooks

        llm_cls = model_classes(spec)[1]
        self.opts, self.config = opts, with_layers(spec.llm, opts.llm_layers)
        check_weights_fit(spec.name, ((llm_cls, self.config),), opts)
        torch.manual_seed(0)
        with torch.device(opts.device):
            self.llm = llm_cls._from_config(self.config, dtype=opts.dtype, attn_implementation="sdpa").eval()
        self.hooks = install_hooks(self.llm.model.layers, self.llm.model.norm)

    def inputs(self, batch: int, visual: int, text: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(embeddings [B, visual + text, hidden], image-token mask [B, visual + text])``: the image, then the prompt."""
        dev = self.opts.device
        embeds = torch.randn(batch, visual + text, self.config.hidden_size, device=dev, dtype=self.opts.dtype) * 0.02
        mask = torch.zeros(batch, visual + text, dtype=torch.bool, device=dev)
        mask[:, :visual] = True
        return embeds, mask

    def prefill(self, embeds: torch.Tensor, visual: torch.Tensor, steps: Any = None, logits_to_keep: int = 0) -> Any:
        """One prefill (no KV cache): with ``steps`` (by layer, :func:`~llava.model.reducers.build_steps`) through the
        seam, else the plain model. Returns ``(logits, state)``; ``state`` is the prompt's
        :class:`~llava.model.reduction.ReductionState` after the call (``None`` without ``steps``)."""
        from llava.model.reduction import STATE_KEY, prompt_state

        state = None if steps is None else prompt_state(steps, visual, None)
        extra = {} if state is None else {STATE_KEY: state}
        with torch.no_grad():
            out = self.llm(inputs_embeds=embeds, use_cache=False, logits_to_keep=logits_to_keep, **extra)
        return out.logits, state


@dataclass(frozen=True)
class ReducerPlan:
    """One reducer, ready to time on one input: its steps by layer and its analytic counts over the timed layers.

    Attributes:
        analytic: FLOPs per prompt as the accounting says (attention scores counted or not).
        matmul: FLOPs per prompt without attention scores (what the profiler's matrix products can see).
        not_run: Layers of the reducer's steps beyond the timed layers.
    """

    name: str
    steps: dict[int, list[Any]]
    analytic: ReducerPrefill
    matmul: ReducerPrefill
    not_run: tuple[int, ...]


def check_depth(name: str, table: ReducerPrefill, visual: int, depth: int) -> None:
    """Refuse a cap of ``depth`` layers that stops before reducer ``name`` (its whole-LLM ``table``) drops anything.

    Raises:
        UserError: One sentence naming the reducer's first reduced layer and the ``--layers`` that reaches it.
    """
    from llava.utils import UserError

    first = next((row.layer for row in table.layers if row.visual != visual), None)
    if first is not None and first >= depth:
        raise UserError(f"reducer {name!r} first runs on fewer image tokens at decoder layer {first}, which --layers {depth} "
                        f"does not reach; pass --layers {first + 1} or more")


def plan_reducer(name: str, config: Any, visual: int, text: int, depth: int, *, count_attention: bool,
                 lm_head: str) -> ReducerPlan:
    """Steps and analytic counts of reducer ``name`` on the LLM of ``config`` (whole) timed over its first ``depth`` layers.

    Raises:
        UserError: For an unknown reducer, a layer the LLM lacks, or a ``depth`` that stops before the first reduction.
    """
    from llava.model.reducers import build_steps

    lm = LMDims.from_config(config)
    check_depth(name, reducer_prefill(name, lm, visual, text), visual, depth)
    steps = build_steps(name, config)
    analytic = reducer_prefill(name, lm, visual, text, count_attention=count_attention, lm_head=lm_head, depth=depth)
    matmul = reducer_prefill(name, lm, visual, text, lm_head=lm_head, depth=depth)
    return ReducerPlan(name, steps, analytic, matmul, tuple(layer for layer in steps if layer >= depth))


def _ratio(with_row: dict[str, Any], without_row: dict[str, Any]) -> float | None:
    if with_row["status"] != "ok" or without_row["status"] != "ok":
        return None
    return with_row["median_ms"] / without_row["median_ms"]


def plan_reducers(spec: PipelineSpec, names: list[str], opts: MeasureOptions, text: int, inputs: Any, *,
                  count_attention: bool = False, lm_head: str = "all") -> dict[tuple[str, str], ReducerPlan]:
    """:func:`plan_reducer` of every reducer for every input (``{(input label, name): plan}``), timed over
    ``opts.llm_layers`` (all when ``None``); nothing is built, so a refusal costs nothing.

    Raises:
        UserError: For an unknown reducer, or a cap that stops before a reducer's first reduction.
    """
    layers = spec.llm.num_hidden_layers
    depth = min(opts.llm_layers or layers, layers)
    return {(inp.label, name): plan_reducer(name, spec.llm, int(inp.label), text, depth, count_attention=count_attention,
                                            lm_head=lm_head) for inp in inputs for name in names}


def measure_reducers(spec: PipelineSpec, plans: dict[tuple[str, str], ReducerPlan], opts: MeasureOptions, text: int,
                     inputs: Any, *, lm_head: str = "all") -> list[dict[str, Any]]:
    """Each planned reducer's measured prefill next to the same prefill without it, per input and batch size, on one
    model (:class:`ReducerLLM`).

    Per input and batch size, the plain prefill and each reducer's are timed on the same inputs in interleaved rounds
    (:func:`~.measure.time_calls`: one call of each per round, so a change of the machine's load weighs on all alike),
    then each gets its peak-memory and profiler call. A row holds
    ``with`` and ``without`` (:func:`~.measure.measure_call` rows: ``analytic`` = the accounting's FLOPs,
    ``analytic_matmul`` = those without attention scores, both for the whole batch), ``measured_ratio`` (median with /
    median without, ``None`` after an OOM), ``analytic_ratio``, the timed layers and the reducer's steps not run.

    Raises:
        ValueError: When the random weights do not fit the device (one sentence naming ``--layers``).
    """
    model = ReducerLLM(spec, opts)
    keep = 0 if lm_head == "all" else 1
    rows = []
    for inp in inputs:
        mine = [plan for (label, _), plan in plans.items() if label == inp.label]
        for batch in opts.batch_sizes:
            embeds, visual = model.inputs(batch, int(inp.label), text)
            calls = [functools.partial(model.prefill, embeds, visual, steps, keep) for steps in [None, *(p.steps for p in mine)]]
            timings = _interleaved(calls, opts)
            without = measure_call(calls[0], opts, batch * mine[0].analytic.baseline, batch * mine[0].matmul.baseline,
                                   timing=timings[0])
            for plan, call, timing in zip(mine, calls[1:], timings[1:]):
                with_row = measure_call(call, opts, batch * plan.analytic.total, batch * plan.matmul.total, timing=timing)
                rows.append({
                    "input": inp.label, "batch": batch, "reducer": plan.name, "method": plan.analytic.method,
                    "with": with_row, "without": without, "measured_ratio": _ratio(with_row, without),
                    "analytic_ratio": plan.analytic.total / plan.analytic.baseline,
                    "timed_layers": len(plan.analytic.layers), "not_run_layers": list(plan.not_run),
                    "per_layer": plan.analytic.per_layer,
                })
    return rows


def _interleaved(calls: list[Any], opts: MeasureOptions) -> list[dict[str, float] | None]:
    """:func:`~.measure.time_calls` of ``calls`` (the plain prefill, then each reducer's) in interleaved rounds; after
    an out-of-memory error, ``None`` for each (:func:`~.measure.measure_call` then times each alone, or says OOM)."""
    try:
        return time_calls(calls, opts.device, opts.warmup, opts.iters)
    except (RuntimeError, torch.OutOfMemoryError) as exc:
        if not is_oom(exc):
            raise
        if opts.device.type == "cuda":
            torch.cuda.empty_cache()
        return [None] * len(calls)
