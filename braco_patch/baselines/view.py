"""The baselines' pictures for the demo panel (part of the LLaVA seam, with :mod:`.llava_plugin`).

Each picture shows what the method really computes for the image, with :mod:`llava.serve.panels`' helpers:

* **PruMerge / PruMerge+** (selection): the kept patch positions, from the tower's attention at the select
  layer (each kept token also absorbs its key-similar neighbours, which the picture does not show);
* **DivPrune** (selection after the projector): the K positions its greedy max–min selection keeps;
* **QueCC / TokenPacker** (regional): the s x s region each output token attends to;
* **MQT-LLaVA**: the attention weights of the first queries over the patch grid (with the release's
  position keys these do not depend on the image: that is what the method does);
* **Fourier-VLM**: the C x C DCT low-pass view of the image (:func:`braco_patch.view.lowpass_view`, the
  same basis), i.e. the coarse layout its C² tokens carry;
* **VisionZip**: the dominant patches it keeps, and the group of patches merged into each contextual token;
* **VisPruner**: the important patches (attention) and the diverse ones (duplicate removal);
* **CDPruner**: the K patches its DPP keeps. The panel has no question, so this is the selection without one
  (relevance 1 everywhere); with a question the relevance reweighs it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from llava.serve.panels import CompressorView, ViewInputs, heat_picture, kept_positions_picture, regions_picture, token_details, tokens_summary

from ..view import lowpass_view
from .prumerge import importance_scores
from .visionzip import visionzip_groups
from .vispruner import cls_attention, vispruner_parts

__all__ = ["VIEWS"]

#: MQT queries drawn at most (one heat map each).
MQT_PICTURES = 8


def _input_picture(inputs: ViewInputs) -> Any:
    from llava.serve.panels import Picture

    return Picture("model input", inputs.image)


def _view(inputs: ViewInputs, pictures: list[Any], help_text: str, breakdown: str = "", **details: Any) -> CompressorView:
    summary = tokens_summary(inputs.tokens_sent, inputs.grid, breakdown)
    return CompressorView(summary, (_input_picture(inputs), *pictures), help_text, {**token_details(inputs), **details},
                          {key: np.asarray(value) for key, value in details.items() if isinstance(value, (list, np.ndarray))})


def prumerge_view(projector: Any, inputs: ViewInputs) -> CompressorView:
    """Kept positions of PruMerge(+) (``details["kept"]``, row-major, in output order), from the tower's
    attention for ``inputs.pixels``."""
    module = projector.compressor
    model = inputs.model
    tower = model.get_vision_tower()
    out = tower.encode(inputs.pixels, attention_layer=int(getattr(model.config, "mm_vision_select_layer", -2)))
    scores = importance_scores(out.attention.float(), out.features.shape[1])
    kept = module.select(scores)
    kept = kept[0].tolist()  # one image; adaptive mode gives a list, fixed-K a [1, M] tensor
    mode = "IQR outliers" if module.budget is None else f"top {module.kept_tokens} by CLS attention"
    help_text = ("Bright patches are the tokens PruMerge keeps (" + mode + "); each also absorbs its most key-similar "
                 "tokens weighted by their attention" + (", and one extra token sums the pruned ones." if module.extra_token else "."))
    picture = kept_positions_picture(f"kept {len(kept)} of {inputs.tokens_uncompressed}", inputs.image, inputs.grid, kept)
    return _view(inputs, [picture], help_text, kept=kept)


def divprune_view(projector: Any, inputs: ViewInputs) -> CompressorView:
    """Kept positions of DivPrune on the projected tokens (``details["kept"]``, ascending)."""
    selector = projector[-1]
    with torch.no_grad():
        projected = projector[:-1](inputs.features)
        kept = selector.select(projected)[0].tolist()
    if projected.shape[1] == inputs.tokens_uncompressed + 1:  # cls_patch features: position 0 is the CLS token
        kept = [index - 1 for index in kept if index > 0]
    picture = kept_positions_picture(f"kept {len(kept)} of {inputs.tokens_uncompressed}", inputs.image, inputs.grid, kept)
    help_text = "Bright patches are the projected tokens DivPrune keeps: each next one is the farthest (cosine) from those already kept."
    return _view(inputs, [picture], help_text, kept=kept)


def regions_view(projector: Any, inputs: ViewInputs) -> CompressorView:
    """The region of every output token (``details["regions"]``: ``[K, s²]`` grid positions)."""
    module = getattr(projector, "compressor", projector)
    regions = module.regions().cpu().numpy()
    labels = np.zeros(inputs.grid[0] * inputs.grid[1], dtype=np.int64)
    for token, positions in enumerate(regions):
        labels[positions] = token
    name = type(module).__name__.replace("Compressor", "").replace("Projector", "")
    picture = regions_picture(f"{len(regions)} regions of {module.scale}x{module.scale}", inputs.image, labels.reshape(inputs.grid))
    help_text = f"Each colour is one {name} output token: its query attends only to the patches of its own region."
    return _view(inputs, [picture], help_text, f"{len(regions)} regions", regions=regions.tolist())


def mqt_view(projector: Any, inputs: ViewInputs) -> CompressorView:
    """Attention maps of the first queries over the grid (``arrays["attention"]``: ``[K, H, W]``, heads averaged)."""
    weights = mqt_attention(projector, inputs.features)[0]
    rows, cols = inputs.grid
    maps = weights.reshape(-1, rows, cols).cpu().numpy()
    pictures = [heat_picture(f"query {index + 1}", inputs.image, heat) for index, heat in enumerate(maps[:MQT_PICTURES])]
    help_text = (f"Where each of the first {min(len(maps), MQT_PICTURES)} of the {len(maps)} queries looks (attention averaged "
                 "over heads). With position keys (the release) this is the same for every image.")
    view = _view(inputs, pictures, help_text, f"first {len(maps)} of {projector.num_queries} nested queries")
    return CompressorView(view.summary, view.pictures, view.help, view.details, {"attention": maps})


def mqt_attention(projector: Any, features: torch.Tensor) -> torch.Tensor:
    """``[B, K, N]`` attention probabilities of the K active queries (heads averaged), recomputed as the module does."""
    module = projector
    side = int(round(features.shape[1] ** 0.5))
    dtype = features.dtype
    m = module.num_tokens
    with torch.no_grad():
        pos = module.key_positions(side).to(dtype)
        q = module.ln_q(module.query[:m].to(dtype) + module.query_pos[:m].to(dtype)).expand(features.shape[0], -1, -1)
        k = module.ln_k(pos).expand(features.shape[0], -1, -1) if module.keys == "position" else module.ln_k(features + pos)
        attn = module.attn
        qh, kh = attn._split(attn.q_proj(q)), attn._split(attn.k_proj(k))
        logits = torch.matmul(qh, kh.transpose(-1, -2)) * (qh.shape[-1] ** -0.5)
        return torch.softmax(logits.float(), dim=-1).mean(dim=1)


def fouriervlm_view(projector: Any, inputs: ViewInputs) -> CompressorView:
    """The C x C DCT low-pass view of the image."""
    cutoff = int(projector.compressor.cutoff)
    low = lowpass_view(inputs.image, inputs.grid, cutoff)
    from llava.serve.panels import Picture

    help_text = (f"The image averaged per patch, keeping only the {cutoff}×{cutoff} lowest 2-D DCT frequencies over the patch "
                 f"grid: the coarse layout Fourier-VLM's {cutoff * cutoff} tokens carry (the tokens themselves are the same "
                 "low-pass of the tower features, sampled on a C×C grid).")
    return _view(inputs, [Picture(f"{cutoff}×{cutoff} DCT low-pass", low)], help_text, f"{cutoff}×{cutoff} low-pass grid", cutoff=cutoff)


def _own_layer_attention(inputs: ViewInputs) -> Any:
    """The tower's outputs for ``inputs.pixels`` with the attention of the layer that produced the select layer's
    features (what VisionZip and VisPruner read)."""
    from llava.model.image_encoding import attention_layer_for

    model = inputs.model
    tower = model.get_vision_tower()
    layer = attention_layer_for(int(getattr(model.config, "mm_vision_select_layer", -2)), int(tower.config.num_hidden_layers))
    with torch.no_grad():
        return tower, tower.encode(inputs.pixels, attention_layer=layer)


def visionzip_view(projector: Any, inputs: ViewInputs) -> CompressorView:
    """Dominant patches (``details["kept"]``, grid order) and contextual groups (``details["groups"]``: per patch the
    contextual token it went into, ``-1`` for a dominant patch)."""
    module = projector.compressor
    tower, out = _own_layer_attention(inputs)
    kept, groups = visionzip_groups(module, out.attention.float(), out.keys.float(), bool(tower.has_cls_token))
    labels = (np.asarray(groups) + 1).reshape(inputs.grid)
    cls = " plus the CLS token" if tower.has_cls_token else ""
    pictures = [
        kept_positions_picture(f"{len(kept)} dominant patches{cls}", inputs.image, inputs.grid, kept),
        regions_picture(f"{module.contextual} contextual groups", inputs.image, labels),
    ]
    help_text = (f"VisionZip keeps the patches the CLS token attends to most{cls} (left), then merges every other patch into one of "
                 f"{module.contextual} evenly spaced targets by key similarity (right: one colour per contextual token; the dominant "
                 "patches share the first colour).")
    return _view(inputs, pictures, help_text, f"{module.dominant} dominant + {module.contextual} contextual", kept=kept, groups=groups)


def vispruner_view(projector: Any, inputs: ViewInputs) -> CompressorView:
    """Important (``details["important"]``) and diverse (``details["diverse"]``) patch positions."""
    module = projector.compressor
    _, out = _own_layer_attention(inputs)
    with torch.no_grad():
        scores = cls_attention(out.attention.float(), out.features.shape[1])
        important, diverse = (part[0].tolist() for part in vispruner_parts(out.features, scores, module.budget, module.important))
    pictures = [
        kept_positions_picture(f"{len(important)} important", inputs.image, inputs.grid, important),
        kept_positions_picture(f"{len(diverse)} diverse", inputs.image, inputs.grid, diverse),
    ]
    help_text = ("VisPruner keeps the patches the CLS token attends to most (left), then thins the rest by removing the most "
                 "similar ones in rounds of bipartite matching until the diverse patches remain (right).")
    return _view(inputs, pictures, help_text, f"{len(important)} important + {len(diverse)} diverse",
                 kept=sorted(important + diverse), important=important, diverse=diverse)


def cdpruner_view(projector: Any, inputs: ViewInputs) -> CompressorView:
    """The positions the DPP keeps without a question (``details["kept"]``, grid order)."""
    with torch.no_grad():
        kept = projector.compressor.select(projector.project(inputs.features))[0].tolist()
    picture = kept_positions_picture(f"kept {len(kept)} of {inputs.tokens_uncompressed}", inputs.image, inputs.grid, kept)
    help_text = ("Bright patches are the projected tokens CDPruner's DPP keeps: a diverse set by feature similarity. The panel has no "
                 "question; with one, each token's similarity is weighted by its CLIP relevance to the instruction.")
    return _view(inputs, [picture], help_text, kept=kept)


VIEWS = {
    "prumerge": prumerge_view,
    "divprune": divprune_view,
    "regions": regions_view,
    "mqt": mqt_view,
    "fouriervlm": fouriervlm_view,
    "visionzip": visionzip_view,
    "vispruner": vispruner_view,
    "cdpruner": cdpruner_view,
}
