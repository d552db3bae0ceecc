"""Image files that must be refused: decompression bombs (a header claiming far more pixels than PIL decodes
safely, tiny on disk), truncated files and non-images."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

from PIL import Image


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(width: int, height: int) -> bytes:
    """A valid PNG header for a ``width`` x ``height`` RGB image with almost no pixel data (a few hundred bytes)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(b"\0" * 64)) + _chunk(b"IEND", b"")


def over_limit() -> bytes:
    """More than twice ``Image.MAX_IMAGE_PIXELS``: PIL raises DecompressionBombError on open."""
    side = int((2.5 * Image.MAX_IMAGE_PIXELS) ** 0.5)
    return bomb_png(side, side)


def warning_range() -> bytes:
    """Between one and two times the limit: PIL only warns, and would then try to decode it all."""
    side = int((1.5 * Image.MAX_IMAGE_PIXELS) ** 0.5)
    return bomb_png(side, side)


def truncated_png() -> bytes:
    buffer = io.BytesIO()
    Image.effect_noise((64, 64), 50).convert("RGB").save(buffer, format="PNG")
    data = buffer.getvalue()
    return data[: len(data) // 2]


def write_bad_images(folder: Path) -> dict[str, str]:
    """Writes the bad files into ``folder``; returns name -> what the refusal must say."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "bomb.png": (over_limit(), "decompression bomb"),
        "warn.png": (warning_range(), "decompression bomb"),
        "cut.png": (truncated_png(), "not a readable image"),
        "text.png": (b"hello, not an image\n", "not a readable image"),
    }
    for name, (data, _) in files.items():
        (folder / name).write_bytes(data)
    return {name: reason for name, (_, reason) in files.items()}
