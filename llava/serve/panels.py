"""The demo's compressor panel: what a method keeps of an image, drawn by the method's own view.

A method plugin may declare ``view(projector, ViewInputs) -> CompressorView | None``
(:class:`llava.plugin_api.CompressorPlugin`; the view types are the plugin API's, re-exported here).
:func:`compute_view` prepares the image exactly as for generation, runs the vision tower, and hands the view a
:class:`ViewInputs`; the view returns a :class:`CompressorView`: a one-line summary and a few :class:`Picture` s.
The panel is labelled with the method's one name and type (its summary starts with them; ``details`` holds
``method`` and ``projector_type``), as the cost tables and ``llava.eval.compare`` name it. This module draws the
pictures (:func:`render_png`) and turns them into the worker's JSON (:func:`view_payload`).

Picture helpers for the usual kinds of compressor:

* :func:`heat_picture` — a weight map over the patch grid on top of the image (soft pooling, attention);
* :func:`kept_positions_picture` — the patch positions a selection method keeps, the rest dimmed;
* :func:`regions_picture` — a label per patch (regional methods: which region each patch feeds).

Models whose projector has no view have no panel (:func:`view_for` returns ``None``).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from PIL import Image

from llava.mm_utils import process_images
from llava.model.image_encoding import attention_layer_for, grid_shape
from llava.model.multimodal_projector.plugins import plugin_for
from llava.plugin_api import CompressorPlugin, CompressorView, Picture, ViewInputs

#: Pictures per row of the rendered figure.
_COLUMNS = 4
_PANEL_INCHES = 1.7
#: How much a dropped patch is dimmed in :func:`kept_positions_picture`.
_DIM = 0.25


# ---------------------------------------------------------------------------------------------- helpers


def tokens_summary(tokens_sent: int, grid: tuple[int, int], breakdown: str = "") -> str:
    """``**K visual tokens sent to the LLM** (breakdown) vs **N uncompressed** (H×W patch grid): N/K× fewer.``"""
    n = grid[0] * grid[1]
    parts = f" ({breakdown})" if breakdown else ""
    return (
        f"**{tokens_sent} visual tokens sent to the LLM**{parts} vs **{n} uncompressed** "
        f"({grid[0]}×{grid[1]} patch grid): {n / tokens_sent:.1f}× fewer."
    )


def token_details(inputs: ViewInputs) -> dict[str, Any]:
    """The JSON numbers every view reports: ``tokens_sent``, ``tokens_uncompressed``, ``grid``."""
    return {"tokens_sent": inputs.tokens_sent, "tokens_uncompressed": inputs.tokens_uncompressed, "grid": list(inputs.grid)}


def heat_picture(title: str, image: np.ndarray, heat: np.ndarray) -> Picture:
    """``heat`` ``[H, W]`` (non-negative weights) over the patch grid, drawn on ``image``."""
    heat = np.asarray(heat, dtype=np.float32)
    if heat.ndim != 2:
        raise ValueError(f"a heat map must be [H, W], got shape {heat.shape}")
    return Picture(title, image, heat)


def _patch_scale(image: np.ndarray, grid: tuple[int, int]) -> tuple[int, int]:
    ph, pw = image.shape[0] // grid[0], image.shape[1] // grid[1]
    if ph < 1 or pw < 1:
        raise ValueError(f"an image of {image.shape[0]}x{image.shape[1]} pixels is smaller than the {grid[0]}x{grid[1]} patch grid")
    return ph, pw


def _per_pixel(values: np.ndarray, image: np.ndarray) -> np.ndarray:
    """A ``[H, W]`` grid map repeated to the pixels of ``image`` (cropped to whole patches)."""
    ph, pw = _patch_scale(image, values.shape)
    return np.repeat(np.repeat(values, ph, axis=0), pw, axis=1)


def kept_positions_picture(title: str, image: np.ndarray, grid: tuple[int, int], kept: Sequence[int]) -> Picture:
    """The patches a selection method keeps (row-major indices into the ``H x W`` grid) at full brightness,
    the others dimmed.

    Raises:
        ValueError: If an index is outside the grid.
    """
    rows, cols = grid
    indices = np.asarray(list(kept), dtype=np.int64)
    if indices.size and (indices.min() < 0 or indices.max() >= rows * cols):
        raise ValueError(f"kept positions must be in [0, {rows * cols}) for a {rows}x{cols} grid, got {indices.tolist()}")
    mask = np.zeros(rows * cols, dtype=bool)
    mask[indices] = True
    ph, pw = _patch_scale(image, grid)
    pixels = np.asarray(image[: rows * ph, : cols * pw], dtype=np.float64)
    shade = np.where(_per_pixel(mask.reshape(rows, cols), pixels)[..., None], 1.0, _DIM)
    return Picture(title, pixels * shade)


def regions_picture(title: str, image: np.ndarray, labels: np.ndarray) -> Picture:
    """Each patch tinted by its region label (``[H, W]`` integers): a regional method's regions.

    The image is blended half-and-half with a qualitative colour per label.
    """
    labels = np.asarray(labels)
    if labels.ndim != 2 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"region labels must be an [H, W] integer map, got {labels.dtype} of shape {labels.shape}")
    from matplotlib import colormaps

    palette = colormaps["tab20"]
    colours = np.asarray([palette(int(label) % 20)[:3] for label in range(int(labels.max()) + 1)], dtype=np.float64)
    ph, pw = _patch_scale(image, labels.shape)
    pixels = np.asarray(image[: labels.shape[0] * ph, : labels.shape[1] * pw], dtype=np.float64)
    tint = colours[_per_pixel(labels, pixels)]
    return Picture(title, 0.5 * pixels + 0.5 * tint)


# ---------------------------------------------------------------------------------------------- computing


def tower_attention(model: Any, pixels: torch.Tensor, offset: int) -> Any:
    """The tower's :meth:`encode` output for ``pixels`` with the attention, queries and keys of the layer a compressor
    declaring ``ModelNeeds(attention=offset)`` reads in the model: the model's own rule
    (:func:`llava.model.image_encoding.attention_layer_for`), so a panel shows what the model uses."""
    tower = model.get_vision_tower()
    layer = attention_layer_for(int(getattr(model.config, "mm_vision_select_layer", -2)), int(tower.config.num_hidden_layers), offset,
                                getattr(model.config, "mm_projector_type", None))
    with torch.no_grad():
        return tower.encode(pixels, attention_layer=layer)


def method_of(model: Any) -> tuple[CompressorPlugin, str] | None:
    """The plugin of the model's projector and its type (``mm_projector_type``), or ``None`` (no plugin)."""
    projector_type = getattr(getattr(model, "config", None), "mm_projector_type", None)
    plugin = plugin_for(projector_type)
    return None if plugin is None else (plugin, str(projector_type))


