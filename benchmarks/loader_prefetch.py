"""The loaders' loop with and without reading the next batch ahead: questions per second over a whole question list.

    python benchmarks/loader_prefetch.py --cache /tmp/llava-random --device cuda --out prefetch.json     # 7B shape
    python benchmarks/loader_prefetch.py --cache /tmp/llava-random --device cpu --layers 1 --shrink 64 \\
        --questions 24 --out prefetch_cpu.json                                                        # on a CPU

``llava.eval.core.run_items`` (the loop of every ``model_vqa*`` loader) reads each batch's images and
preprocesses them; with ``prefetch`` (the default) it does that for the next batch in a background thread while
the model answers the current one, as upstream's ``model_vqa_loader`` does with a DataLoader. This answers the same
``--questions`` questions about JPEG photos of ``--image-size`` (decoding and resizing them is the host work that
overlaps) in one ``run_items`` call per setting, prefetch off and on alternating for ``--rounds`` rounds, on a
random checkpoint of ``benchmarks/random_llava.py`` (``--layers``/``--shrink`` make it small). Reported: the median
seconds per call, questions/s, and whether both settings gave the same answers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402
from PIL import Image  # noqa: E402

if __package__ in (None, ""):
    sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import random_llava as bench  # noqa: E402

from llava.outputs import write_json  # noqa: E402
from llava.utils import UserError, cli_main  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench.add_checkpoint_args(parser)
    parser.add_argument("--projector", default="braco_c3s7")
    parser.add_argument("--fast", default=None, help="the generation path (default: the device's, as the loaders)")
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=4, help="tokens per answer (short, as VQAv2/GQA/POPE answers)")
    parser.add_argument("--image-size", type=int, nargs=2, default=[1024, 768], metavar=("W", "H"))
    parser.add_argument("--rounds", type=int, default=3)
    return parser


def check_args(args: argparse.Namespace) -> None:
    bench.check_checkpoint_args(args)
    for name in ("questions", "batch_size", "new_tokens", "rounds"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if min(args.image_size) < 16:
        raise UserError(f"--image-size must be at least 16 x 16 pixels, got {args.image_size}")


def write_photos(folder: Path, count: int, size: tuple[int, int]) -> list[Path]:
    """``count`` JPEG files of ``size`` with noise in them (so that decoding is real work), all different."""
    generator = torch.Generator().manual_seed(0)
    paths = []
    for index in range(count):
        noise = torch.randint(0, 256, (size[1] // 8, size[0] // 8, 3), generator=generator, dtype=torch.uint8)
        image = Image.fromarray(noise.numpy()).resize(size, Image.BILINEAR)
        paths.append(folder / f"photo{index}.jpg")
        image.save(paths[-1], quality=90)
    return paths


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    check_args(args)
    device, dtype = bench.start_run(args)
    from llava.eval.core import GenerationConfig, run_items
    from llava.eval.items import EvalItem, ImageRef

    checkpoint = bench.write_random_llava(args.cache, bench.Shape(args.layers, args.shrink), [args.projector], device=device, dtype=dtype)
    generator, name = bench.load_answering(checkpoint, args.projector, device, dtype, fast=args.fast, new_tokens=args.new_tokens)
    config = GenerationConfig(temperature=0, max_new_tokens=args.new_tokens)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    texts: dict[bool, list[str]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        photos = write_photos(Path(scratch), args.questions, tuple(args.image_size))
        items = [EvalItem(question_id=index, question="What is in the picture?", prompt=f"{index}",
                          images=(ImageRef(str(path)),)) for index, path in enumerate(photos)]
        answers = Path(scratch) / "answers.jsonl"
        run_items(items[: args.batch_size], answers, lambda: (generator, name), config, model_id=name,
                  batch_size=args.batch_size, overwrite=True)  # captures and compiles happen here, not timed
        for _ in range(args.rounds):
            for prefetch in (False, True):
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                started = time.perf_counter()
                run_items(items, answers, lambda: (generator, name), config, model_id=name, batch_size=args.batch_size,
                          overwrite=True, prefetch=prefetch)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                seconds[prefetch].append(time.perf_counter() - started)
                texts[prefetch] = [json.loads(line)["text"] for line in answers.read_text().splitlines()]
    rows = {("prefetch" if prefetch else "in turn"): {
        "median_s": round(statistics.median(values), 3), "rounds_s": [round(value, 3) for value in values],
        "questions_per_s": round(args.questions / statistics.median(values), 2)} for prefetch, values in seconds.items()}
    result = {
        **bench.run_header(argv, args, device, dtype),
        "projector": args.projector, "questions": args.questions,
        "batch_size": args.batch_size, "new_tokens": args.new_tokens, "image_size": args.image_size,
        "rows": rows, "speedup": round(rows["in turn"]["median_s"] / rows["prefetch"]["median_s"], 3),
        "same_answers": texts[False] == texts[True],
    }
    print(f"{result['command']}  ({result['date']}; {result['device']}, {result['dtype']})")
    print("| loop | median s | questions/s | rounds s |\n|---|---:|---:|---|")
    for label, row in rows.items():
        print(f"| {label} | {row['median_s']:.3f} | {row['questions_per_s']:.2f} | {row['rounds_s']} |")
    print(f"prefetch / in turn: {result['speedup']:.3f}x; same answers: {result['same_answers']}")
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
