"""Multimodal helpers: image loading and preprocessing, prompt tokenisation with image markers, and
generation stopping.

The behaviour matches upstream LLaVA where checkpoints depend on it:

* ``process_images`` with ``image_aspect_ratio == "pad"`` pads to a square filled with the processor's
  mean colour (``(122, 116, 104)`` for CLIP) before the usual resize and centre crop;
* ``tokenizer_image_token`` tokenises the text around each ``<image>`` separately, keeps exactly one
  BOS and puts ``IMAGE_TOKEN_INDEX`` (-200) where each image goes; tokenising the whole prompt at once
  would give different ids next to the image.

Why this file is over 500 lines: it is upstream's module path for a dozen public helpers that eval scripts,
LLaVA-NeXT code and lmms-eval import from here by name (``process_images``, ``tokenizer_image_token``,
``get_model_name_from_path``, ``KeywordsStoppingCriteria``, the AnyRes geometry); each section below is one of them.
"""

from __future__ import annotations

import ast
import base64
import binascii
import logging
import math
import os
import re
from io import BytesIO
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from transformers import StoppingCriteria

from llava import net
from llava.constants import DEFAULT_IM_END_TOKEN, DEFAULT_IM_START_TOKEN, DEFAULT_IMAGE_TOKEN, IMAGE_TOKEN_INDEX
from llava.pixels import BOMB_ERRORS, bomb_guard, pixel_limit, too_many_pixels
from llava.utils import UserError

logger = logging.getLogger(__name__)

Resolution = tuple[int, int]  # (width, height)

# ---------------------------------------------------------------------- image loading


#: What PIL raises for data that is not a decodable image (unknown format, truncated or corrupt pixels).
UNREADABLE_ERRORS: tuple[type[BaseException], ...] = (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError)


class ImageUnreadable(UserError):
    """An image that cannot or will not be decoded; ``str(error)`` is one sentence for the user."""


def open_image(source: str | os.PathLike[str] | bytes, *, what: str | None = None, convert: str | None = "RGB") -> Image.Image:
    """Open and fully decode an image file (a path, or the file's bytes), the one way every loader does.

    Args:
        source: A local path, or the bytes of an image file.
        what: How to name the image in errors (default: the path, or "the embedded image").
        convert: Mode to convert to (``None`` keeps the file's mode).

    Raises:
        ImageUnreadable: If the file is missing, is a decompression bomb (more than ``Image.MAX_IMAGE_PIXELS``
            pixels), or is not a decodable image.
    """
    is_bytes = isinstance(source, (bytes, bytearray))
    name = what or ("the embedded image" if is_bytes else f"image file {os.fspath(source)!r}")
    try:
        with bomb_guard(), Image.open(BytesIO(source) if is_bytes else source) as image:
            image.load()
            return image.convert(convert) if convert else image.copy()
    except FileNotFoundError:
        raise ImageUnreadable(f"{name} does not exist") from None
    except BOMB_ERRORS:
        raise ImageUnreadable(too_many_pixels(name, pixel_limit())) from None
    except UnidentifiedImageError:
        raise ImageUnreadable(f"{name} is not a readable image (not a known image format)") from None
    except UNREADABLE_ERRORS as error:
        raise ImageUnreadable(f"{name} is not a readable image (damaged or truncated: {error})") from None


def load_image_from_base64(image: str) -> Image.Image:
    """Decode a base64-encoded image file (as sent by the demo) into a PIL image, mode unchanged.

    Raises:
        ImageUnreadable: If ``image`` is not base64 or not a decodable image (see :func:`open_image`).
    """
    try:
        data = base64.b64decode(image, validate=True)
    except (binascii.Error, ValueError):
        raise ImageUnreadable("the embedded base64 image is not valid base64") from None
    return open_image(data, what="the embedded base64 image", convert=None)


def load_image(path_or_url: str | os.PathLike[str]) -> Image.Image:
    """Open a local image file, or an ``http(s)`` URL (through :mod:`llava.net`), as RGB.

    Raises:
        ImageUnreadable: (a ValueError) If the file is missing, the download fails (see
            :func:`_load_image_from_url`), or the file or download is not a readable image.
    """
    source = os.fspath(path_or_url)
    if source.startswith(("http://", "https://")):
        return _load_image_from_url(source)
    return open_image(source)


#: Seconds for a whole image download (connection, headers and body), and the largest image file accepted.
URL_DEADLINE = 30.0
URL_MAX_BYTES = 64 * 1024 * 1024


