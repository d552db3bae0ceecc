"""Full-pipeline prefill FLOPs: vision tower → compressor → projector → LLM prefill, for any projector type.

:class:`Accounting` states what a number includes. Its defaults are the accounting under which published
LLaVA-1.5 prefill figures are reproduced (a plugin's report checks its paper's table against them):

- ``prompt_tokens = 52`` text tokens besides the visual tokens (a fixed-length prompt);
- attention-score FLOPs **not** counted (``count_attention=False``), in the tower and the LLM;
- the **whole** vision tower (``vision_layers="all"``): an HF tower runs all its layers even though LLaVA
  reads ``hidden_states[-2]``;
- the LM head on **every** prompt position (``lm_head="all"``): transformers 4.37's prefill computed logits
  for all positions;
- the compressor as its authors compute it (``computation="official"``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal, Mapping

from .flops import LMHead, VisionLayers, elementwise, llm_prefill_flops, total, vision_layers_run, vision_tower_flops
from .module import CostSetting, module_cost
from .presets import PipelineSpec, load_spec

if TYPE_CHECKING:  # .video imports torch and the model package; the accounting itself needs neither
    from .video import Video

__all__ = ["Accounting", "checkpoint_prefill_flops", "cost_setting", "projector_pipeline_flops"]


@dataclass(frozen=True)
class Accounting:
    """What a full-pipeline FLOPs number includes (see the module docstring for the defaults)."""

    prompt_tokens: int = 52
    count_attention: bool = False
    lm_head: LMHead = "all"
    vision_layers: VisionLayers = "all"
    computation: Literal["official", "ours"] = "official"

    def __post_init__(self) -> None:
        if isinstance(self.prompt_tokens, bool) or not isinstance(self.prompt_tokens, int) or self.prompt_tokens < 0:
            raise ValueError(f"prompt tokens must be an integer >= 0, got {self.prompt_tokens!r}")

    def describe(self) -> str:
        return (
            f"prompt {self.prompt_tokens} text tokens + visual tokens; attention scores "
            f"{'counted' if self.count_attention else 'not counted'}; vision tower: "
            f"{'every layer' if self.vision_layers == 'all' else 'layers up to the selected one'}; LM head on "
            f"{'every position' if self.lm_head == 'all' else 'the last position'}; compressor: {self.computation} computation"
        )

    def to_dict(self) -> dict:
        return asdict(self)


def cost_setting(spec: PipelineSpec, *, question_tokens: int = 7, count_attention: bool = False, computation: str = "official") -> CostSetting:
    """The :class:`~.module.CostSetting` of ``spec``'s first input (its tower's depth and CLS token included)."""
    return CostSetting(
        mm_hidden=spec.mm_hidden, lm=spec.lm_dims, grid=spec.grid(spec.inputs[0]), projector_depth=spec.projector_depth,
        prompt_tokens=question_tokens, count_attention=count_attention, computation=computation,
        tower_layers=spec.vision_dims.layers, tower_cls=spec.vision_dims.cls_token,
    )


def projector_pipeline_flops(
    spec: PipelineSpec, projector_type: str, *, prompt_tokens: int, count_attention: bool = False, lm_head: str = "all",
    vision_layers: str = "all", computation: str = "official", question_tokens: int = 7, config: Any = None,
    llm_layers: int | None = None, vision_layer_cap: int | None = None, video: Video | None = None,
) -> dict[str, Any]:
    """One image's prefill FLOPs through ``projector_type`` on ``spec``'s first input, or one video's.

    ``llm_layers`` / ``vision_layer_cap`` cap the layer counts (to match a capped measured run). With ``video``
    (:func:`.video.video_setting`), the input is its frames, one view each at the first input's size: tower,
    compressor and projector run once per frame and the LLM over the video's tokens (:mod:`.video`).

    Returns:
        ``{"visual_tokens", "total", "vision", "compressor", "projector", "llm", "boundary", "method", "elementwise"}``.
    """
    inp = spec.inputs[0]
    setting = cost_setting(spec, question_tokens=question_tokens, count_attention=count_attention, computation=computation)
    cost = module_cost(projector_type, setting, config)
    vdims = spec.vision_dims
    layers = vision_layers_run(vdims, spec.select_layer, vision_layers)
    if vision_layer_cap is not None:
        layers = min(layers, vision_layer_cap)
    vision = total(vision_tower_flops(vdims, image_size=inp.image_size, layers=layers, count_attention=count_attention))
    # a video's frames are single views: each one costs what one view of the image costs
    units = inp.views if video is None else video.frames
    visual = cost.tokens * units if video is None else video.tokens(cost.tokens)
    lm = spec.lm_dims.capped(llm_layers)
    llm = total(llm_prefill_flops(lm, visual + prompt_tokens, count_attention=count_attention, lm_head=lm_head))
    parts = {
        "vision": vision * units, "compressor": cost.pre * units,
        "projector": total(cost.projector) * units, "llm": llm,
    }
    return {
        "visual_tokens": visual, "total": sum(parts.values()), **parts, "boundary": cost.boundary, "method": cost.method,
        "elementwise": elementwise(cost.module) * units,
    }


def checkpoint_prefill_flops(
    checkpoint_dir: str | os.PathLike[str], prompt_tokens: int, frames: int | None = None, overwrite: Mapping[str, Any] | None = None,
    reducer: str | None = None,
) -> dict[str, Any]:
    """Analytic FLOPs of one image's prefill through a saved checkpoint, for any projector type, or of one video's
    of ``frames`` frames (laid out by the checkpoint's own ``mm_spatial_pool_*`` / ``mm_newline_position`` keys).
    ``overwrite``: config keys set on top of ``config.json``, as the loaders' ``--projector-type`` loads it.
    ``reducer``: an in-LLM reducer type (the loaders' ``--reducer``): the LLM is then counted layer by layer at each
    layer's own token count (:func:`llava.cost.reducer.with_reducer`; adds ``"reducer"`` and ``"per_layer"``).

    Counted: the whole vision tower, the compressor (its plugin's cost model, this project's computation), the
    projector (each once per frame for a video), and the LLM over the visual tokens plus ``prompt_tokens`` text
    tokens, attention scores included, LM head on the last position only.

    Returns:
        ``{"visual_tokens", "total", "vision", "compressor", "projector", "llm", "boundary", "accounting",
        "projector_type", "method"}`` (the checkpoint's type and its method's one name).

    Raises:
        ValueError: One sentence naming the file, for a missing or unreadable ``config.json``.
    """
    config_file = Path(checkpoint_dir) / "config.json"
    spec = load_spec(config_file)
    values = {**json.loads(config_file.read_text(encoding="utf-8")), **(overwrite or {})}
    projector_type = values.get("mm_projector_type") or "linear"
    config = SimpleNamespace(**values)
    if frames is not None:
        from .video import video_setting
    video = None if frames is None else video_setting(frames, spec.grid(spec.inputs[0]), config)
    out = projector_pipeline_flops(
        spec, projector_type, prompt_tokens=prompt_tokens, count_attention=True, lm_head="last", computation="ours",
        question_tokens=prompt_tokens, config=config, video=video,
    )
    out["accounting"] = (
        f"prompt {prompt_tokens} text tokens + visual tokens; attention scores counted; vision tower: every layer; "
        "LM head on the last position; compressor: its plugin's cost model (ours computation)"
        + ("" if video is None else f"; {video.describe()}; 2-D pool not counted")
    )
    if video is not None:
        out["frames"] = video.frames
    out["projector_type"] = projector_type
    if reducer is not None:
        from .reducer import with_reducer

        if video is not None:
            raise ValueError(f"reducer {reducer!r} is counted for one image's prefill; drop the video frames to count it")
        out = with_reducer(out, reducer, spec.lm_dims, prompt_tokens)
        out["accounting"] += f"; reducer {reducer}: every LLM layer at its own token count ({out['per_layer']} image tokens)"
    return out
