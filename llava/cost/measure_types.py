"""Measured latency, peak memory and profiler FLOPs of any projector type, as a checkpoint builds it.

The projector is built exactly as a checkpoint builds it (``build_vision_projector`` on a config with the
preset's widths), with random weights, and called as ``encode_images`` calls it: ``projector(features)``, or
``projector(features, CompressorInputs)`` when its plugin needs more. What it needs is made up at the preset's
shape: tower layers (``[B, N(+1), D]``), the select layer's attention (a softmax over random scores,
``[B, heads, T, T]`` with ``T = N + 1``: a CLIP-like tower, CLS first), queries, keys and CLS token, a prompt of
``question_tokens`` random embeddings, and — for a question pass — ``run_language_model`` = the identity (or, for a
text read by the tower's paired encoder, one random text embedding and random patches in that space), so **the
measured time of a prompt-conditioned module leaves out its LLM or text-tower pass** (its analytic count includes
it). The call is the whole built module: for ``pre`` types the
compressor plus its projector, i.e. the post-projector boundary.

Protocol of :mod:`.measure`: ``warmup`` untimed calls, ``iters`` timed ones (median, std), peak memory above
what was allocated before the call, under ``torch.no_grad()``.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, Iterator, Sequence

import torch

from llava.model.multimodal_projector.needs import projector_needs

from .flops import elementwise
from .measure import MeasureOptions, RandomPipeline, measure_call
from .module import CostSetting, module_cost
from .pipeline import projector_pipeline_flops
from .presets import PipelineSpec

logger = logging.getLogger(__name__)

__all__ = ["build_projector", "compressor_inputs", "measure_types", "measure_pipeline_types"]


def build_projector(spec: PipelineSpec, projector_type: str) -> tuple[torch.nn.Module, Any]:
    """The projector a checkpoint of ``spec``'s widths with ``projector_type`` builds, and its config."""
    from llava.model.multimodal_projector.builder import build_vision_projector

    config = SimpleNamespace(
        mm_projector_type=projector_type, mm_hidden_size=spec.mm_hidden, hidden_size=spec.lm_dims.hidden,
        mm_vision_select_layer=spec.select_layer, mm_vision_select_feature="patch",
        num_hidden_layers=spec.lm_dims.layers, vocab_size=spec.lm_dims.vocab,
    )
    return build_vision_projector(config, vision_cfg=spec.vision), config


def _built(spec: PipelineSpec, types: Sequence[str], opts: MeasureOptions) -> Iterator[tuple[str, torch.nn.Module, Any]]:
    """``(type, projector in eval mode on the device, its config)`` for each type, seeded alike; a type that cannot
    be built from what the spec knows (e.g. a method that reads the tower's depth from a config naming no
    ``mm_vision_tower``) is left out, logged with the factory's sentence."""
    for name in types:
        torch.manual_seed(0)
        try:
            projector, config = build_projector(spec, name)
        except ValueError as exc:
            logger.warning("not measured: %s: %s", name, exc)
            continue
        yield name, projector.to(opts.device, opts.dtype).eval(), config


def compressor_inputs(spec: PipelineSpec, needs: Any, batch: int, question_tokens: int, device, dtype) -> tuple[torch.Tensor, Any]:
    """``(features, inputs)`` for one call of a projector with ``needs`` (its resolved :class:`ModelNeeds`):
    ``inputs`` is ``None`` when it needs nothing beyond the select layer."""
    from llava.model.multimodal_projector.plugins import CompressorInputs

    grid = spec.grid(spec.inputs[0])
    n, d = grid[0] * grid[1], spec.mm_hidden
    features = torch.randn(batch, n, d, device=device, dtype=dtype)
    if not needs.extra:
        return features, None
    inputs = CompressorInputs(features=features, grid_shape=grid, has_cls_token=False)
    for index in needs.tower_layers:
        inputs.layers[index] = torch.randn(batch, n, d, device=device, dtype=dtype)
    if needs.attention is not None:
        heads = spec.vision_dims.heads
        # a CLIP-like tower: CLS first in the attention, queries and keys (CLS-attention pruners score with its row)
        inputs.attention = torch.randn(batch, heads, n + 1, n + 1, device=device, dtype=dtype).softmax(-1)
        inputs.has_cls_token = True
        inputs.queries = torch.randn(batch, n + 1, d, device=device, dtype=dtype)
        inputs.keys = torch.randn(batch, n + 1, d, device=device, dtype=dtype)
        inputs.cls_token = torch.randn(batch, d, device=device, dtype=dtype)
    if needs.prompt and needs.text_encoder == "tower":  # one segment of the tower's text embedding, the patches in that space
        width = int(getattr(spec.vision, "projection_dim", None) or d)
        inputs.prompt = [torch.randn(1, width, device=device) for _ in range(batch)]
        inputs.prompt_ids = [torch.zeros(question_tokens, dtype=torch.long, device=device) for _ in range(batch)]
        inputs.paired_features = torch.randn(batch, n, width, device=device)
    elif needs.prompt:
        inputs.prompt = [torch.randn(question_tokens, spec.lm_dims.hidden, device=device, dtype=dtype) for _ in range(batch)]
        inputs.prompt_ids = [torch.zeros(question_tokens, dtype=torch.long, device=device) for _ in range(batch)]
        inputs.run_language_model = lambda embeds: embeds
    return features, inputs


