"""The chat page with the model loaded in the same process: ``python -m llava.serve.demo --model-path CKPT``.

    python -m llava.serve.demo --model-path CKPT [--model-base BASE] [--model-name NAME] [--device cpu]
        [--load-8bit | --load-4bit] [--use-flash-attn] [--limit-model-concurrency 5] [--host 127.0.0.1]
        [--port 7860] [--concurrency-count 16] [--max-queue-size 64] [--conv-mode MODE]
        [--max-image-megapixels 25] [--max-upload-mb 20] [--share] [--embed]
        [--limit-concurrency 256] [--timeout-keep-alive 5] [--body-timeout 60]

Same page as ``gradio_web_server`` (:mod:`llava.serve.chat_ui`) and the same request checks and streaming
as ``model_worker`` (:class:`llava.serve.engine.ModelEngine`), without a controller or worker process.
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

from llava.utils import UserError, cli_main, setup_logging

from .flags import add_model_flags, add_page_flags, check_bind, model_device, server_limits

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.serve.demo", description=__doc__.splitlines()[0])
    add_model_flags(parser, required=True)
    add_page_flags(parser)
    return parser


def main(argv: Sequence[str] | None = None, *, block: bool = True):
    """Parse ``argv`` (default ``sys.argv[1:]``), load the model and serve the page.

    Returns the gradio app (already serving) when ``block`` is False.
    """
    args = build_parser().parse_args(argv)  # before importing gradio, so that --help and bad flags answer at once
    from .backends import LocalBackend
    from .chat_ui import build_demo, launch_from_args, options_from_args
    from .engine import ModelEngine

    setup_logging(logging.INFO)
    # Every flag is checked before the (slow) model load.
    options = options_from_args(args)
    device = model_device(args)
    server_limits(args)
    if args.limit_model_concurrency < 1:
        raise UserError(f"--limit-model-concurrency must be at least 1, got {args.limit_model_concurrency}")
    check_bind(args.host, args.port)
    engine = ModelEngine.load(
        args.model_path, args.model_base, args.model_name, load_8bit=args.load_8bit, load_4bit=args.load_4bit,
        device=device, use_flash_attn=args.use_flash_attn, image_limits=options.image_limits, reducer=args.reducer,
    )
    logger.info("serving %s (compressor panel: %s)", engine.model_name, "on" if engine.has_compressor_view else "off")
    demo = build_demo(LocalBackend(engine, args.limit_model_concurrency), options, [engine.model_name])
    return launch_from_args(demo, args, options, block=block)


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
