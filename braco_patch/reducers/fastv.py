"""FastV (Chen et al., ECCV 2024, "An Image is Worth 1/2 Tokens After Layer 2"; pkunlp-icler/FastV).

At layer K the image tokens are ranked by the attention the **last token** pays them in **layer K-1** (averaged over
heads), and the ``R`` fraction with the lowest attention is dropped; layers 0..K-1 run on every token, layers K..L-1
on the kept ones. The release keeps ``round(N·(1-R))`` image tokens (``topk`` of the head-averaged last row of
layer K-1's attention probabilities, indices sorted), with ``K`` the 0-based index of the first pruned layer (the
attention is ``output_attentions`` of the layer before). Its defaults: ``K = 2, R = 50%`` (the paper's), ``K = 3,
R = 75%`` (the README's demo).

Deliberate differences (docs/BASELINES.md): each prompt of a batch ranks its own tokens (the release reads batch row
0 for all); the attention row is computed in float32 from layer K-1's q/k (the release's eager layer in the model's
dtype); positions stay the original ones, as in the release.

Names: ``fastv_k{K}_r{R}``, ``R`` in percent (``fastv_k2_r50``).
"""

from __future__ import annotations

from llava.plugin_api import CostModel, NameForm, Reducer, ReducerBuild, ReducerContext, ReducerPlugin, ReducerType, Reduction

from ._common import image_count, keep_top_image_tokens, kept_view

__all__ = ["NAME", "PLUGIN", "FastV", "fastv_keep", "fastv_layer_tokens"]

NAME = "fastv"
FORM = NameForm("fastv_k{K}_r{R}")


def fastv_keep(tokens: int, ratio_percent: int) -> int:
    """Image tokens FastV keeps of ``tokens``: the release's ``round(N * (1 - R))`` (Python's round, half to even)."""
    return round(tokens * (1 - ratio_percent / 100))


class FastV(Reducer):
    """Drop the ``ratio`` percent of image tokens least attended by the last token in the layer before ``layer``."""

    query_rows = 1

    def __init__(self, layer: int, ratio_percent: int) -> None:
        self.layer = layer
        self.ratio_percent = ratio_percent

    @property
    def attention_layer(self) -> int:
        return self.layer - 1

    def __call__(self, ctx: ReducerContext) -> Reduction:
        keep = fastv_keep(image_count(ctx.visual, NAME), self.ratio_percent)
        scores = ctx.attention("last", layer=self.attention_layer).mean(dim=1)[:, 0]  # [B, T]
        return keep_top_image_tokens(scores, ctx.visual, keep)


def _build(build: ReducerBuild) -> list[Reducer]:
    k, r = build.values["K"], build.values["R"]
    if k < 1:
        raise build.refuse(f"prunes at layer K={k}; K is at least 1 (the attention it ranks by is layer K-1's)")
    if r > 100:
        raise build.refuse(f"drops R={r}% of the image tokens; R is a percentage from 0 to 100")
    return [FastV(k, r)]


def fastv_layer_tokens(build: ReducerBuild, visual: int) -> list[int]:
    """Image tokens per decoder layer: ``visual`` before layer K, FastV's kept count from layer K on."""
    k, r = build.values["K"], build.values["R"]
    return [visual if layer < k else fastv_keep(visual, r) for layer in range(build.lm.layers)]


PLUGIN = ReducerPlugin(
    name=NAME,
    reducers=(ReducerType(FORM, _build, "FastV: drop the R% of image tokens the last token attends least, at layer K",
                          examples=("fastv_k1_r50", "fastv_k1_r75")),),
    cost=CostModel(layer_tokens=fastv_layer_tokens),
    view=kept_view(NAME),
    showcase=("fastv_k2_r50",),
)
