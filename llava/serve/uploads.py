"""The chat page takes images and videos only: uploads of anything else are refused and deleted at once (K22).

gradio stores every file posted to ``/gradio_api/upload`` in its cache before any component sees it, whatever
its type, and keeps it there. :class:`ImageUploadsOnly` wraps the page's app: after gradio stored an upload,
each stored file is checked from its header (:func:`llava.serve.images.check_image_file`: type, size, pixel
count; else :func:`llava.serve.video_input.check_video_file`: a container with a video stream within the same
limits); if one is neither, every file of that upload is deleted and the client gets HTTP 400 with one sentence.
Accepted uploads stay in the cache until the page's own cleanup (``delete_cache``, see :mod:`llava.serve.chat_ui`)
removes them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from llava.net import parse_json

from .images import ImageLimits, ImageRejected, check_image_file
from .protocol import sentence

logger = logging.getLogger(__name__)

#: gradio's upload route (``gradio.route_utils.API_PREFIX`` + ``/upload``).
UPLOAD_PATH = "/gradio_api/upload"


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _media_problem(path: Path, limits: ImageLimits) -> str | None:
    """Why ``path`` is neither an acceptable image nor an acceptable video (the image's reason first), or ``None``."""
    try:
        check_image_file(path, limits)
        return None
    except ImageRejected as error:
        image_problem = str(error)
    from .video_input import check_video_file  # PyAV only for what is not an image

    try:
        check_video_file(path, limits)
        return None
    except ImageRejected as error:
        return image_problem if "neither an image nor a video" in str(error) else str(error)
    except ValueError:  # PyAV missing: the page cannot read videos, so only images are acceptable
        return image_problem


class ImageUploadsOnly:
    """ASGI middleware refusing (and deleting) uploads that are not images or videos within ``limits``.

    Args:
        app: The page's app.
        limits: The page's image limits.
        upload_folder: gradio's upload cache; only files inside it are ever deleted.
    """

    def __init__(self, app: Any, limits: ImageLimits, upload_folder: str | os.PathLike[str]) -> None:
        self.app, self.limits = app, limits
        self.upload_folder = Path(upload_folder).resolve()

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not scope["path"].endswith(UPLOAD_PATH):
            await self.app(scope, receive, send)
            return
        held: list[dict] = []

        async def hold(message: dict) -> None:
            held.append(message)

        # The whole answer is held until gradio is done (it moves the files into its cache after answering).
        await self.app(scope, receive, hold)
        refusal = self._check(held)
        if refusal is None:
            for message in held:
                await send(message)
            return
        body = refusal.encode()
        await send({"type": "http.response.start", "status": 400,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    def _check(self, held: list[dict]) -> str | None:
        """The sentence refusing the upload (after deleting its files), or ``None`` when every file is an image."""
        start = next((m for m in held if m["type"] == "http.response.start"), None)
        if start is None or start["status"] != 200:
            return None
        try:
            paths = parse_json(b"".join(m.get("body", b"") for m in held if m["type"] == "http.response.body"))
        except ValueError:
            return None
        if not isinstance(paths, list):
            return None
        stored = [Path(p).resolve() for p in paths if isinstance(p, str)]
        stored = [path for path in stored if _inside(path, self.upload_folder)]
        problem = None
        for path in stored:
            problem = _media_problem(path, self.limits)
            if problem is not None:
                break
        if problem is None:
            return None
        for path in stored:
            try:
                path.unlink()
                path.parent.rmdir()  # gradio's per-upload folder, removed when nothing else is in it
            except OSError:
                pass
        logger.info("refused an upload of %d file(s): %s", len(stored), problem)
        return sentence(problem)


__all__ = ["ImageUploadsOnly", "UPLOAD_PATH"]
