"""Command-line flags shared by the serving commands (upstream's names; ``--a-b`` also accepts ``--a_b``)."""

from __future__ import annotations

import argparse
import errno
import socket
from typing import TYPE_CHECKING, Any

from llava.utils import UserError, add_reducer_flag

from .webapi import ServerLimits

if TYPE_CHECKING:
    from .images import ImageLimits

LOOPBACK_HELP = "address to bind (default 127.0.0.1: this machine only)"


def add_flag(parser: argparse.ArgumentParser, name: str, *aliases: str, **kwargs: Any) -> None:
    """Add ``--a-b``, its ``--a_b`` spelling and ``aliases``; ``dest`` is ``a_b`` unless given."""
    underscored = "--" + name[2:].replace("-", "_")
    names = [name] + ([underscored] if underscored != name else []) + list(aliases)
    kwargs.setdefault("dest", name[2:].replace("-", "_"))
    parser.add_argument(*names, **kwargs)


def port_number(text: str) -> int:
    """``--port``'s argparse type: a TCP port, 0 to 65535 (0: any free port)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number; give one from 1 to 65535")
    return port


def add_bind_flags(parser: argparse.ArgumentParser, port: int | None) -> None:
    add_flag(parser, "--host", type=str, default="127.0.0.1", help=LOOPBACK_HELP)
    add_flag(parser, "--port", type=port_number, default=port,
             help=None if port else "default: gradio picks one from 7860")


def check_bind(host: str, port: int | None) -> None:
    """Refuse a ``--host`` this machine cannot listen on, or a ``--port`` already taken there, before the slow
    start-up (a model load, the page) rather than after it.

    Binds and closes a socket the way uvicorn binds its own (``SO_REUSEADDR``, IPv6 for an address with ``:``);
    ``port`` ``None`` or 0 (the server picks a free one) is not checked.

    Raises:
        UserError: Naming the host or port and what to do.
    """
    if not port:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except socket.gaierror:
            raise UserError(f"--host {host!r} is not an address or host name this machine can resolve; give e.g. "
                            "127.0.0.1 (this machine only) or 0.0.0.0 (every interface)") from None
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise UserError(f"--port {port} is already in use on {host}; stop what listens there or pick another "
                                "--port") from None
            if error.errno == errno.EADDRNOTAVAIL:
                raise UserError(f"--host {host} is not an address of this machine; give 127.0.0.1 (this machine only) "
                                "or 0.0.0.0 (every interface)") from None
            raise UserError(f"cannot listen on {host} port {port} ({error.strerror}); pick another --host or --port") from None


def add_model_flags(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """``--model-path --model-base --model-name --device --load-8bit --load-4bit --use-flash-attn``, and
    ``--limit-model-concurrency``."""
    add_flag(parser, "--model-path", type=str, required=required, default=None if required else "facebook/opt-350m")
    add_flag(parser, "--model-base", type=str, default=None)
    add_flag(parser, "--model-name", type=str, default=None, help="name shown and matched (default: from --model-path)")
    add_flag(parser, "--device", type=str, default=None, help="default: cuda if available, else cpu")
    add_flag(parser, "--load-8bit", action="store_true")
    add_flag(parser, "--load-4bit", action="store_true")
    add_flag(parser, "--use-flash-attn", action="store_true")
    add_flag(parser, "--limit-model-concurrency", type=int, default=5, help="requests that use the model at once")
    add_reducer_flag(parser)


def model_device(args: argparse.Namespace) -> str:
    """The device ``add_model_flags``' ``--device`` names, resolved by ``llava.devices.resolve_device`` (``cuda``
    without a GPU is one sentence); torch is imported here, not with the flags, so ``--help`` stays fast."""
    from llava.devices import resolve_device

    return resolve_device(args.device)


def add_image_limit_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--max-image-megapixels", type=float, default=25.0, help="images with more pixels are refused")
    add_flag(parser, "--max-upload-mb", type=float, default=20.0, help="image files larger than this (MiB) are refused")
    add_flag(parser, "--max-images", type=int, default=8, help="requests with more images than this are refused")


def add_request_limit_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--max-request-mb", type=float, default=32.0,
             help="request bodies larger than this (MiB) get a 413 answer")


def add_server_limit_flags(parser: argparse.ArgumentParser) -> None:
    """``--limit-concurrency --timeout-keep-alive --body-timeout`` (uvicorn's names for the first two)."""
    defaults = ServerLimits()
    add_flag(parser, "--limit-concurrency", type=int, default=defaults.limit_concurrency,
             help="connections served at once; requests beyond that get HTTP 503")
    add_flag(parser, "--timeout-keep-alive", type=int, default=defaults.timeout_keep_alive,
             help="seconds an idle keep-alive connection stays open")
    add_flag(parser, "--body-timeout", type=float, default=defaults.body_timeout,
             help="seconds a request has to deliver its whole body; slower ones get HTTP 408")


def server_limits(args: argparse.Namespace) -> ServerLimits:
    """The server-limit flags, checked.

    Raises:
        UserError: Naming the bad flag.
    """
    try:
        return ServerLimits(args.limit_concurrency, args.timeout_keep_alive, args.body_timeout)
    except ValueError as error:
        raise UserError(str(error)) from None


def request_limit(args: argparse.Namespace) -> int:
    """``--max-request-mb`` in bytes."""
    if not args.max_request_mb > 0:
        raise UserError(f"--max-request-mb must be positive, got {args.max_request_mb!r}")
    return int(args.max_request_mb * 1024 * 1024)


def image_limits(args: argparse.Namespace) -> ImageLimits:
    from .images import ImageLimits  # imports torch (through llava.mm_utils): only the commands that take images

    return ImageLimits.from_megapixels(args.max_image_megapixels, args.max_upload_mb, args.max_images)


def add_page_flags(parser: argparse.ArgumentParser) -> None:
    """The chat page's flags (``gradio_web_server`` and ``demo``)."""
    add_bind_flags(parser, None)
    add_flag(parser, "--concurrency-count", type=int, default=16, help="answers generated at once")
    add_flag(parser, "--max-queue-size", type=int, default=64, help="requests that may wait; more are refused")
    add_flag(parser, "--conv-mode", type=str, default=None, help="template for every model (default: from its name)")
    add_image_limit_flags(parser)
    add_flag(parser, "--share", action="store_true", help="also publish a public gradio.live link")
    add_flag(parser, "--embed", action="store_true", help="hide the title and notes")
    add_server_limit_flags(parser)


__all__ = [
    "add_bind_flags", "add_flag", "add_image_limit_flags", "add_model_flags", "add_page_flags", "add_request_limit_flags",
    "add_server_limit_flags", "check_bind", "image_limits", "model_device", "port_number", "request_limit", "server_limits",
]
