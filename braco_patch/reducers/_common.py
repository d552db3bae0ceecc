"""What the reducer method files share: the image-token count of a batch, a top-k over image tokens, the demo view."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from llava.plugin_api import CompressorView, Reduction, ViewInputs


def image_count(visual: torch.Tensor, method: str) -> int:
    """The number of image tokens every row of ``visual`` ``[B, T]`` holds.

    Raises:
        ValueError: When rows hold different counts (the kept count must be the same in every row).
    """
    counts = visual.sum(1)
    if bool((counts != counts[0]).any()):
        raise ValueError(f"{method} needs the same number of image tokens in every prompt of a batch, got {counts.tolist()}; "
                         "run such prompts one at a time (batch size 1)")
    return int(counts[0])


def keep_top_image_tokens(scores: torch.Tensor, visual: torch.Tensor, keep: int) -> Reduction:
    """Keep every non-image row and the ``keep`` image rows of highest ``scores`` ``[B, T]`` (sorted row indices)."""
    masked = scores.float().masked_fill(~visual, float("-inf"))
    top = masked.topk(keep, dim=1).indices
    kept = (~visual).clone()
    kept.scatter_(1, top, True)
    return Reduction(keep=kept.nonzero()[:, 1].view(visual.shape[0], -1))


def kept_view(method: str) -> Any:
    """A view showing, for the first image, the patches each reducing layer keeps (``kept``: ``{layer: grid indices}``)."""

    def view(name: str, kept: Mapping[int, Any], inputs: ViewInputs) -> CompressorView | None:
        from llava.serve.panels import kept_positions_picture

        pictures = tuple(kept_positions_picture(f"kept before layer {layer}", inputs.image, inputs.grid, indices)
                         for layer, indices in sorted(kept.items()))
        counts = {int(layer): len(indices) for layer, indices in kept.items()}
        summary = (f"`{name}` ({method}): {inputs.tokens_sent} visual tokens enter the LLM; kept per reducing layer: "
                   + ", ".join(f"layer {layer}: {count}" for layer, count in sorted(counts.items())))
        return CompressorView(summary, pictures, help="Bright patches are the image tokens the later layers still see.",
                              details={"method": method, "reducer": name, "kept_per_layer": counts})

    return view
