#!/usr/bin/env python3
"""Ask one question about one image with a trained checkpoint (the official Braco examples/infer.py command line).

    python examples/infer.py --model-path "$REPRO_ROOT/outputs/braco/k9/seed0/stage2" \\
        --image photo.jpg --question "What is happening in this image?" [--output answer.json] [--device cpu]

Prints the answer; ``--output`` also writes ``{"model_path", "visual_tokens", "image", "question", "answer"}`` as JSON.
``visual_tokens`` is the number of tokens the projector gives this image (C² + S for a Braco budget). Decoding is
greedy by default (``--temperature 0``), seeded by ``--seed``, in the ``vicuna_v1`` template. Any LLaVA checkpoint of
this project works (full stage-2 folders; a stage-1 projector folder or a LoRA folder with ``--model-base``), on a GPU
(float16) or, with ``--device cpu``, on the CPU (float32); ``--fast`` picks the generation path (``llava.model.fast_flag``).
``--llava-root`` is accepted for the official command line and not needed: this repository is the LLaVA code.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file from a checkout: import llava and braco_patch from it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llava.model.fast_flag import add_fast_flag, resolve_fast, use_fast  # noqa: E402  (light: no torch)
from llava.numeric import number_type  # noqa: E402  (light: no torch)
from llava.outputs import guard_outputs, write_json  # noqa: E402  (light: no torch)
from llava.utils import UserError, cli_main, setup_logging  # noqa: E402

logger = logging.getLogger("infer")

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", type=Path, required=True, help="the stage-2 checkpoint folder")
    parser.add_argument("--image", type=Path, required=True, help="a local image file")
    parser.add_argument("--question", default="Describe this image in detail.")
    parser.add_argument("--model-base", default=None, help="base LLM, for a stage-1 projector folder or a LoRA folder")
    parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when there is a GPU, else cpu)")
    add_fast_flag(parser)
    parser.add_argument("--conv-mode", default="vicuna_v1", help="conversation template (default: vicuna_v1)")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy; above 0: sampling")
    parser.add_argument("--seed", type=number_type(0, 2**32 - 1, integer=True), default=0)
    parser.add_argument("--output", type=Path, default=None, help="also write the answer to this JSON file")
    parser.add_argument("--llava-root", type=Path, default=None, help="the official code's LLaVA checkout (not needed here)")
    return parser


def check_checkpoint(model_path: Path, model_base: str | None) -> None:
    """Refuse, in one sentence, a folder that cannot answer: missing, no config.json, or projector-only without a base."""
    if not model_path.is_dir():
        raise UserError(f"--model-path {str(model_path)!r} is not a folder; pass the stage-2 checkpoint folder")
    if not (model_path / "config.json").is_file():
        raise UserError(f"--model-path {str(model_path)!r} has no config.json; pass a checkpoint folder")
    if model_base is None and not any((model_path / name).is_file() for name in WEIGHT_FILES):
        raise UserError(
            f"--model-path {str(model_path)!r} holds no language-model weights (a stage-1 projector or LoRA folder); pass the "
            "stage-2 checkpoint, or --model-base with the base LLM"
        )


def visual_token_count(model: Any, image_processor: Any, image: Any, device: str, dtype: Any) -> int:
    """How many visual tokens the model's projector gives ``image`` (C² + S for a Braco budget)."""
    import torch

    from llava.mm_utils import images_to_pixels

    pixels, sizes = images_to_pixels([image], image_processor, model.config, device, dtype)
    with torch.inference_mode():
        return int(model.image_features(pixels, sizes)[0].shape[0])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    setup_logging()
    from llava.generation import GenerationConfig, resolve_device  # torch from here on

    config = GenerationConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    if not args.question.strip():
        raise UserError("--question is empty; ask something about the image")
    model_path, image_path = args.model_path.expanduser().resolve(), args.image.expanduser().resolve()
    if not image_path.is_file():
        raise UserError(f"--image {str(args.image)!r} does not exist")
    check_checkpoint(model_path, args.model_base)
    guard_outputs(inputs={"--image": image_path, "--model-path": model_path}, files={"--output": args.output})
    device = resolve_device(args.device)
    fast = resolve_fast(args.fast, device)
    if args.llava_root is not None:
        logger.info("--llava-root is not needed: this repository is the LLaVA code; ignoring %s", args.llava_root)

    from transformers import set_seed

    from llava.conversation import check_template_fits
    from llava.generation import LlavaGenerator, default_dtype
    from llava.mm_utils import ImageUnreadable, open_image
    from llava.model.builder import load_pretrained_model
    from llava.model.checkpoint_layout import require_multimodal

    try:
        image = open_image(str(image_path))
    except ImageUnreadable as error:
        raise UserError(f"--image {str(args.image)!r} cannot be read: {error}") from None
    dtype = default_dtype(device)
    # An explicit LLaVA name, as the official example passes: checkpoint folders are often named stage2.
    name = model_path.name if "llava" in model_path.name.lower() else f"llava-{model_path.name}"
    require_multimodal(str(model_path), args.model_base)
    tokenizer, model, image_processor, context_len = load_pretrained_model(str(model_path), args.model_base, name, device=device)
    check_template_fits(args.conv_mode, tokenizer)
    model.to(dtype=dtype).eval()
    use_fast(model, fast)
    set_seed(args.seed)

    generator = LlavaGenerator(tokenizer, model, image_processor, conv_mode=args.conv_mode, device=device, dtype=dtype)
    tokens = visual_token_count(model, image_processor, image, device, dtype)
    from llava.mm_utils import tokenizer_image_token

    prompt_tokens = len(tokenizer_image_token(generator.build_prompt(args.question, 1), tokenizer))
    if prompt_tokens - 1 + tokens + args.max_new_tokens > context_len:
        raise UserError(
            f"the prompt ({prompt_tokens - 1} text tokens + {tokens} visual tokens) and --max-new-tokens {args.max_new_tokens} "
            f"exceed the model's context of {context_len} tokens; shorten the question or lower --max-new-tokens"
        )
    answer = generator.generate([args.question], [[image]], config)[0]
    print(answer)
    record = {"model_path": str(model_path), "visual_tokens": tokens, "image": str(image_path), "question": args.question,
              "answer": answer}
    if args.output is not None:
        write_json(args.output, record)
    return record


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
