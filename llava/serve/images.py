"""Checks on images that reach a server: size in bytes, file type and pixel count.

Every serving entry point (model worker, web server, one-process demo) opens untrusted images through
:func:`open_image_bytes`, :func:`open_image_file` or :func:`decode_base64_image`. The header is read first,
so an oversized image is refused before its pixels are decoded. Each refusal is an :class:`ImageRejected`
(a ``ValueError``) whose message is one sentence naming the problem and the limit.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from llava.pixels import BOMB_ERRORS, bomb_guard

#: Formats a browser can show and the processors can read; anything else is refused.
ACCEPTED_FORMATS: tuple[str, ...] = ("PNG", "JPEG", "WEBP", "BMP", "GIF")
DEFAULT_MAX_PIXELS = 25_000_000
DEFAULT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_MAX_IMAGES = 8

_ACCEPTED_TEXT = "PNG, JPEG, WebP, BMP or GIF"


class ImageRejected(ValueError):
    """An uploaded image that the server will not process; ``str(error)`` is meant for the user."""


@dataclass(frozen=True)
class ImageLimits:
    """Upper bounds for one uploaded image.

    Args:
        max_pixels: Width x height above which an image is refused (default 25 megapixels).
        max_bytes: Encoded file size above which an image is refused (default 20 MiB).
        max_images: Images one request may carry (default 8).
    """

    max_pixels: int = DEFAULT_MAX_PIXELS
    max_bytes: int = DEFAULT_MAX_BYTES
    max_images: int = DEFAULT_MAX_IMAGES

    def __post_init__(self) -> None:
        for name in ("max_pixels", "max_bytes", "max_images"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    @classmethod
    def from_megapixels(cls, megapixels: float, megabytes: float, max_images: int = DEFAULT_MAX_IMAGES) -> ImageLimits:
        """Limits given in megapixels (10⁶ pixels) and MiB, as the command-line flags take them (each checked by the
        flags' own rule, :mod:`llava.numeric`, also when called from code)."""
        from llava.numeric import MAX_COUNT, MAX_MEGAPIXELS, MAX_MIB, check_number

        check_number(megapixels, "--max-image-megapixels", 0, MAX_MEGAPIXELS, lo_open=True, unit="megapixels")
        check_number(megabytes, "--max-upload-mb", 0, MAX_MIB, lo_open=True, unit="MiB")
        check_number(max_images, "--max-images", 1, MAX_COUNT, integer=True)
        return cls(max_pixels=int(megapixels * 1_000_000), max_bytes=int(megabytes * 1024 * 1024), max_images=max_images)

    def check_count(self, count: int) -> None:
        """Refuse a request with more than ``max_images`` images.

        Raises:
            ImageRejected: Naming the count and the limit.
        """
        if count > self.max_images:
            raise ImageRejected(
                f"the request carries {count} images, more than the {self.max_images} this server accepts per "
                "request; send fewer images"
            )


def _mib(num_bytes: float) -> str:
    return f"{num_bytes / (1024 * 1024):.1f} MiB"


def _megapixels(pixels: float) -> str:
    return f"{pixels / 1_000_000:.1f} megapixels"


def _check_size(num_bytes: int, limits: ImageLimits) -> None:
    if num_bytes == 0:
        raise ImageRejected("the uploaded file is empty; upload a PNG, JPEG, WebP, BMP or GIF image")
    if num_bytes > limits.max_bytes:
        raise ImageRejected(
            f"the uploaded file is {_mib(num_bytes)}, more than the {_mib(limits.max_bytes)} this server accepts; "
            "upload a smaller image"
        )


def _open_header(stream: io.BufferedIOBase | io.BytesIO, limits: ImageLimits) -> Image.Image:
    """Read the header only and check type and pixel count; the pixels are not decoded."""
    try:
        with bomb_guard():  # the rule every image loader shares (llava.mm_utils)
            image = Image.open(stream)
    except BOMB_ERRORS:
        raise ImageRejected(
            f"the image has far more pixels than the {_megapixels(limits.max_pixels)} this server accepts; "
            "downscale it and try again"
        ) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError):
        raise ImageRejected(
            f"the upload is not an image this server can read; upload a {_ACCEPTED_TEXT} file"
        ) from None
    if image.format not in ACCEPTED_FORMATS:
        raise ImageRejected(
            f"images in {image.format or 'this'} format are not accepted; upload a {_ACCEPTED_TEXT} file"
        )
    width, height = image.size
    if width * height > limits.max_pixels:
        raise ImageRejected(
            f"the image is {width}x{height} ({_megapixels(width * height)}), more than the "
            f"{_megapixels(limits.max_pixels)} this server accepts; downscale it and try again"
        )
    return image


