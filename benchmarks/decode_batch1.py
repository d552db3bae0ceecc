"""Batch-1 greedy decoding, ours against upstream LLaVA, on the same tiny upstream-format checkpoint (CPU).

A benchmark, not a test. The same file times either side: ``--side ours`` imports this repository's ``llava``;
``--side upstream`` is run by the driver in a subprocess with another interpreter (a virtualenv holding upstream
LLaVA, ``llava-torch==1.2.2.post1`` next to ``transformers==4.37.2``), from a folder outside this repository so that
``import llava`` finds upstream's package. The driver alternates the two sides ``--rounds`` times (the machine may be
shared) and prints the median answers per second of each and their ratio.

    python benchmarks/decode_batch1.py --checkpoint CKPT --upstream-python /path/to/upstream-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT = "USER: <image>\nWhat is shown in the image? ASSISTANT:"


def time_generation(checkpoint: str, runs: int, new_tokens: int, threads: int) -> dict:
    """Load ``checkpoint`` with the ``llava`` package on the path and time ``runs`` greedy generations."""
    import torch
    from PIL import Image

    torch.set_num_threads(threads)
    import llava
    from llava.constants import IMAGE_TOKEN_INDEX
    from llava.mm_utils import get_model_name_from_path, process_images, tokenizer_image_token
    from llava.model.builder import load_pretrained_model

    tokenizer, model, processor, _ = load_pretrained_model(checkpoint, None, get_model_name_from_path(checkpoint), device="cpu")
    model = model.float().eval()  # upstream's loader always loads float16; compare both in float32
    model.get_vision_tower().float()
    image = Image.new("RGB", (40, 30), (200, 40, 40))
    images = process_images([image], processor, model.config).float()
    ids = tokenizer_image_token(PROMPT, tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0)
    options = dict(images=images, image_sizes=[image.size], do_sample=False, max_new_tokens=new_tokens,
                   min_new_tokens=new_tokens, use_cache=True)
    seconds = []
    with torch.inference_mode():
        for index in range(runs + 2):  # two warm-up calls
            start = time.perf_counter()
            out = model.generate(ids, **options)
            if index >= 2:
                seconds.append(time.perf_counter() - start)
    return {"package": os.path.dirname(llava.__file__), "seconds": seconds, "tokens": int(out.shape[1])}


def run_side(side: str, python: str, checkpoint: str, runs: int, new_tokens: int, threads: int) -> dict:
    """One side in a fresh process (its own interpreter and working folder)."""
    args = [python, os.path.abspath(__file__), "--side", side, "--checkpoint", checkpoint, "--runs", str(runs),
            "--new-tokens", str(new_tokens), "--threads", str(threads)]
    cwd = tempfile.gettempdir() if side == "upstream" else str(Path(__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if side == "ours":  # this checkout's llava, not whichever one the interpreter has installed
        env["PYTHONPATH"] = cwd
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--side", choices=("ours", "upstream"), default=None, help="time one side in this process")
    parser.add_argument("--upstream-python", default=None, help="interpreter of the upstream LLaVA virtualenv")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=10, help="timed generations per round")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.side is not None:
        print(json.dumps(time_generation(args.checkpoint, args.runs, args.new_tokens, args.threads)))
        return
    if not args.upstream_python:
        parser.error("--upstream-python is needed to compare with upstream")
    times: dict[str, list[float]] = {"ours": [], "upstream": []}
    for _ in range(args.rounds):
        for side, python in (("ours", sys.executable), ("upstream", args.upstream_python)):
            result = run_side(side, python, args.checkpoint, args.runs, args.new_tokens, args.threads)
            times[side] += result["seconds"]
            print(f"{side:8s} {result['package']}: median {statistics.median(result['seconds']) * 1e3:.1f} ms "
                  f"({result['tokens']} tokens)", file=sys.stderr)
    rate = {side: 1.0 / statistics.median(values) for side, values in times.items()}
    print(f"batch 1, {args.new_tokens} new tokens, {args.threads} thread(s), {len(times['ours'])} calls per side")
    for side in ("ours", "upstream"):
        print(f"  {side:8s} median {1e3 / rate[side]:7.1f} ms/answer  {rate[side]:6.2f} answers/s")
    print(f"  ours / upstream answers/s: {rate['ours'] / rate['upstream']:.2f}")


if __name__ == "__main__":
    main()
