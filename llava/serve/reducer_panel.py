"""The demo panel of an in-LLM reducer (``--reducer``): the image positions it keeps, after one prefill.

The reducer's choice depends on the prompt (which image tokens the instruction attends to), so the panel runs one
prefill of the image with the prompt the answer used when the request gives it (``"prompt"``, with one image marker),
else with :data:`DEFAULT_QUESTION` in the model's conversation template. The kept rows of each reducing layer
(:attr:`llava.model.reduction.ReductionState.kept`) are mapped to the image's patch grid and handed to the reducer
plugin's view (``view(name, kept, ViewInputs)``). Where the image tokens are not the grid's patches one for one (a
compressor projector, AnyRes views, a video), the panel says so in one sentence and gives the kept counts only.
"""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image

from llava.constants import DEFAULT_IMAGE_TOKEN, IMAGE_TOKEN_INDEX
from llava.conversation import conv_templates, template_for_model
from llava.mm_utils import image_marker, process_images, tokenizer_image_token
from llava.model.compressor_text import question_kwargs
from llava.model.image_encoding import grid_shape
from llava.model.reducers import active_reducer, prompt_reduction, resolve_reducer
from llava.model.reduction import STATE_KEY
from llava.plugin_api import CompressorView, ViewInputs

#: The question a panel's prefill asks when the request names no prompt.
DEFAULT_QUESTION = "Describe the image."

__all__ = ["DEFAULT_QUESTION", "VIDEO_NOTE", "ReducerPanel", "compute_reducer_view", "merged_payload", "panel_prompt", "reducer_of"]


def reducer_of(model: Any) -> tuple[str, Any] | None:
    """``(type, plugin)`` of the model's active reducer, or ``None`` (no reducer)."""
    active = active_reducer(model)
    return None if active is None else (active[0], resolve_reducer(active[0]).plugin)


def panel_prompt(model: Any, model_name: str, prompt: Any = None) -> str:
    """The prompt of the panel's prefill: ``prompt`` when it is a string with one image marker, else
    :data:`DEFAULT_QUESTION` in the model's template; the marker replaced as for generation."""
    if not isinstance(prompt, str) or prompt.count(DEFAULT_IMAGE_TOKEN) != 1:
        conv = conv_templates[template_for_model(model_name)].copy()
        conv.append_message(conv.roles[0], f"{DEFAULT_IMAGE_TOKEN}\n{DEFAULT_QUESTION}")
        conv.append_message(conv.roles[1], None)
        prompt = conv.get_prompt()
    return prompt.replace(DEFAULT_IMAGE_TOKEN, image_marker(model.config))


class ReducerPanel:
    """What the panel shows of a reducer for one image: a view with pictures, or a sentence (``note``) and counts."""

    def __init__(self, view: CompressorView | None, note: str, details: dict[str, Any]) -> None:
        self.view, self.note, self.details = view, note, details


def _prefill_kept(model: Any, tokenizer: Any, pixels: torch.Tensor, size: tuple[int, int], prompt: str,
                  model_name: str) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """``({layer: kept spliced rows of the prompt}, [T] image rows)`` of one prefill with the model's reducer."""
    ids = tokenizer_image_token(prompt, tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0).to(model.device)
    visual: list[torch.Tensor] = []
    _, position_ids, mask, _, embeds, _ = model.prepare_inputs_labels_for_multimodal(
        ids, None, None, None, None, pixels, [size], visual_out=visual,
        **question_kwargs(model, tokenizer, [prompt], template_for_model(model_name)),
    )
    state = prompt_reduction(model, visual[0], mask)
    if state is None:
        return {}, visual[0][0].nonzero()[:, 0]
    model.get_model()(inputs_embeds=embeds, attention_mask=mask, position_ids=position_ids, use_cache=False, **{STATE_KEY: state})
    return {layer: rows[0] for layer, rows in state.kept.items()}, visual[0][0].nonzero()[:, 0]


@torch.inference_mode()
def compute_reducer_view(model: Any, tokenizer: Any, image_processor: Any, image: Image.Image, model_name: str,
                         prompt: Any = None) -> ReducerPanel | None:
    """The reducer part of the panel for ``image``, or ``None`` when the model has no reducer or its plugin no view."""
    from .panels import _model_input, _to_rgb

    found = reducer_of(model)
    if found is None or found[1].view is None:
        return None
    name, plugin = found
    pixels = process_images([image], image_processor, model.config)
    pixels = pixels.to(model.device, dtype=model.dtype) if isinstance(pixels, torch.Tensor) else [p.to(model.device, dtype=model.dtype) for p in pixels]
    kept, image_rows = _prefill_kept(model, tokenizer, pixels, image.size, panel_prompt(model, model_name, prompt), model_name)
    counts = {int(layer): int(torch.isin(rows, image_rows).sum()) for layer, rows in kept.items()}
    details = {"reducer": name, "reducer_method": plugin.name, "reducer_kept_per_layer": counts}
    grid = grid_shape(model.get_vision_tower())
    spelled = ", ".join(f"layer {layer}: {count} of {len(image_rows)}" for layer, count in sorted(counts.items()))
    if len(image_rows) != grid[0] * grid[1]:
        note = (f"`{name}` ({plugin.name}) keeps image tokens {spelled or 'all'}; they are not the {grid[0]}x{grid[1]} "
                "patches one for one (a compressor's or AnyRes tokens), so no positions are drawn.")
        return ReducerPanel(None, note, details)
    positions = {layer: torch.searchsorted(image_rows, rows[torch.isin(rows, image_rows)]).tolist() for layer, rows in kept.items()}
    details["reducer_kept"] = positions
    single = _model_input(pixels)
    inputs = ViewInputs(image=_to_rgb(single, image_processor), features=model.get_vision_tower()(single), grid=grid,
                        tokens_sent=len(image_rows), model=model, pixels=single)
    view = plugin.view(name, positions, inputs)
    return ReducerPanel(view, "" if view is not None else f"`{name}` ({plugin.name}) shows no positions for this image.", details)


#: The sentence a video's panel adds when the model has a reducer.
VIDEO_NOTE = "The reducer's kept positions are drawn for a single image, not for a video."


def merged_payload(base: CompressorView | None, reducer: ReducerPanel | None) -> dict[str, Any]:
    """The worker's panel JSON (:func:`llava.serve.panels.view_payload`) of the projector's view and the reducer's part:
    their pictures side by side, the reducer's sentence after the projector's summary, or ``{"available": False,
    "error": sentence}`` when neither has a picture."""
    from dataclasses import replace

    from .panels import view_payload

    if reducer is None:
        return view_payload(base)
    shown = [view for view in (base, reducer.view) if view is not None]
    if not shown:
        return {**reducer.details, "available": False, "error": reducer.note}
    summary = "\n\n".join([view.summary for view in shown] + ([reducer.note] if reducer.note else []))
    helps = " ".join(view.help for view in shown if view.help)
    pictures = tuple(picture for view in shown for picture in view.pictures)
    details = {key: value for view in shown for key, value in dict(view.details).items()}
    return view_payload(replace(shown[0], summary=summary, help=helps, pictures=pictures, details={**details, **reducer.details}))