def _open_checked(stream: io.BufferedIOBase | io.BytesIO, limits: ImageLimits) -> Image.Image:
    """Read the header, check type and pixel count, then decode to RGB."""
    image = _open_header(stream, limits)
    try:
        with bomb_guard():
            image.load()
        return image.convert("RGB")
    except BOMB_ERRORS:
        raise ImageRejected(
            f"the image has far more pixels than the {_megapixels(limits.max_pixels)} this server accepts; "
            "downscale it and try again"
        ) from None
    except (OSError, ValueError, SyntaxError, EOFError):
        raise ImageRejected("the image file is damaged or truncated; upload it again or use another file") from None


def check_image_file(path: str | os.PathLike[str], limits: ImageLimits = ImageLimits()) -> None:
    """Check an uploaded file from its size and header alone (type, pixel count), without decoding it.

    Raises:
        ImageRejected: As :func:`open_image_file`, except for damage that only decoding would find.
    """
    try:
        size = os.path.getsize(path)
    except OSError:
        raise ImageRejected(f"the uploaded file {os.fspath(path)!r} cannot be found; upload it again") from None
    _check_size(size, limits)
    with open(path, "rb") as handle:
        _open_header(handle, limits)


def open_image_bytes(data: bytes, limits: ImageLimits = ImageLimits()) -> Image.Image:
    """Decode an uploaded image file held in memory into an RGB PIL image.

    Raises:
        ImageRejected: If the data is empty, too large, not an accepted image type, has too many pixels or
            is damaged.
    """
    _check_size(len(data), limits)
    return _open_checked(io.BytesIO(data), limits)


def open_image_file(path: str | os.PathLike[str], limits: ImageLimits = ImageLimits()) -> Image.Image:
    """Open an uploaded image file as an RGB PIL image; same checks as :func:`open_image_bytes`.

    Raises:
        ImageRejected: As :func:`open_image_bytes`, or if the file does not exist.
    """
    try:
        size = os.path.getsize(path)
    except OSError:
        raise ImageRejected(f"the uploaded file {os.fspath(path)!r} cannot be found; upload it again") from None
    _check_size(size, limits)
    with open(path, "rb") as handle:
        return _open_checked(handle, limits)


def decode_base64_image(text: str, limits: ImageLimits = ImageLimits()) -> Image.Image:
    """Decode a base64-encoded image file (the worker API's ``images`` entries) into an RGB PIL image.

    Raises:
        ImageRejected: If ``text`` is not base64, or as :func:`open_image_bytes`.
    """
    if not isinstance(text, str):
        raise ImageRejected(f"each entry of 'images' must be a base64-encoded image file, got {type(text).__name__}")
    # base64 grows data by 4/3; refuse before decoding anything far over the byte limit.
    if len(text) > limits.max_bytes * 4 // 3 + 4:
        raise ImageRejected(
            f"the uploaded file is about {_mib(len(text) * 3 / 4)}, more than the {_mib(limits.max_bytes)} this "
            "server accepts; upload a smaller image"
        )
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRejected("an entry of 'images' is not valid base64; send each image file base64-encoded") from None
    return open_image_bytes(data, limits)


def encode_image_base64(image: Image.Image, image_format: str = "PNG") -> str:
    """Encode a PIL image as a base64 string of an image file (what the worker API expects)."""
    buffer = io.BytesIO()
    image.save(buffer, format=image_format)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


__all__ = [
    "ACCEPTED_FORMATS",
    "ImageLimits",
    "ImageRejected",
    "check_image_file",
    "decode_base64_image",
    "encode_image_base64",
    "open_image_bytes",
    "open_image_file",
]