def _load_image_from_url(url: str) -> Image.Image:
    """Download ``url`` with the package's one HTTP client: a total deadline, a size cap, and no redirect to
    another origin (a redirect within the origin is followed).

    Raises:
        ImageUnreadable: One sentence naming the URL: unreachable, too slow, too large, redirected elsewhere, an
            HTTP error status, or not a readable image.
    """
    try:
        response = net.request("GET", url, deadline=URL_DEADLINE, max_bytes=URL_MAX_BYTES)
    except net.NetError as error:
        raise ImageUnreadable(f"could not load an image from {url!r} ({error})") from None
    if not response.ok:
        raise ImageUnreadable(f"could not load an image from {url!r} (HTTP {response.status})")
    return open_image(response.body, what=f"the image at {url!r}")


# ---------------------------------------------------------------------- geometry


def expand2square(pil_img: Image.Image, background_color: Any) -> Image.Image:
    """Pad an image to a square, centring it on the longer side's axis.

    Args:
        pil_img: Image of size ``(width, height)``.
        background_color: Fill colour in the image's mode (e.g. an RGB tuple).

    Returns:
        The image itself if already square, else a new ``max(w, h) x max(w, h)`` image.
    """
    width, height = pil_img.size
    if width == height:
        return pil_img
    side = max(width, height)
    result = Image.new(pil_img.mode, (side, side), background_color)
    result.paste(pil_img, ((side - width) // 2, (side - height) // 2))
    return result


def select_best_resolution(
    original_size: Resolution, possible_resolutions: Sequence[Sequence[int]]
) -> Resolution:
    """Pick the candidate resolution that keeps the most image detail, then wastes the least area.

    An image scaled to fit a candidate keeps ``min(scaled area, original area)`` pixels of detail
    (upscaling adds none); the remaining candidate area is padding. Ties keep the earlier candidate.

    Args:
        original_size: ``(width, height)`` of the image.
        possible_resolutions: Candidate ``(width, height)`` pairs.

    Returns:
        The chosen ``(width, height)``.

    Raises:
        ValueError: If there are no candidates.
    """
    if not possible_resolutions:
        raise ValueError("expected at least one candidate resolution, got none")
    width, height = original_size
    best: Resolution = (0, 0)
    best_detail, best_waste = -1, math.inf
    for cand_width, cand_height in possible_resolutions:
        scale = min(cand_width / width, cand_height / height)
        detail = min(int(width * scale) * int(height * scale), width * height)
        waste = cand_width * cand_height - detail
        if detail > best_detail or (detail == best_detail and waste < best_waste):
            best, best_detail, best_waste = (int(cand_width), int(cand_height)), detail, waste
    return best


def resize_and_pad_image(image: Image.Image, target_resolution: Resolution) -> Image.Image:
    """Fit an image inside ``target_resolution`` keeping its aspect ratio, centred on black RGB.

    Args:
        image: Image of any size.
        target_resolution: ``(width, height)`` of the result.
    """
    width, height = image.size
    target_width, target_height = target_resolution
    scale_w, scale_h = target_width / width, target_height / height
    if scale_w < scale_h:
        new_size = (target_width, min(math.ceil(height * scale_w), target_height))
    else:
        new_size = (min(math.ceil(width * scale_h), target_width), target_height)
    canvas = Image.new("RGB", (target_width, target_height), (0, 0, 0))
    canvas.paste(
        image.resize(new_size),
        ((target_width - new_size[0]) // 2, (target_height - new_size[1]) // 2),
    )
    return canvas


def divide_to_patches(image: Image.Image, patch_size: int) -> list[Image.Image]:
    """Cut an image into ``patch_size`` squares, row by row (left to right, top to bottom)."""
    width, height = image.size
    return [
        image.crop((left, top, left + patch_size, top + patch_size))
        for top in range(0, height, patch_size)
        for left in range(0, width, patch_size)
    ]


#: NeXT's pinpoint shorthand ``"(1x1),...,(6x6)"``: every (columns, rows) pair in the two ranges, in tower sides.
_PINPOINT_RANGE = re.compile(r"^\s*\(\s*(\d+)\s*x\s*(\d+)\s*\)\s*,\s*\.\.\.\s*,\s*\(\s*(\d+)\s*x\s*(\d+)\s*\)\s*$")


def _pinpoint_range(text: str, side: int | None) -> list[Resolution] | None:
    """Expand the ``"(AxB),...,(CxD)"`` shorthand to ``(i * side, j * side)`` for i in A..C, j in B..D; ``None``
    when ``text`` is not the shorthand."""
    match = _PINPOINT_RANGE.match(text)
    if match is None:
        return None
    first_cols, first_rows, last_cols, last_rows = (int(group) for group in match.groups())
    if side is None:
        raise ValueError(
            f"image_grid_pinpoints {text!r} is a range of grids in tower sides, which needs the tower's input side; "
            "give an explicit list of [width, height] pairs instead"
        )
    if not 1 <= first_cols <= last_cols or not 1 <= first_rows <= last_rows:
        raise ValueError(f"image_grid_pinpoints {text!r} must run from a smaller grid to a larger one, each side at least 1")
    return [
        (cols * side, rows * side)
        for cols in range(first_cols, last_cols + 1)
        for rows in range(first_rows, last_rows + 1)
    ]


def parse_grid_pinpoints(grid_pinpoints: str | Sequence[Sequence[int]], side: int | None = None) -> list[Resolution]:
    """Return ``image_grid_pinpoints`` as a list of ``(width, height)`` pairs.

    Args:
        grid_pinpoints: A list of pairs, its Python-literal string form as stored in ``config.json`` (e.g.
            ``"[[336, 672], [672, 336], [672, 672]]"``), or LLaVA-NeXT's range shorthand ``"(1x1),...,(6x6)"``
            (every grid from 1x1 to 6x6 views, in units of ``side``).
        side: The tower's input side in pixels; needed only for the range shorthand.

    Raises:
        ValueError: If the value is not a non-empty list of integer pairs or the range shorthand.
    """
    value: Any = grid_pinpoints
    if isinstance(grid_pinpoints, str):
        expanded = _pinpoint_range(grid_pinpoints, side)
        if expanded is not None:
            return expanded
        try:
            value = ast.literal_eval(grid_pinpoints)
        except (ValueError, SyntaxError):
            value = None
    try:
        pairs = [(int(w), int(h)) for w, h in value]
    except (TypeError, ValueError):
        pairs = []
    if not pairs or any(w <= 0 or h <= 0 for w, h in pairs):
        raise ValueError(
            f"image_grid_pinpoints must be a non-empty list of positive [width, height] pairs or a range such as "
            f"'(1x1),...,(3x3)', got {grid_pinpoints!r}"
        )
    return pairs


def get_anyres_image_grid_shape(
    image_size: Resolution, grid_pinpoints: str | Sequence[Sequence[int]], patch_size: int
) -> tuple[int, int]:
    """Return the ``(columns, rows)`` of patches an image of ``image_size`` is divided into by anyres."""
    width, height = select_best_resolution(image_size, parse_grid_pinpoints(grid_pinpoints, patch_size))
    return width // patch_size, height // patch_size


# ---------------------------------------------------------------------- processors


def _size_entry(size: Any, key: str) -> int | None:
    """Read ``key`` from a processor size spec: a dict, transformers' ``SizeDict``, an int, or a
    ``(height, width)`` pair (LLaVA-NeXT's SigLIP processor stores its size as a tuple)."""
    if size is None:
        return None
    if isinstance(size, int):
        return size if key in ("height", "width", "shortest_edge") else None
    if isinstance(size, (tuple, list)):
        return int(size[0 if key == "height" else 1]) if key in ("height", "width") and len(size) == 2 else None
    try:
        value = size[key]
    except (KeyError, TypeError):
        value = getattr(size, key, None)
    return None if value is None else int(value)


def _processor_sides(processor: Any) -> tuple[int, int]:
    """Return ``(patch side, base-view side)`` for anyres from the tower's image processor.

    Both are the tower's input side. CLIP processors resize the shortest edge then centre-crop, so the side is
    ``crop_size["height"]`` (the base view is squashed to ``size["shortest_edge"]``, equal in released
    configs); SigLIP processors resize straight to ``size["height"]`` and have no crop.
    """
    crop = getattr(processor, "crop_size", None) if getattr(processor, "do_center_crop", True) else None
    size = getattr(processor, "size", None)
    patch = _size_entry(crop, "height") or _size_entry(size, "height") or _size_entry(size, "shortest_edge")
    base = _size_entry(size, "shortest_edge") or _size_entry(size, "height") or patch
    if patch is None or base is None:
        raise ValueError(
            f"cannot read the input size from image processor {type(processor).__name__}; "
            "expected crop_size['height'] or size['shortest_edge'/'height']"
        )
    return patch, base


def _preprocess_one(processor: Any, image: Image.Image) -> torch.Tensor:
    """Run the processor on one image and return its ``[3, H, W]`` pixel tensor."""
    return processor.preprocess(image, return_tensors="pt")["pixel_values"][0]


def process_anyres_image(
    image: Image.Image, processor: Any, grid_pinpoints: str | Sequence[Sequence[int]]
) -> torch.Tensor:
    """Turn one image into a resized global view plus the patches of its best-fitting grid.

    Args:
        image: Input image.
        processor: The tower's image processor (CLIP: resize + centre crop; SigLIP: resize only).
        grid_pinpoints: Candidate resolutions (see :func:`parse_grid_pinpoints`).

    Returns:
        ``[1 + patches, 3, side, side]``: the global view first, then the patches in row order.
    """
    patch_side, base_side = _processor_sides(processor)
    best = select_best_resolution(image.size, parse_grid_pinpoints(grid_pinpoints, patch_side))
    patches = divide_to_patches(resize_and_pad_image(image, best), patch_side)
    views = [image.resize((base_side, base_side)), *patches]
    return torch.stack([_preprocess_one(processor, view) for view in views], dim=0)


#: ``image_aspect_ratio`` values that select anyres: ``anyres`` and LLaVA-NeXT's ``anyres_max_<N>``.
_ANYRES = re.compile(r"^anyres(?:_max_(\d+))?$")


def is_anyres(image_aspect_ratio: str | None) -> bool:
    """Whether ``image_aspect_ratio`` is ``"anyres"`` or ``"anyres_max_<N>"``."""
    return image_aspect_ratio is not None and _ANYRES.match(image_aspect_ratio) is not None


def anyres_max_views(image_aspect_ratio: str | None) -> int | None:
    """N of ``"anyres_max_<N>"`` (the stitched ``spatial_unpad`` map is shrunk to about N views), else ``None``."""
    match = _ANYRES.match(image_aspect_ratio or "")
    return int(match.group(1)) if match and match.group(1) else None


def process_images(
    images: Sequence[Image.Image], image_processor: Any, model_cfg: Any
) -> torch.Tensor | list[torch.Tensor]:
    """Preprocess images the way the model was trained, per ``model_cfg.image_aspect_ratio``.

    * ``"pad"``: pad to a square filled with ``int(255 * mean)`` per channel, then the processor.
    * ``"anyres"`` / ``"anyres_max_*"``: :func:`process_anyres_image` with
      ``model_cfg.image_grid_pinpoints``.
    * anything else (``None``, ``"square"``...): the processor alone (CLIP: resize the shortest edge and
      centre-crop; SigLIP: resize straight to the square side, no crop).

    The pad colour follows the processor's mean: ``(122, 116, 104)`` for CLIP, ``(127, 127, 127)`` for SigLIP.

    Args:
        images: PIL images.
        image_processor: The tower's image processor (``tower.image_processor``: CLIP or SigLIP).
        model_cfg: Object with an optional ``image_aspect_ratio`` attribute (the model config).

    Returns:
        ``[num_images, 3, H, W]`` (``[num_images, views, 3, H, W]`` for anyres) when all images
        give the same shape, else a list of per-image tensors.

    Raises:
        ValueError: If ``images`` is empty.
    """
    if len(images) == 0:
        raise ValueError("process_images expected at least one image, got an empty sequence")
    aspect_ratio = getattr(model_cfg, "image_aspect_ratio", None)
    if aspect_ratio == "pad":
        fill = tuple(int(channel * 255) for channel in image_processor.image_mean)
        processed = [
            _preprocess_one(image_processor, expand2square(_as_rgb(image), fill)) for image in images
        ]
    elif is_anyres(aspect_ratio):
        pinpoints = getattr(model_cfg, "image_grid_pinpoints", None)
        processed = [process_anyres_image(image, image_processor, pinpoints) for image in images]
    else:
        return image_processor(list(images), return_tensors="pt")["pixel_values"]
    if all(tensor.shape == processed[0].shape for tensor in processed):
        return torch.stack(processed, dim=0)
    return processed


def images_to_pixels(
    images: Sequence[Image.Image], image_processor: Any, model_cfg: Any, device: Any, dtype: torch.dtype
) -> tuple[torch.Tensor | list[torch.Tensor], list[tuple[int, int]]]:
    """:func:`process_images` on ``device`` in ``dtype``, and each image's ``(width, height)`` (``image_sizes``).

    Per-image tensors (anyres images of different shapes) stay a list, each moved.
    """
    pixels = process_images(images, image_processor, model_cfg)
    if isinstance(pixels, list):
        pixels = [tensor.to(device, dtype=dtype) for tensor in pixels]
    else:
        pixels = pixels.to(device, dtype=dtype)
    return pixels, [image.size for image in images]


def process_video(frames: Any, image_processor: Any) -> torch.Tensor:
    """``[F, 3, side, side]`` pixels of a video's frames, as LLaVA-NeXT prepares them: the processor on the frames
    as one batch (``image_processor.preprocess(frames, return_tensors="pt")["pixel_values"]``), no padding, no AnyRes.

    Args:
        frames: ``[F, H, W, 3]`` uint8 RGB (a :class:`llava.video.SampledVideo`'s ``frames``), or a list of PIL images.
        image_processor: The vision tower's processor.
    """
    if isinstance(frames, np.ndarray):
        frames = [Image.fromarray(frame) for frame in frames]
    return image_processor.preprocess(list(frames), return_tensors="pt")["pixel_values"]


def visuals_to_pixels(
    visuals: Sequence[Any], image_processor: Any, model_cfg: Any, device: Any, dtype: torch.dtype
) -> tuple[Any, list[Any], list[str] | None]:
    """:func:`images_to_pixels` for a mix of PIL images and videos (:class:`llava.video.SampledVideo`).

    Returns:
        ``(pixels, image_sizes, modalities)``. Without videos: exactly :func:`images_to_pixels` and ``None``.
        With videos: one tensor per item (``[F, 3, side, side]`` for a video, the image's processed views
        otherwise), each item's ``(width, height)`` and a ``"video"`` / ``"image"`` tag per item.
    """
    from llava.video import SampledVideo

    if not any(isinstance(visual, SampledVideo) for visual in visuals):
        pixels, sizes = images_to_pixels(visuals, image_processor, model_cfg, device, dtype)
        return pixels, sizes, None
    items, sizes, modalities = [], [], []
    for visual in visuals:
        if isinstance(visual, SampledVideo):
            items.append(process_video(visual.frames, image_processor))
            modalities.append("video")
        else:
            processed = process_images([visual], image_processor, model_cfg)
            items.append(processed[0])
            modalities.append("image")
        sizes.append(visual.size)
    return [item.to(device, dtype=dtype) for item in items], sizes, modalities


def image_marker(model_cfg: Any) -> str:
    """``<image>``, wrapped in ``<im_start>``/``<im_end>`` when the model was trained with them."""
    if getattr(model_cfg, "mm_use_im_start_end", False):
        return DEFAULT_IM_START_TOKEN + DEFAULT_IMAGE_TOKEN + DEFAULT_IM_END_TOKEN
    return DEFAULT_IMAGE_TOKEN


def _as_rgb(image: Image.Image) -> Image.Image:
    # The fill colour is an RGB triple, so padding needs an RGB image.
    return image if image.mode == "RGB" else image.convert("RGB")


# ---------------------------------------------------------------------- tokenisation


def tokenizer_image_token(
    prompt: str,
    tokenizer: Any,
    image_token_index: int = IMAGE_TOKEN_INDEX,
    return_tensors: str | None = None,
) -> list[int] | torch.Tensor:
    """Tokenise a prompt, putting ``image_token_index`` at every ``<image>``.

    Each text chunk between ``<image>`` markers is tokenised on its own. If the tokenizer adds a BOS
    token, the result starts with exactly one BOS and the BOS of every other chunk is dropped.

    Args:
        prompt: Text with zero or more ``<image>`` markers.
        tokenizer: A transformers tokenizer.
        image_token_index: Id written at each marker (-200 by default).
        return_tensors: ``None`` for a list of ids, ``"pt"`` for a 1-D ``torch.long`` tensor.

    Returns:
        ``[seq_len]`` token ids.

    Raises:
        ValueError: If ``return_tensors`` is neither ``None`` nor ``"pt"``.
    """
    if return_tensors not in (None, "pt"):
        raise ValueError(f"unsupported return_tensors {return_tensors!r}; expected None or 'pt'")
    chunks = [tokenizer(chunk).input_ids for chunk in prompt.split(DEFAULT_IMAGE_TOKEN)]
    bos = tokenizer.bos_token_id
    adds_bos = bos is not None and len(chunks[0]) > 0 and chunks[0][0] == bos
    input_ids: list[int] = [bos] if adds_bos else []
    for index, chunk in enumerate(chunks):
        if index > 0:
            input_ids.append(image_token_index)
        if adds_bos and chunk and chunk[0] == bos:
            chunk = chunk[1:]
        input_ids.extend(chunk)
    if return_tensors == "pt":
        return torch.tensor(input_ids, dtype=torch.long)
    return input_ids


def get_model_name_from_path(model_path: str | os.PathLike[str]) -> str:
    """Return the model name used for loader dispatch and answer files.

    The last path component, or ``"<run>_checkpoint-<N>"`` for a ``.../<run>/checkpoint-<N>`` path;
    trailing slashes are ignored.

    Raises:
        ValueError: If the path is empty.
    """
    parts = [part for part in os.fspath(model_path).strip("/").split("/") if part]
    if not parts:
        raise ValueError(f"expected a model path or hub name, got {model_path!r}")
    if parts[-1].startswith("checkpoint-") and len(parts) > 1:
        return f"{parts[-2]}_{parts[-1]}"
    return parts[-1]


# ---------------------------------------------------------------------- generation


class KeywordsStoppingCriteria(StoppingCriteria):
    """Stop each sequence once its newly generated tail contains one of ``keywords``.

    A row is done when its last tokens equal a keyword's token ids, or when the decoded text of its
    last few generated tokens contains the keyword (keywords can tokenise differently in context).
    Only generated tokens are inspected, so a keyword inside the prompt (e.g. ``"###"``) never
    triggers. Works whether ``generate`` returns prompt + new tokens (called with ``input_ids``) or
    new tokens only (called with ``inputs_embeds``).

    Args:
        keywords: Stop strings, e.g. ``["</s>"]`` or ``["###"]``.
        tokenizer: The model's tokenizer.
        input_ids: ``[batch, prompt_len]`` prompt ids passed to ``generate``.
    """

    def __init__(self, keywords: Sequence[str], tokenizer: Any, input_ids: torch.Tensor) -> None:
        if isinstance(keywords, str):
            keywords = [keywords]
        if not keywords or any(not keyword for keyword in keywords):
            raise ValueError(f"expected one or more non-empty keywords, got {keywords!r}")
        self.keywords = list(keywords)
        self.tokenizer = tokenizer
        self.keyword_ids: list[torch.Tensor] = []
        for keyword in self.keywords:
            ids = tokenizer(keyword).input_ids
            if len(ids) > 1 and ids[0] == tokenizer.bos_token_id:
                ids = ids[1:]
            self.keyword_ids.append(torch.tensor(ids, dtype=torch.long))
        self.max_keyword_len = max(len(ids) for ids in self.keyword_ids)
        self.start_len = int(input_ids.shape[1])
        self._prompt_len: int | None = None

    def _num_generated(self, length: int) -> int:
        """Number of generated tokens in a ``length``-long output row.

        On the first step exactly one token is new, which tells whether the rows include the prompt.
        """
        if self._prompt_len is None or length <= self._prompt_len:
            self._prompt_len = max(0, min(self.start_len, length - 1))
        return length - self._prompt_len

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor | None = None, **kwargs: Any
    ) -> torch.BoolTensor:
        """Return ``[batch]`` booleans, True for rows that should stop.

        Args:
            input_ids: ``[batch, length]`` sequences generated so far.
            scores: Unused.
        """
        batch, length = input_ids.shape
        generated = self._num_generated(length)
        done = torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
        for ids in self.keyword_ids:
            width = ids.numel()
            if 0 < width <= generated:
                done |= (input_ids[:, -width:] == ids.to(input_ids.device)).all(dim=1)
        tail_len = min(generated, self.max_keyword_len)
        if tail_len > 0:
            texts = self.tokenizer.batch_decode(input_ids[:, -tail_len:], skip_special_tokens=True)
            hits = [any(keyword in text for keyword in self.keywords) for text in texts]
            done |= torch.tensor(hits, dtype=torch.bool, device=input_ids.device)
        return done


__all__ = [
    "KeywordsStoppingCriteria",
    "divide_to_patches",
    "expand2square",
    "anyres_max_views",
    "get_anyres_image_grid_shape",
    "is_anyres",
    "get_model_name_from_path",
    "image_marker",
    "images_to_pixels",
    "load_image",
    "load_image_from_base64",
    "BOMB_ERRORS",
    "ImageUnreadable",
    "bomb_guard",
    "open_image",
    "parse_grid_pinpoints",
    "process_anyres_image",
    "process_images",
    "resize_and_pad_image",
    "select_best_resolution",
    "tokenizer_image_token",
]
