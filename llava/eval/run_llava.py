"""Answer one question about one or more images: ``python -m llava.eval.run_llava``.

Same flags and defaults as upstream (``--model-path --model-base --image-file --query --conv-mode --sep
--temperature --top_p --num_beams --max_new_tokens``), plus ``--device``. Several images are given as one
``--image-file`` separated by ``--sep`` (default ``,``). The answer is printed to stdout.

``--video-file`` (instead of ``--image-file``) asks about a video: its frames are sampled by LLaVA-NeXT's rule
(``--frames-upbound``, default 16; ``--force-sample``; see :mod:`llava.video`) and go in at one ``<image>`` marker.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any

from PIL import Image

from llava.constants import DEFAULT_IMAGE_TOKEN, IMAGE_PLACEHOLDER, IMAGE_TOKEN_INDEX
from llava.conversation import check_template_name, conv_templates, resolve_conv_mode
from llava.generation import GenerationConfig, check_reducer_flag, resolve_device
from llava.mm_utils import get_model_name_from_path, image_marker, load_image, tokenizer_image_token, visuals_to_pixels
from llava.model.compressor_text import question_kwargs
from llava.utils import UserError, add_reducer_flag, cli_main, setup_logging
from llava.video import check_frame_flags, load_video, refuse_video_as_image

# Defaults of the optional attributes of an ``args`` object (the command line's defaults; device: automatic).
_OPTIONAL_DEFAULTS: dict[str, Any] = {"temperature": 0.2, "top_p": None, "num_beams": 1, "max_new_tokens": 512, "device": None}


def build_query(query: str, num_images: int, model_config: Any) -> str:
    """Put the image markers into the user's question.

    ``<image-placeholder>`` marks where images go; a query that has neither it nor ``<image>`` gets one
    marker per image and a newline prepended (upstream prepends one, which leaves extra images unused).
    """
    marker = image_marker(model_config)
    if IMAGE_PLACEHOLDER in query:
        return query.replace(IMAGE_PLACEHOLDER, marker)
    if DEFAULT_IMAGE_TOKEN in query:
        return query
    return (marker + "\n") * max(num_images, 1) + query


def image_parser(args: Any) -> list[str]:
    """The image paths or URLs of ``args.image_file``, split at ``args.sep`` (default ``,``)."""
    return [name for name in args.image_file.split(getattr(args, "sep", None) or ",") if name]


def load_images(image_files: Sequence[str]) -> list[Image.Image]:
    """Open every path or URL as an RGB image (see :func:`llava.mm_utils.load_image`)."""
    return [load_image(name) for name in image_files]


def load_visuals(args: Any) -> list[Any]:
    """The images of ``args.image_file``, or the sampled video of ``args.video_file`` (exactly one must be given).

    Raises:
        UserError: If neither or both are given, or a frame flag is out of range.
    """
    image_file, video_file = getattr(args, "image_file", None), getattr(args, "video_file", None)
    if bool(image_file) == bool(video_file):
        raise UserError("give either --image-file or --video-file (exactly one of them)")
    if image_file:
        names = image_parser(args)
        for name in names:
            refuse_video_as_image(name)
        return load_images(names)
    frames, force = getattr(args, "frames_upbound", None), bool(getattr(args, "force_sample", False))
    frames = 16 if frames is None else frames
    check_frame_flags(frames, force)
    return [load_video(video_file, frames_upbound=frames, force_sample=force)]


def eval_model(args: Any) -> str:
    """Load the model, answer ``args.query`` about ``args.image_file``, print and return the answer.

    ``args`` is the parsed command line or any object with upstream's attributes (``model_path, model_base,
    query, conv_mode, image_file, sep, temperature, top_p, num_beams, max_new_tokens``; upstream's README
    builds one with ``type("Args", (), {...})()``). Missing optional attributes take the command line's
    defaults; ``device`` (ours) defaults to cuda when available, else cpu.
    """
    from llava.model.builder import load_pretrained_model
    from llava.model.checkpoint_layout import require_multimodal

    options = {**_OPTIONAL_DEFAULTS, **{key: getattr(args, key) for key in _OPTIONAL_DEFAULTS if getattr(args, key, None) is not None}}
    # Decoding values, the device, the template's name and the images (or the video) first, so each mistake fails before the slow model load.
    config = GenerationConfig(**{key: options[key] for key in ("temperature", "top_p", "num_beams", "max_new_tokens")})
    device = resolve_device(options["device"])
    if getattr(args, "conv_mode", None) is not None:
        check_template_name(args.conv_mode)
    check_reducer_flag(args)
    images = load_visuals(args)
    model_name = get_model_name_from_path(args.model_path)
    require_multimodal(args.model_path, getattr(args, "model_base", None))
    tokenizer, model, image_processor, _ = load_pretrained_model(
        args.model_path, getattr(args, "model_base", None), model_name, device=device, reducer=getattr(args, "reducer", None)
    )

    conv = conv_templates[resolve_conv_mode(model_name, getattr(args, "conv_mode", None), tokenizer)].copy()
    conv.append_message(conv.roles[0], build_query(args.query, len(images), model.config))
    conv.append_message(conv.roles[1], None)
    prompt = conv.get_prompt()

    input_ids = tokenizer_image_token(prompt, tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0)
    pixels, image_sizes, modalities = visuals_to_pixels(images, image_processor, model.config, model.device, model.dtype)
    extra = {} if modalities is None else {"modalities": modalities}
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    output_ids = model.generate(
        input_ids.to(model.device),
        images=pixels,
        image_sizes=image_sizes,
        pad_token_id=pad_token_id,
        **extra,
        **question_kwargs(model, tokenizer, [prompt], conv),
        **config.generate_kwargs(),
    )
    answer = tokenizer.batch_decode(output_ids, skip_special_tokens=True)[0].strip()
    print(answer)
    return answer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.eval.run_llava", description=__doc__.splitlines()[0])
    parser.add_argument("--model-path", type=str, default="facebook/opt-350m")
    parser.add_argument("--model-base", type=str, default=None)
    parser.add_argument("--image-file", type=str, default=None, help="image path or URL; several joined by --sep")
    parser.add_argument("--video-file", "--video_file", dest="video_file", type=str, default=None,
                        help="a video file instead of images (needs the 'video' extra)")
    parser.add_argument("--frames-upbound", "--frames_upbound", dest="frames_upbound", type=int, default=16,
                        help="at most this many video frames, evenly spread (0: one per second)")
    parser.add_argument("--force-sample", "--force_sample", dest="force_sample", action="store_true",
                        help="always take --frames-upbound evenly spread frames")
    parser.add_argument("--query", type=str, required=True)
    parser.add_argument("--conv-mode", type=str, default=None)
    parser.add_argument("--sep", type=str, default=",")
    parser.add_argument("--temperature", type=float, default=0.2)
    parser.add_argument("--top_p", "--top-p", dest="top_p", type=float, default=None)
    parser.add_argument("--num_beams", "--num-beams", dest="num_beams", type=int, default=1)
    parser.add_argument("--max_new_tokens", "--max-new-tokens", dest="max_new_tokens", type=int, default=512)
    parser.add_argument("--device", type=str, default=None, help="default: cuda if available, else cpu")
    add_reducer_flag(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> str:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run :func:`eval_model`; returns the answer."""
    args = build_parser().parse_args(argv)
    setup_logging(logging.WARNING)
    return eval_model(args)


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
