"""PyramidDrop (Xing et al., CVPR 2025, "PyramidDrop: Accelerating Your Large Vision-Language Models via Pyramid
Visual Redundancy Reduction"; Cooperx521/PyramidDrop).

The LLM is cut into stages; at the start of each stage after the first (layers ``S, 2S, 3S, ...``) the image tokens
still present are ranked by the attention of the **last instruction token** in **that layer** (its own
``input_layernorm``, ``q_proj`` and ``k_proj`` on its input, RoPE, causal mask, softmax, averaged over heads), and the
top ones are kept so that stage ``j`` runs on ``N·λ^j`` of the ``N`` image tokens. The release (``--layer_list
'[8,16,24]' --image_token_ratio_list '[0.5,0.25,0.125]'`` on 32-layer LLaMA) keeps ``int(N·ratio_j)`` at each stage
(truncation), ``topk`` then sorted.

Deliberate differences (docs/BASELINES.md): positions stay the original ones (the release renumbers the kept rows
0..T'-1 after every stage and shifts decoding positions to match); the stage ratios are ``λ^j`` computed exactly in
integers (``N·R^j // 100^j``; the release's list of decimals gives the same counts for 0.5/0.25/0.125); the
release's padding branch handles right padding only, here both sides.

Names: ``pyramiddrop_s{S}_r{R}``: a stage every ``S`` layers, ``R = 100·λ`` (``pyramiddrop_s8_r50`` is the release's
setting on a 32-layer LLM: stages at 8, 16, 24 keeping 50%, 25%, 12.5%).
"""

from __future__ import annotations

from llava.plugin_api import CostModel, NameForm, Reducer, ReducerBuild, ReducerContext, ReducerPlugin, ReducerType, Reduction

from ._common import image_count, keep_top_image_tokens, kept_view

__all__ = ["NAME", "PLUGIN", "PyramidDropStage", "pyramiddrop_keep", "pyramiddrop_layer_tokens", "stage_layers"]

NAME = "pyramiddrop"
FORM = NameForm("pyramiddrop_s{S}_r{R}")


def pyramiddrop_keep(tokens: int, ratio_percent: int, stage: int) -> int:
    """Image tokens of ``tokens`` kept from stage ``stage`` (1, 2, ...) on: ``int(N · λ^stage)``, exactly."""
    return tokens * ratio_percent**stage // 100**stage


def stage_layers(every: int, layers: int) -> list[int]:
    """The layers a stage starts at: ``S, 2S, ...`` below ``layers``."""
    return list(range(every, layers, every))


class PyramidDropStage(Reducer):
    """One stage boundary: keep ``N·λ^stage`` of the ``N`` image tokens of the prompt."""

    query_rows = 1

    def __init__(self, layer: int, stage: int, ratio_percent: int) -> None:
        self.layer, self.stage, self.ratio_percent = layer, stage, ratio_percent

    def __call__(self, ctx: ReducerContext) -> Reduction:
        present = image_count(ctx.visual, NAME)
        original = present if ctx.prompt_visual is None else int(ctx.prompt_visual[0])
        keep = min(pyramiddrop_keep(original, self.ratio_percent, self.stage), present)
        scores = ctx.attention("last").mean(dim=1)[:, 0]
        return keep_top_image_tokens(scores, ctx.visual, keep)


def _build(build: ReducerBuild) -> list[Reducer]:
    every, ratio = build.values["S"], build.values["R"]
    if every < 1 or every >= build.lm.layers:
        raise build.refuse(f"starts a stage every S={every} layers; S must be from 1 to {build.lm.layers - 1} for this {build.lm.layers}-layer LLM")
    if not 0 < ratio <= 100:
        raise build.refuse(f"keeps R={ratio}% per stage; R is a percentage from 1 to 100")
    return [PyramidDropStage(layer, stage, ratio) for stage, layer in enumerate(stage_layers(every, build.lm.layers), 1)]


def pyramiddrop_layer_tokens(build: ReducerBuild, visual: int) -> list[int]:
    """Image tokens per decoder layer: ``N`` in stage 0, ``int(N·λ^j)`` in stage ``j``."""
    every, ratio = build.values["S"], build.values["R"]
    return [pyramiddrop_keep(visual, ratio, min(layer // every, len(stage_layers(every, build.lm.layers))))
            for layer in range(build.lm.layers)]


PLUGIN = ReducerPlugin(
    name=NAME,
    reducers=(ReducerType(FORM, _build, "PyramidDrop: a stage every S layers keeps R% of the image tokens of the stage before",
                          examples=("pyramiddrop_s1_r50",)),),
    cost=CostModel(layer_tokens=pyramiddrop_layer_tokens),
    view=kept_view(NAME),
    showcase=("pyramiddrop_s8_r50",),
)
