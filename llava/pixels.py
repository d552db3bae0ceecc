"""The pixel bound: how many pixels a picture or a video frame may have, checked before its pixels are decoded.

One rule for every decode in the project (issue 31, fault group 2). Local commands bound a picture by PIL's
``Image.MAX_IMAGE_PIXELS`` (89,478,485 pixels unless the user changes it); PIL's warning between one and two times
that limit counts as an error, since decoding such a file can take gigabytes. Servers pass their own, smaller
limit (``--max-image-megapixels``). Images are held to it by PIL while it reads the header (:func:`bomb_guard`);
video frames by :func:`over_pixel_bound`, from the stream's header before any frame is decoded and again for every
decoded frame (:mod:`llava.video`). The sentence is the same for both (:func:`too_many_pixels`).

Imports only PIL, so the video reader and the servers' upload checks use it without the model stack.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from PIL import Image

#: What PIL raises for an image with more pixels than ``Image.MAX_IMAGE_PIXELS`` (the warning, between one and
#: two times the limit, is turned into an error by :func:`bomb_guard`).
BOMB_ERRORS: tuple[type[BaseException], ...] = (Image.DecompressionBombError, Image.DecompressionBombWarning)


@contextlib.contextmanager
def bomb_guard() -> Iterator[None]:
    """Within the block, PIL's decompression-bomb warning is an error (see :data:`BOMB_ERRORS`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        yield


def pixel_limit(limit: int | None = None) -> int | None:
    """``limit``, or PIL's ``Image.MAX_IMAGE_PIXELS`` as it is now (``None``: the user switched PIL's bound off)."""
    return Image.MAX_IMAGE_PIXELS if limit is None else limit


def too_many_pixels(name: str, limit: int, size: tuple[int, int] | None = None) -> str:
    """The sentence refusing ``name`` (e.g. ``"image file 'x.png'"``, ``"video file 'x.mp4'"``) over ``limit`` pixels."""
    shown = f" ({size[0]}x{size[1]})" if size else ""
    bound = (f"the {limit} PIL decodes safely (a possible decompression bomb)" if limit == Image.MAX_IMAGE_PIXELS
             else f"the {limit} allowed here")
    return f"{name}{shown} has more pixels than {bound}; downscale it"


def over_pixel_bound(width: int, height: int, limit: int | None = None) -> int | None:
    """The bound a ``width`` x ``height`` picture or frame exceeds, or ``None`` when it is within it.

    Args:
        width, height: From the file's header, or a decoded frame's (a stream whose frames change size).
        limit: The bound in pixels; ``None`` is PIL's ``Image.MAX_IMAGE_PIXELS`` (no bound if that is ``None``).
    """
    bound = pixel_limit(limit)
    return bound if bound is not None and int(width) * int(height) > bound else None


__all__ = ["BOMB_ERRORS", "bomb_guard", "over_pixel_bound", "pixel_limit", "too_many_pixels"]
