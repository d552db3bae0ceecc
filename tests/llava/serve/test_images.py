"""Upload checks: every refusal is one sentence naming the problem and the limit."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from llava.serve.images import ImageLimits, ImageRejected, decode_base64_image, open_image_bytes, open_image_file

from .conftest import png_bytes


def _encoded(image: Image.Image, image_format: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=image_format)
    return buffer.getvalue()


@pytest.mark.parametrize("image_format", ["PNG", "JPEG", "WEBP", "BMP", "GIF"])
def test_accepted_formats_open_as_rgb(image_format: str) -> None:
    image = open_image_bytes(_encoded(Image.new("RGB", (40, 30), (200, 40, 30)), image_format))
    assert image.mode == "RGB" and image.size == (40, 30)


def test_grey_and_alpha_images_become_rgb(tmp_path) -> None:
    path = tmp_path / "alpha.png"
    Image.new("RGBA", (9, 7), (1, 2, 3, 4)).save(path)
    assert open_image_file(path).mode == "RGB"
    assert open_image_bytes(png_bytes((5, 5), mode="L", color=7)).mode == "RGB"


@pytest.mark.parametrize(
    ("data", "limits", "expected"),
    [
        (b"", ImageLimits(), "the uploaded file is empty"),
        (b"GIF87a but not really", ImageLimits(), "the upload is not an image this server can read"),
        (b"%PDF-1.4 a document", ImageLimits(), "upload a PNG, JPEG, WebP, BMP or GIF file"),
        (png_bytes((40, 30)), ImageLimits(max_pixels=1000), "the image is 40x30 (0.0 megapixels), more than"),
        (png_bytes((400, 300)), ImageLimits(max_bytes=100), "more than the 0.0 MiB this server accepts"),
        (_encoded(Image.new("RGB", (8, 8)), "TIFF"), ImageLimits(), "images in TIFF format are not accepted"),
        (png_bytes((64, 64), color=(1, 2, 3))[:-40], ImageLimits(), "damaged or truncated"),
    ],
)
def test_refusals_are_clear(data: bytes, limits: ImageLimits, expected: str) -> None:
    with pytest.raises(ImageRejected, match=expected.replace("(", r"\(").replace(")", r"\)")) as caught:
        open_image_bytes(data, limits)
    assert "\n" not in str(caught.value)


def test_fifty_megapixels_are_refused_before_decoding(huge_png) -> None:
    with pytest.raises(ImageRejected, match=r"7072x7072 \(50.0 megapixels\), more than the 25.0 megapixels"):
        open_image_file(huge_png)
    assert open_image_file(huge_png, ImageLimits(max_pixels=60_000_000)).size == (7072, 7072)


def test_base64_entries() -> None:
    text = base64.b64encode(png_bytes((6, 4))).decode()
    assert decode_base64_image(text).size == (6, 4)
    with pytest.raises(ImageRejected, match="not valid base64"):
        decode_base64_image("***not base64***")
    with pytest.raises(ImageRejected, match="must be a base64-encoded image file, got int"):
        decode_base64_image(3)  # type: ignore[arg-type]
    with pytest.raises(ImageRejected, match="more than the"):
        decode_base64_image("A" * 2000, ImageLimits(max_bytes=1000))


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ImageRejected, match="cannot be found"):
        open_image_file(tmp_path / "gone.png")


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="max_pixels must be a positive integer, got 0"):
        ImageLimits(max_pixels=0)
    for megapixels in (-1, 0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"^--max-image-megapixels must be a finite number above 0 and at most 10000"):
            ImageLimits.from_megapixels(megapixels, 20)
    with pytest.raises(ValueError, match=r"^--max-upload-mb must be a finite number above 0"):
        ImageLimits.from_megapixels(25, float("inf"))
    assert ImageLimits.from_megapixels(25, 20) == ImageLimits()
