"""The chat web page in front of a controller: ``python -m llava.serve.gradio_web_server``.

    python -m llava.serve.gradio_web_server [--controller-url http://localhost:21001 | --endpoint URL] [--host 127.0.0.1]
        [--port 7860] [--model-list-mode once|reload] [--concurrency-count 16] [--max-queue-size 64]
        [--conv-mode MODE] [--max-image-megapixels 25] [--max-upload-mb 20] [--share] [--embed] [--moderate]
        [--stream-timeout 600] [--limit-concurrency 256] [--timeout-keep-alive 5] [--body-timeout 60]

The page (see :mod:`llava.serve.chat_ui`) asks the controller which worker serves the selected model and
streams the answer from that worker; for a model whose compressor has a view it also asks the worker for
the panel of what the compressor keeps of the image. With ``--endpoint http://127.0.0.1:8000/v1`` the page talks to an
OpenAI-compatible server instead (``vllm serve`` with this project's plugin; the key, if any, in ``OPENAI_API_KEY``):
the models are the endpoint's, each answer streams from its ``/chat/completions``, and there is no compressor panel.
``--model-list-mode once`` lists the models at start-up, ``reload`` on
every page load. Unlike upstream, the page binds to 127.0.0.1 unless ``--host`` says otherwise. Calls to the
controller and the workers go through :mod:`llava.net`; a streamed answer may take ``--stream-timeout`` seconds
in all.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # started as a file: run as ``python -m llava.serve.<name>``
    import os  # noqa: E401
    import sys
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    from llava.serve import run_as_module
    run_as_module(__file__)

import argparse
import logging
from collections.abc import Sequence

from llava import net
from llava.utils import UserError, cli_main, setup_logging

from .flags import SECONDS, add_flag, add_page_flags, check_bind, server_limits

logger = logging.getLogger(__name__)
DESCRIPTION = __doc__.splitlines()[0]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.serve.gradio_web_server", description=DESCRIPTION)
    add_page_flags(parser)
    add_flag(parser, "--controller-url", "--controller", type=str, default="http://localhost:21001")
    add_flag(parser, "--endpoint", type=str, default=None,
             help="an OpenAI-compatible API root (e.g. vllm serve's http://127.0.0.1:8000/v1) instead of a controller")
    add_flag(parser, "--model-list-mode", choices=("once", "reload"), default="once")
    add_flag(parser, "--moderate", action="store_true", help="accepted for compatibility; no moderation is done")
    add_flag(parser, "--stream-timeout", type=SECONDS, default=600.0, help="seconds one streamed answer may take in all")
    return parser


def main(argv: Sequence[str] | None = None, *, block: bool = True):
    """Parse ``argv`` (default ``sys.argv[1:]``) and serve the page; returns the gradio app when ``block`` is False."""
    args = build_parser().parse_args(argv)  # before importing gradio, so that --help and bad flags answer at once
    from .backends import ControllerBackend, EndpointBackend
    from .chat_ui import build_demo, launch_from_args, options_from_args

    setup_logging(logging.INFO)
    logger.info("args: %s", args)
    if args.moderate:
        logger.warning("--moderate has no effect: this build contacts no moderation service")
    options = options_from_args(args, args.model_list_mode)
    server_limits(args)  # checked before anything starts
    if args.endpoint:
        from llava.openai_client import ChatEndpoint, api_key_from_env

        backend = EndpointBackend(ChatEndpoint(args.endpoint, api_key_from_env(), timeout=args.stream_timeout))
        source = f"the endpoint {backend.endpoint.url}"
    else:
        try:
            net.origin_of(args.controller_url)
        except net.NetError as error:
            raise UserError(f"--controller-url: {error}; give e.g. http://localhost:21001") from None
        backend = ControllerBackend(args.controller_url, stream_timeout=args.stream_timeout)
        source = f"the controller at {args.controller_url}"
    check_bind(args.host, args.port)
    models = backend.list_models()
    if not models:
        logger.warning("%s lists no models yet", source)
    demo = build_demo(backend, options, models)
    return launch_from_args(demo, args, options, block=block)


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