def measure_types(spec: PipelineSpec, types: Sequence[str], setting: CostSetting, opts: MeasureOptions) -> list[dict[str, Any]]:
    """One row per (batch size, projector type): latency, peak memory, profiler FLOPs next to the analytic post figure."""
    rows = []
    for batch in opts.batch_sizes:
        for name, projector, config in _built(spec, types, opts):
            features, inputs = compressor_inputs(spec, projector_needs(projector), batch, setting.prompt_tokens, opts.device, opts.dtype)
            cost = module_cost(name, setting, config)
            prompt_pass = inputs is not None and inputs.prompt is not None
            analytic = cost.post * batch
            matmul = analytic - elementwise(cost.module) * batch  # elementwise parts: what the profiler calls add/mul
            call = (lambda: projector(features)) if inputs is None else (lambda: projector(features, inputs))
            with torch.no_grad():
                row = measure_call(call, opts, analytic, matmul)
            rows.append({"batch": batch, "variant": name, "boundary": "post", "tokens": cost.tokens,
                         "note": _prompt_note(projector) if prompt_pass else "", **row})
    return rows


def _prompt_note(projector: torch.nn.Module) -> str:
    """What a measured module row with a text pass leaves out."""
    if projector_needs(projector).text_encoder == "tower":
        return "tower text pass not run (random embeddings)"
    return "LLM prompt pass not run (identity)"


def _pass_not_run(needs: Any) -> str:
    """What a measured prefill row with a text pass leaves out (its analytic count includes it)."""
    if needs.text_encoder == "tower":
        return "instruction-conditioned: the tower's text pass not run"
    return "prompt-conditioned: LLM question pass not run"


class WithInputs(torch.nn.Module):
    """``projector(features, inputs)`` behind a one-argument call, for the prefill pipeline.

    ``inputs`` (random tower layers/attention/prompt at the features' shape, see :func:`compressor_inputs`) are
    made once per batch size and reused, so the timed call does not include making them.
    """

    def __init__(self, projector: torch.nn.Module, make: Any) -> None:
        super().__init__()
        self.projector, self.make, self.cache = projector, make, {}

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        batch = features.shape[0]
        if batch not in self.cache:
            self.cache[batch] = self.make(batch)
        inputs = self.cache[batch]
        inputs.features = features
        return self.projector(features, inputs)


def measure_pipeline_types(spec: PipelineSpec, types: Sequence[str], acc: Any, setting: CostSetting, opts: MeasureOptions) -> list[dict[str, Any]]:
    """Full prefill (random tower → projector type as built → random LLM) per (batch, type), as :mod:`.measure` does
    for compressor allocations; the analytic figure is the same capped count, attention scores not counted (the profiler
    does not count SDPA), our computation."""
    pipe = RandomPipeline(spec, opts, acc.lm_head)
    inp = spec.inputs[0]
    rows = []
    for batch in opts.batch_sizes:
        for name, projector, config in _built(spec, types, opts):
            needs = projector_needs(projector)
            _, probe = compressor_inputs(spec, needs, 1, setting.prompt_tokens, opts.device, opts.dtype)
            if probe is not None:
                projector = WithInputs(projector, lambda b, n=needs: compressor_inputs(spec, n, b, setting.prompt_tokens, opts.device, opts.dtype)[1])
            cost = projector_pipeline_flops(
                spec, name, prompt_tokens=acc.prompt_tokens, lm_head=acc.lm_head, computation="ours",
                question_tokens=setting.prompt_tokens, llm_layers=opts.llm_layers, vision_layer_cap=opts.vision_layers,
            )
            pixels, text = pipe.inputs(batch, inp.image_size, inp.views, acc.prompt_tokens)
            with torch.no_grad():
                row = measure_call(lambda: pipe.prefill(projector, pixels, text), opts, cost["total"] * batch,
                               (cost["total"] - cost["elementwise"]) * batch)
            rows.append({"input": inp.label, "batch": batch, "variant": name, "llm_tokens": cost["visual_tokens"] + acc.prompt_tokens,
                         "note": _pass_not_run(needs) if probe is not None and probe.prompt is not None else "", **row})
    return rows
