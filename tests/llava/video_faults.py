"""Video files that must be refused, small on disk and cheap to write: a clip whose frames change size
mid-stream (two MPEG-TS pieces joined, as a cut-and-append tool makes them) and a still picture named as a video."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def size_switching_clip(path: Path, sides: tuple[int, int] = (32, 64), frames_each: int = 2) -> Path:
    """An MPEG-TS file of ``frames_each`` black frames of ``sides[0]`` squared pixels, then as many of ``sides[1]``."""
    import av

    pieces = []
    for side in sides:
        piece = path.with_name(f"{path.name}.{side}.ts")
        with av.open(str(piece), mode="w", format="mpegts") as container:
            stream = container.add_stream("mpeg2video", rate=4)
            stream.width = stream.height = side
            stream.pix_fmt = "yuv420p"
            for _ in range(frames_each):
                frame = av.VideoFrame.from_ndarray(np.zeros((side, side, 3), dtype=np.uint8), format="rgb24")
                for packet in stream.encode(frame):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        pieces.append(piece)
    path.write_bytes(b"".join(piece.read_bytes() for piece in pieces))
    for piece in pieces:
        piece.unlink()
    return path


def picture_named_as_video(path: Path, size: tuple[int, int] = (40, 30)) -> Path:
    """A PNG file under a video's name (FFmpeg opens it as a one-frame "video" with its png_pipe demuxer)."""
    Image.new("RGB", size, (200, 30, 30)).save(path, format="PNG")
    return path
