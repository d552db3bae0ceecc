"""The demo's compressor panel: what a compressor keeps of an image, drawn by the compressor's own view.

A compressor plugin may declare ``view(projector, ViewInputs) -> CompressorView | None``
(:class:`llava.model.multimodal_projector.plugins.CompressorPlugin`). :func:`compute_view` prepares the image
exactly as for generation, runs the vision tower, and hands the view a :class:`ViewInputs`; the view returns
a :class:`CompressorView`: a one-line summary and a few :class:`Picture` s. This module draws them
(:func:`render_png`) and turns them into the worker's JSON (:func:`view_payload`).

Picture helpers for the usual kinds of compressor:

* :func:`heat_picture` — a weight map over the patch grid on top of the image (soft pooling, attention);
* :func:`kept_positions_picture` — the patch positions a selection method keeps, the rest dimmed;
* :func:`regions_picture` — a label per patch (regional methods: which region each patch feeds).

Models whose projector has no view have no panel (:func:`view_for` returns ``None``).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from llava.mm_utils import process_images
from llava.model.image_encoding import grid_shape
from llava.model.multimodal_projector.plugins import plugin_for

#: Pictures per row of the rendered figure.
_COLUMNS = 4
_PANEL_INCHES = 1.7
#: How much a dropped patch is dimmed in :func:`kept_positions_picture`.
_DIM = 0.25


@dataclass(frozen=True)
class ViewInputs:
    """What a view gets for one image.

    Attributes:
        image: ``[h, w, 3]`` float64 in [0, 1]: the model's input image (after the checkpoint's padding and
            resizing), de-normalised back to RGB.
        features: ``[1, T, D]`` the tower's select-layer features, on the projector's device and dtype.
        grid: ``(H, W)`` patch grid.
        tokens_sent: K, visual tokens per image the model sends to the LLM.
        model: The whole model, for views that need more than the features.
        pixels: ``[1, 3, h, w]`` the model input itself (for views that ask the tower for more, e.g. attention).
    """

    image: np.ndarray
    features: torch.Tensor
    grid: tuple[int, int]
    tokens_sent: int
    model: Any = None
    pixels: torch.Tensor | None = None

    @property
    def tokens_uncompressed(self) -> int:
        """N = H·W, what an uncompressed projector (e.g. mlp2x_gelu) sends."""
        return self.grid[0] * self.grid[1]


@dataclass(frozen=True)
class Picture:
    """One picture of the panel: ``image`` with an optional ``[H, W]`` heat map over the patch grid."""

    title: str
    image: np.ndarray
    heat: np.ndarray | None = None


@dataclass(frozen=True)
class CompressorView:
    """A compressor's panel for one image.

    Attributes:
        summary: One Markdown line (see :func:`tokens_summary`).
        pictures: What to draw, in order.
        help: Markdown shown under the picture: how to read it.
        details: JSON-able numbers for the worker's answer (e.g. the budget split).
        arrays: The arrays behind the pictures (e.g. weight maps), for in-process callers and tests.
    """

    summary: str
    pictures: tuple[Picture, ...]
    help: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)


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


def view_for(model: Any) -> Callable[[Any, ViewInputs], CompressorView | None] | None:
    """The view of the model's projector plugin, or ``None`` (no plugin, or a plugin without a view)."""
    config = getattr(model, "config", None)
    plugin = plugin_for(getattr(config, "mm_projector_type", None))
    return plugin.view if plugin is not None else None


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
    return _view_of_pixels(view, model, image_processor, pixels)


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
    return CompressorView(summary=summary, pictures=pictures, help=per_frame[0].help, details=details)


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
    "CompressorView",
    "Picture",
    "ViewInputs",
    "compute_video_view",
    "compute_view",
    "heat_picture",
    "kept_positions_picture",
    "regions_picture",
    "render_png",
    "token_details",
    "tokens_summary",
    "view_for",
    "view_payload",
]
