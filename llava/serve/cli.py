"""Chat about an image in the terminal: ``python -m llava.serve.cli --model-path PATH --image-file IMG``.

Reads one user turn per line from stdin until end of input or an empty line, and streams each answer to
stdout with the generation loop the model worker and the web demo share (:mod:`llava.serve.generation`).
``--video-file`` chats about a video instead (frames sampled by LLaVA-NeXT's rule, ``--frames-upbound``, default 16).
Flags and defaults follow upstream (``--temperature 0.2 --max-new-tokens 512``); ``--device`` defaults to
CUDA when available, else CPU.
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

from llava.constants import IMAGE_TOKEN_INDEX
from llava.conversation import SeparatorStyle, conv_templates, resolve_conv_mode
from llava.utils import UserError, add_reducer_flag, cli_main, setup_logging

from .templates import stop_string

logger = logging.getLogger(__name__)


def _read_turn(prompt: str) -> str:
    try:
        return input(prompt)
    except EOFError:
        return ""


def _load_visual(args: argparse.Namespace) -> object:
    """The image of ``--image-file`` or the sampled video of ``--video-file`` (exactly one must be given)."""
    from llava.mm_utils import load_image
    from llava.video import check_frame_flags, load_video, refuse_video_as_image

    if bool(args.image_file) == bool(getattr(args, "video_file", None)):
        raise UserError("give either --image-file or --video-file (exactly one of them)")
    if args.image_file:
        refuse_video_as_image(args.image_file)
        return load_image(args.image_file)
    check_frame_flags(args.frames_upbound, args.force_sample)
    return load_video(args.video_file, frames_upbound=args.frames_upbound, force_sample=args.force_sample)


def run_chat(args: argparse.Namespace) -> None:
    """Load the model and chat until stdin ends or an empty line is entered."""
    # torch and transformers load here, not at import: --help answers at once.
    from llava.generation import check_generation_values, check_reducer_flag, resolve_device
    from llava.mm_utils import get_model_name_from_path, image_marker, tokenizer_image_token, visuals_to_pixels
    from llava.model.builder import load_pretrained_model
    from llava.model.checkpoint_layout import require_multimodal
    from llava.model.compressor_text import question_kwargs

    from .generation import stream_answer

    # Flags and the image (or the video) are checked before the (slow) model load, so they fail fast.
    check_generation_values(args.temperature, None, 1, args.max_new_tokens)
    check_reducer_flag(args)
    device = resolve_device(args.device)
    visual = _load_visual(args)
    model_name = get_model_name_from_path(args.model_path)
    require_multimodal(args.model_path, args.model_base)
    tokenizer, model, image_processor, _ = load_pretrained_model(
        args.model_path, args.model_base, model_name, args.load_8bit, args.load_4bit, device=device, reducer=args.reducer
    )
    conv = conv_templates[resolve_conv_mode(model_name, args.conv_mode, tokenizer)].copy()
    # ChatML role strings carry markup (<|im_start|>user\n); show plain names on the terminal.
    roles = ("user", "assistant") if conv.sep_style in (SeparatorStyle.MPT, SeparatorStyle.CHATML) else conv.roles
    pixels, image_sizes, modalities = visuals_to_pixels([visual], image_processor, model.config, model.device, model.dtype)

    first_turn = True
    while True:
        text = _read_turn(f"{roles[0]}: ")
        if not text:
            print("exit...")
            break
        print(f"{roles[1]}: ", end="", flush=True)
        if first_turn:
            # The image goes with the first user message only; later turns reuse it through the history.
            text = image_marker(model.config) + "\n" + text
            first_turn = False
        conv.append_message(conv.roles[0], text)
        conv.append_message(conv.roles[1], None)
        prompt = conv.get_prompt()

        input_ids = tokenizer_image_token(prompt, tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0)
        printed = answer = ""
        for answer in stream_answer(
            model, tokenizer, input_ids, images=pixels, image_sizes=image_sizes, temperature=args.temperature,
            max_new_tokens=args.max_new_tokens, stop=stop_string(conv), modalities=modalities,
            **question_kwargs(model, tokenizer, [prompt], conv),
        ):
            if answer.startswith(printed):  # the last value may revise earlier text; the terminal keeps it
                print(answer[len(printed):], end="", flush=True)
                printed = answer
        print()
        outputs = answer.strip()
        conv.messages[-1][-1] = outputs
        if args.debug:
            print("\n", {"prompt": prompt, "outputs": outputs}, "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.serve.cli", description=__doc__.splitlines()[0])
    parser.add_argument("--model-path", type=str, default="facebook/opt-350m")
    parser.add_argument("--model-base", type=str, default=None)
    parser.add_argument("--image-file", type=str, default=None, help="image path or URL")
    parser.add_argument("--video-file", "--video_file", dest="video_file", type=str, default=None,
                        help="a video file instead of an image (needs the 'video' extra)")
    parser.add_argument("--frames-upbound", "--frames_upbound", dest="frames_upbound", type=int, default=16,
                        help="at most this many video frames, evenly spread")
    parser.add_argument("--force-sample", "--force_sample", dest="force_sample", action="store_true",
                        help="always take --frames-upbound evenly spread frames")
    parser.add_argument("--device", type=str, default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--conv-mode", type=str, default=None)
    parser.add_argument("--temperature", type=float, default=0.2)
    parser.add_argument("--max-new-tokens", "--max_new_tokens", dest="max_new_tokens", type=int, default=512)
    parser.add_argument("--load-8bit", "--load_8bit", dest="load_8bit", action="store_true")
    parser.add_argument("--load-4bit", "--load_4bit", dest="load_4bit", action="store_true")
    parser.add_argument("--debug", action="store_true")
    add_reducer_flag(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Parse ``argv`` (default ``sys.argv[1:]``) and chat."""
    args = build_parser().parse_args(argv)
    setup_logging(logging.DEBUG if args.debug else logging.WARNING)
    run_chat(args)


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