def view_for(model: Any) -> Callable[[Any, ViewInputs], CompressorView | None] | None:
    """The view of the model's projector plugin, or ``None`` (no plugin, or a plugin without a view)."""
    method = method_of(model)
    return method[0].view if method is not None else None


def labelled(view: CompressorView | None, model: Any) -> CompressorView | None:
    """``view`` named by its method: the type and the method's one name first in the summary, both in ``details``."""
    method = method_of(model)
    if view is None or method is None:
        return view
    plugin, projector_type = method
    label = f"`{projector_type}` ({plugin.name}): " if plugin.name != projector_type else f"`{projector_type}`: "
    details = {**dict(view.details), "method": plugin.name, "projector_type": projector_type}
    return replace(view, summary=label + view.summary, details=details)


def _model_input(pixels: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    """``[1, 3, h, w]``: the single (or, for anyres, the global) view of one preprocessed image."""
    first = pixels[0]
    return (first[0] if first.ndim == 4 else first).unsqueeze(0)


def _to_rgb(pixels: torch.Tensor, image_processor: Any) -> np.ndarray:
    mean = torch.tensor(image_processor.image_mean, dtype=torch.float64).view(3, 1, 1)
    std = torch.tensor(image_processor.image_std, dtype=torch.float64).view(3, 1, 1)
    return (pixels[0].double().cpu() * std + mean).clamp(0.0, 1.0).permute(1, 2, 0).numpy()


@torch.inference_mode()
def compute_view(model: Any, image_processor: Any, image: Image.Image) -> CompressorView | None:
    """The panel for ``image``, or ``None`` when the model's projector has no view.

    The image goes through the same preprocessing, vision tower and projector as for generation.
    """
    view = view_for(model)
    if view is None:
        return None
    pixels = _model_input(process_images([image], image_processor, model.config)).to(model.device, dtype=model.dtype)
    return labelled(_view_of_pixels(view, model, image_processor, pixels), model)


#: Frames of a video shown in its panel (evenly spread over the sampled frames).
VIDEO_PANEL_FRAMES = 4


@torch.inference_mode()
def compute_video_view(model: Any, image_processor: Any, video: Any, frames: int = VIDEO_PANEL_FRAMES) -> CompressorView | None:
    """The panel for a video (:class:`llava.video.SampledVideo`): the compressor's own view of up to ``frames`` of
    its sampled frames, each frame's pictures titled with its time, and the video's token count in the summary.

    Each frame is prepared as for generation (:func:`llava.mm_utils.process_video`) and goes through the same
    tower and projector; ``None`` when the model's projector has no view.
    """
    from llava.mm_utils import process_video
    from llava.model.video import video_layout, video_token_count

    view = view_for(model)
    if view is None:
        return None
    pixels = process_video(video.frames, image_processor).to(model.device, dtype=model.dtype)
    shown = sorted(set(np.linspace(0, pixels.shape[0] - 1, min(frames, pixels.shape[0])).round().astype(int).tolist()))
    times = video.frame_times
    per_frame = [_view_of_pixels(view, model, image_processor, pixels[index : index + 1]) for index in shown]
    if any(frame_view is None for frame_view in per_frame):
        return None
    tokens = int(model.encode_images(pixels[:1])[0].shape[0])
    grid = grid_shape(model.get_vision_tower())
    layout = video_layout(model.config, grid, getattr(model.get_model(), "image_newline", None))
    total = video_token_count(pixels.shape[0], tokens, layout)
    pictures = tuple(
        Picture(f"t={times[index]:.1f}s · {picture.title}", picture.image, picture.heat)
        for index, frame_view in zip(shown, per_frame) for picture in frame_view.pictures
    )
    summary = (f"**{total} visual tokens for {pixels.shape[0]} frames** ({tokens} per frame from the compressor, "
               f"newlines by mm_newline_position) vs **{pixels.shape[0] * grid[0] * grid[1]} uncompressed**; "
               f"{len(shown)} frames shown. " + per_frame[0].summary)
    details = {**dict(per_frame[0].details), "frames": int(pixels.shape[0]), "frames_shown": shown, "video_tokens": total}
    return labelled(CompressorView(summary=summary, pictures=pictures, help=per_frame[0].help, details=details), model)


def _view_of_pixels(view: Callable[[Any, ViewInputs], CompressorView | None], model: Any, image_processor: Any,
                    pixels: torch.Tensor) -> CompressorView | None:
    """The plugin's view of one preprocessed view ``[1, 3, h, w]``."""
    projector = model.get_model().mm_projector
    features = model.get_vision_tower()(pixels)
    weight = next(projector.parameters(), None)
    if weight is not None:
        features = features.to(device=weight.device, dtype=weight.dtype)
    inputs = ViewInputs(
        image=_to_rgb(pixels, image_processor), features=features, grid=grid_shape(model.get_vision_tower()),
        tokens_sent=int(model.encode_images(pixels)[0].shape[0]), model=model, pixels=pixels,
    )
    return view(projector, inputs)


# ---------------------------------------------------------------------------------------------- drawing


def render_png(view: CompressorView) -> bytes:
    """Draw the view's pictures in a grid (heat maps in ``inferno`` over their image)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    pictures = view.pictures
    if not pictures:
        raise ValueError("a compressor view needs at least one picture")
    columns = min(len(pictures), _COLUMNS)
    rows = -(-len(pictures) // columns)
    figure = Figure(figsize=(columns * _PANEL_INCHES, rows * (_PANEL_INCHES + 0.25)), dpi=100)
    FigureCanvasAgg(figure)
    for index, picture in enumerate(pictures):
        axes = figure.add_subplot(rows, columns, index + 1)
        axes.imshow(np.clip(picture.image, 0.0, 1.0), interpolation="nearest")
        if picture.heat is not None:
            height, width = picture.image.shape[:2]
            top = float(picture.heat.max()) or 1.0
            axes.imshow(
                picture.heat, cmap="inferno", alpha=0.6, vmin=0.0, vmax=top, extent=(0, width, height, 0),
                interpolation="nearest",
            )
        axes.set_title(picture.title, fontsize=7)
        axes.set_xticks([])
        axes.set_yticks([])
    figure.tight_layout(pad=0.4)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def view_payload(view: CompressorView | None) -> dict[str, Any]:
    """JSON for the worker's ``/worker_get_compressor_view``: ``{"available": False}`` or
    ``{"available": True, "png": base64, "summary": str, "help": str, **details}``."""
    if view is None:
        return {"available": False}
    png = base64.b64encode(render_png(view)).decode("ascii")
    return {**dict(view.details), "available": True, "png": png, "summary": view.summary, "help": view.help}


__all__ = [
    "tower_attention",
    "CompressorView",
    "Picture",
    "ViewInputs",
    "compute_video_view",
    "compute_view",
    "heat_picture",
    "kept_positions_picture",
    "labelled",
    "method_of",
    "regions_picture",
    "render_png",
    "token_details",
    "tokens_summary",
    "view_for",
    "view_payload",
]
