"""CDPruner (Zhang et al., NeurIPS 2025, arXiv 2506.10967; Theia-4869/CDPruner @ 9541616, ``llava/model/llava_arch.py``
``encode_images`` and ``multimodal_encoder/clip_encoder.py``).

Training-free and instruction-conditioned: it keeps the K projected image tokens of a determinantal point
process (DPP) whose kernel weighs feature similarity by relevance to the instruction.

1. **Similarity** (:func:`cosine_similarity`): cosine similarity of the *projected* tokens (after
   ``mlp2x_gelu``, the LLM's width), ``[N, N]`` in float32.
2. **Relevance** (:func:`instruction_relevance`): the select layer's patch features mapped into CLIP's
   image–text space (``visual_projection(post_layernorm(x))``) against the instruction encoded by CLIP's text
   tower (``text_embeds``, one per 77-token segment), both normalised: ``r = mean_m(−cos)`` (the release
   negates the similarity), then min–max scaled ``(r − min + 10⁻⁶) / (max − min)``.
3. **Kernel** (:func:`conditional_kernel`): ``L = diag(r) · S · diag(r)``.
4. **Selection** (:func:`dpp_greedy_map`): fast greedy MAP inference (Chen et al., NeurIPS 2018): K steps, each
   taking the token of largest remaining conditional variance ``d²`` and updating the Cholesky rows.
5. The kept tokens are sent in grid order.

The instruction is the sample's question without the answer-format line LLaVA's evaluation prompts append
(the release's loaders strip "Answer the question using a single word or phrase." and "Answer with the
option's letter from the given choices directly."), tokenized by CLIP's tokenizer and cut into 77-token
segments padded with id 0 (``llava``'s tower does this: ``encode_text``).

Differences from the release, all equal to it at batch 1 (the only batch its ``texts`` string supports):
relevance is min–max scaled per image (the release: over the whole batch). Where the release would divide by
zero (a constant relevance, or a conditional variance ``≤ 0`` once K exceeds the kernel's rank) it returns
non-finite values; here a constant relevance is 1 everywhere and a non-positive variance divides by 1, so the
picks stay defined. Without an instruction (``encode_images`` on its own) the relevance is 1 everywhere: a
plain similarity DPP. The release's optional θ reweighting is commented out in its code and not offered.

Boundary: post-projector (``[B, N, d] → [B, K, d]``); no parameters.

One file on the plugin API: the module, its FLOPs, its LLaVA factory (``cdpruner_k{K}``: ``mlp2x_gelu``, then the
selection, so ``mlp2x_gelu`` weights ``0.*``/``2.*`` load unchanged and any ``mlp2x_gelu`` checkpoint runs it
training-free), cost, view and :data:`PLUGIN`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from llava.plugin_api import (
    BuildContext,
    BuiltProjector,
    CompressorPlugin,
    CostModel,
    CostSetting,
    ModelNeeds,
    ModuleCost,
    NameForm,
    ProjectorType,
    ViewInputs,
)

from ._common import check_count
from ._plugin import CompressThenProject, check_patch_features, check_selection_budget, cost_budget, name_count, projector_part, view_of

__all__ = [
    "NAME",
    "PLUGIN",
    "CDPruner",
    "ProjectThenSelect",
    "CLIP_L_TEXT",
    "cdpruner_flops",
    "clip_text_flops",
    "conditional_kernel",
    "cosine_similarity",
    "dpp_greedy_map",
    "instruction_relevance",
    "minmax",
]

#: Added to the numerator of the min–max scaling (the release's constant): the least relevant token keeps weight.
RELEVANCE_FLOOR = 1e-6


def cosine_similarity(tokens: torch.Tensor) -> torch.Tensor:
    """``[B, N, d]`` → ``[B, N, N]`` float32 cosine similarity."""
    unit = tokens.float() / tokens.float().norm(dim=-1, keepdim=True)
    return torch.matmul(unit, unit.transpose(1, 2))


def minmax(relevance: torch.Tensor) -> torch.Tensor:
    """``[N]`` → ``(r − min + 10⁻⁶) / (max − min)``; a constant row becomes ones."""
    low, span = relevance.min(), relevance.max() - relevance.min()
    scaled = (relevance - low + RELEVANCE_FLOOR) / torch.where(span > 0, span, torch.ones_like(span))
    return torch.where(span > 0, scaled, torch.ones_like(scaled))


def instruction_relevance(image_embeds: torch.Tensor, text_embeds: Sequence[torch.Tensor] | None) -> torch.Tensor:
    """Step 2: ``[B, N]`` relevance of each token to its image's instruction (float32).

    Args:
        image_embeds: ``[B, N, C]`` patch features in the image–text space.
        text_embeds: One ``[M_b, C]`` per image (its instruction's segments), or ``None``: relevance 1 everywhere.
    """
    b, n, _ = image_embeds.shape
    if text_embeds is None:
        return image_embeds.new_ones(b, n, dtype=torch.float32)
    if len(text_embeds) != b:
        raise ValueError(f"expected one instruction per image, got {len(text_embeds)} for {b} images")
    image = image_embeds.float() / image_embeds.float().norm(dim=-1, keepdim=True)
    rows = []
    for i, text in enumerate(text_embeds):
        if text.dim() != 2 or text.shape[0] == 0 or text.shape[1] != image.shape[-1]:
            raise ValueError(f"expected instruction embeddings [segments, {image.shape[-1]}] for image {i}, got {tuple(text.shape)}")
        unit = text.float() / text.float().norm(dim=-1, keepdim=True)
        rows.append(minmax((-(image[i] @ unit.t())).mean(dim=-1)))
    return torch.stack(rows)


def conditional_kernel(similarity: torch.Tensor, relevance: torch.Tensor) -> torch.Tensor:
    """Step 3: ``L_ij = r_i · S_ij · r_j``, ``[B, N, N]``."""
    return relevance.unsqueeze(2) * similarity * relevance.unsqueeze(1)


def dpp_greedy_map(kernel: torch.Tensor, count: int) -> torch.Tensor:
    """Step 4: ``[B, count]`` positions in the order the greedy MAP picks them, from a PSD ``kernel [B, N, N]``.

    Step ``i`` picks ``j = argmax d²`` and sets ``e = (L_j − Σ_{t<i} c_t[j] c_t) / √d²_j``, ``c_i = e``,
    ``d² ← d² − e²``; a picked token's ``d²`` becomes ``−∞``.
    """
    b, n, _ = kernel.shape
    rows = torch.arange(b, device=kernel.device)
    cis = kernel.new_zeros(count, b, n)
    gains = torch.diagonal(kernel, dim1=1, dim2=2).clone()
    picks = []
    for i in range(count):
        j = gains.argmax(dim=-1)
        picks.append(j)
        variance = gains[rows, j]
        norm = torch.where(variance > 0, variance, torch.ones_like(variance)).sqrt()
        eis = (kernel[rows, j] - torch.einsum("tb,tbn->bn", cis[:i, rows, j], cis[:i])) / norm.unsqueeze(-1)
        cis[i] = eis
        gains = gains - eis.square()
        gains[rows, j] = -float("inf")
    return torch.stack(picks, dim=1)


class CDPruner(nn.Module):
    """Keep K projected tokens by a DPP conditioned on the instruction.

    Args:
        budget: K tokens kept per image.
    """

    boundary = "post"
    needs = frozenset({"instruction", "image_text_space"})

    def __init__(self, budget: int) -> None:
        super().__init__()
        self.budget = check_count(budget)

    @property
    def output_tokens(self) -> int:
        return self.budget

    def extra_repr(self) -> str:
        return f"budget={self.budget}"

    def select(
        self, tokens: torch.Tensor, image_embeds: torch.Tensor | None = None, text_embeds: Sequence[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Kept positions ``[B, K]`` in grid order (``image_embeds`` may be ``None`` only without ``text_embeds``)."""
        if tokens.dim() != 3:
            raise ValueError(f"expected projected tokens of shape [batch, tokens, dim], got {tuple(tokens.shape)}")
        b, n, _ = tokens.shape
        if self.budget > n:
            raise ValueError(f"CDPruner cannot keep {self.budget} of {n} tokens; the budget must be at most {n}")
        if text_embeds is not None and (image_embeds is None or tuple(image_embeds.shape[:2]) != (b, n)):
            got = None if image_embeds is None else tuple(image_embeds.shape)
            raise ValueError(f"CDPruner needs the patches in the image-text space, [{b}, {n}, C], to weigh an instruction; got {got}")
        with torch.no_grad():
            relevance = instruction_relevance(image_embeds, text_embeds) if text_embeds is not None else tokens.new_ones(b, n, dtype=torch.float32)
            kernel = conditional_kernel(cosine_similarity(tokens), relevance)
            return dpp_greedy_map(kernel, self.budget).sort(dim=1).values

    def forward(
        self, tokens: torch.Tensor, image_embeds: torch.Tensor | None = None, text_embeds: Sequence[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """``[B, N, d]`` → ``[B, K, d]`` (gradients flow to the kept tokens)."""
        index = self.select(tokens, image_embeds, text_embeds)
        return torch.gather(tokens, 1, index.unsqueeze(-1).expand(-1, -1, tokens.shape[-1]))


#: The text tower of CLIP-L/14 (LLaVA-1.5's tower): width, MLP width, layers, projection width, context.
CLIP_L_TEXT = {"hidden": 768, "intermediate": 3072, "layers": 12, "projection": 768, "context": 77}


def clip_text_flops(segments: int, *, hidden: int, intermediate: int, layers: int, projection: int, context: int) -> dict[str, int]:
    """The text tower's pass over ``segments`` padded ``context``-token segments: per layer q/k/v/o ``4·2·T·h²`` and
    the MLP ``2·2·T·h·m`` (``T = segments·context``), then the text projection of each pooled token ``2·h·p``.
    Attention scores and the token embedding lookup are not counted."""
    t = segments * context
    return {
        "attention_proj": layers * 4 * 2 * t * hidden * hidden,
        "mlp": layers * 2 * 2 * t * hidden * intermediate,
        "text_projection": 2 * segments * hidden * projection,
    }


def cdpruner_flops(
    tokens: int, llm_dim: int, budget: int, *, tower_dim: int, joint_dim: int, segments: int = 1, batch: int = 1
) -> dict[str, int]:
    """FLOPs of :class:`CDPruner` and the relevance it reads (llava's convention), without the text tower's pass
    (:func:`clip_text_flops`).

    ``similarity`` ``2·N²·d``; ``image_projection`` the visual projection of the N patches ``2·N·D·C``;
    ``relevance`` ``2·N·M·C`` for ``M`` text segments; ``scale`` the kernel's two products ``2·N²``; ``dpp`` the
    K greedy steps' products ``Σ_i 2·i·N = N·K·(K − 1)``. Their elementwise updates (subtractions, divisions,
    squares), norms and the min–max scaling are not counted.
    """
    parts = {
        "similarity": 2 * tokens * tokens * llm_dim,
        "image_projection": 2 * tokens * tower_dim * joint_dim,
        "relevance": 2 * tokens * segments * joint_dim,
        "scale": 2 * tokens * tokens,
        "dpp": tokens * budget * (budget - 1),
    }
    return {key: value * batch for key, value in parts.items()}


# ---------------------------------------------------------------------------------------------- LLaVA

NAME = NameForm("cdpruner_k{K}")


class ProjectThenSelect(CompressThenProject):
    """``mlp2x_gelu`` (keys ``0.*``, ``2.*``), then :class:`CDPruner` on the projected tokens, weighing them by the
    instruction when :class:`~llava.plugin_api.CompressorInputs` brings one (``prompt``: the tower's text embeddings,
    ``paired_features``: the patches in the image–text space)."""

    def forward(self, features: torch.Tensor, inputs: Any = None) -> torch.Tensor:
        tokens = self.project(features)
        text = None if inputs is None else inputs.prompt
        return self.compressor(tokens, None if text is None else inputs.paired_features, text)


def _factory(context: BuildContext) -> BuiltProjector:
    budget = name_count(context.match)
    check_patch_features(context)
    if context.tower is not None:  # without a tower (a bare config) the forward pass checks K
        grid = context.tower.grid
        check_selection_budget(budget, grid, context.projector_type, grid[0] * grid[1])
    return BuiltProjector(ProjectThenSelect(CDPruner(budget), context.mm_hidden, context.hidden))


def _cost(context: BuildContext, setting: CostSetting) -> ModuleCost:
    """``mlp2x_gelu`` on all N tokens (the projector part), then the similarity, the relevance (the visual projection
    and CLIP-L/14's text tower over ``⌈(prompt_tokens + 2) / 77⌉`` segments: the question and CLIP's BOS/EOS) and the
    greedy DPP."""
    budget, n, text = cost_budget("cdpruner", name_count(context.match), setting), setting.tokens, CLIP_L_TEXT
    segments = max(1, -(-(setting.prompt_tokens + 2) // text["context"]))
    module: dict[str, Any] = dict(cdpruner_flops(n, setting.lm.hidden, budget, tower_dim=setting.mm_hidden, joint_dim=text["projection"],
                                                 segments=segments))
    module["text_tower"] = clip_text_flops(segments, **text)
    note = (f"projector on all N tokens, then selection; CLIP text tower over {segments} x {text['context']} tokens; "
            "the LLM sees K visual tokens in every layer")
    return ModuleCost(context.projector_type, budget, "post", module, projector_part(n, setting), note)


def _view(projector: Any, inputs: ViewInputs) -> Any:
    """The positions the DPP keeps without a question (``details["kept"]``, grid order)."""
    from llava.serve.panels import kept_positions_picture

    with torch.no_grad():
        kept = projector.compressor.select(projector.project(inputs.features))[0].tolist()
    picture = kept_positions_picture(f"kept {len(kept)} of {inputs.tokens_uncompressed}", inputs.image, inputs.grid, kept)
    help_text = ("Bright patches are the projected tokens CDPruner's DPP keeps: a diverse set by feature similarity. The panel has no "
                 "question; with one, each token's similarity is weighted by its CLIP relevance to the instruction.")
    return view_of(inputs, [picture], help_text, kept=kept)


PLUGIN = CompressorPlugin(
    name="cdpruner",
    projectors=(ProjectorType.named(NAME, _factory, "CDPruner: mlp2x_gelu, then an instruction-conditioned DPP keeps K tokens",
                                    examples=("cdpruner_k9",)),),
    key_prefixes=("mm_cdpruner_",),
    needs=ModelNeeds(text="instruction", text_encoder="tower"),  # CLIP's text tower on the instruction, as the release
    boundary=CDPruner.boundary,
    view=_view,
    cost=CostModel(module_flops=_cost),
)
