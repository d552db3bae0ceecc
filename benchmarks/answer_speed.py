"""Answering speed through the loaders' own code: time to first token, decode tokens/s and questions/s, eager vs fast.

    python benchmarks/answer_speed.py --cache /tmp/llava-random --device cuda --dtype float16 --out answer_speed.json
    python benchmarks/answer_speed.py --cache /tmp/llava-random --device cpu --layers 1 --shrink 8 \\
        --batch-sizes 1 4 --new-tokens 8 --out answer_speed_cpu.json          # the wiring, on a CPU

A LLaVA-1.5-7B-shaped checkpoint with random weights is written once into ``--cache`` in upstream's stage-1 layout (a
Vicuna-7B-shaped base LLM, a CLIP-L/14-336 tower, one projector folder per ``--projectors`` entry; see
``benchmarks/random_llava.py``). Each projector is then loaded with ``load_pretrained_model`` (through
``llava.generation.load_generator``) and answers questions about images through :func:`llava.eval.core.run_items`,
the loop every ``model_vqa*`` loader runs, at each ``--batch-sizes`` entry and each ``--fast`` path:

- every batch of the rounds answered once first, unmeasured, with one token and with ``--new-tokens`` (the captures
  and compiles of every prompt-length bucket the rounds meet happen there, as they would early in a benchmark);
- then ``--rounds`` batches, each answered twice: with ``--max_new_tokens 1``, whose time is the **time to first
  token** (reading and preprocessing the images, the tower, the projector, the prefill and the first token; the
  **model TTFT** column times ``generate(max_new_tokens=1)`` alone on a batch already preprocessed), and with
  ``--new-tokens`` tokens (the model's ``min_new_tokens`` is set to that, so every answer has them all). **Decode** is
  the extra time per token (ms per step, and tokens/s over the batch), **questions/s** the batch over the whole
  time; each figure comes from the median round.

Greedy answers of a fast path are compared with the eager ones (``same_answers``; where they differ, how many and
at which word each first differs: random float16 weights leave near-ties that rounding can flip). ``--budget-s``
time-boxes the run: settings left when it is spent are listed as skipped; a setting that fails is a row saying why
(its traceback in the log), and the others still run. ``--profile-batches`` adds a ``torch.profiler`` summary
(``benchmarks/profile_summary.py``). Output: JSON (a header with the machine, versions and the command, and one row
per setting) and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

if __name__ == "__main__":  # no progress bar per timed batch (read when torch imports tqdm)
    os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402
from PIL import Image  # noqa: E402

if __package__ in (None, ""):  # run as a file: import llava and the sibling module from the checkout
    sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import random_llava as bench  # noqa: E402
from profile_summary import profile_call, summary_line  # noqa: E402

from llava.capture import FAST_MODES  # noqa: E402
from llava.outputs import write_json  # noqa: E402
from llava.utils import UserError, cli_main  # noqa: E402

#: Vanilla, Braco-16 (C = 3, S = 7) and a fixed-K baseline at the same budget.
PROJECTORS = ("mlp2x_gelu", "braco_c3s7", "prumerge_k16")
QUESTIONS = (
    "What is shown in the image?",
    "Describe the colours and the shapes in this picture.",
    "How many objects are there?",
    "Which object is the largest, and where is it?",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench.add_checkpoint_args(parser)
    parser.add_argument("--projectors", nargs="+", default=list(PROJECTORS))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--fast", nargs="+", choices=FAST_MODES, default=None,
                        help="paths to compare (default: none cudagraph on cuda, none compile on cpu)")
    parser.add_argument("--new-tokens", type=int, default=32, help="answer length for the decode figures")
    parser.add_argument("--rounds", type=int, default=2, help="measured batches per setting")
    parser.add_argument("--profile-batches", nargs="*", type=int, default=[],
                        help="also profile the model's first token and a whole answer at these batch sizes "
                             "(torch.profiler: kernels, GPU busy vs wall, top kernels)")
    parser.add_argument("--budget-s", type=float, default=None, help="stop starting new settings after this many seconds")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    return parser


def check_args(args: argparse.Namespace) -> None:
    bench.check_checkpoint_args(args)
    for name in ("new_tokens", "rounds"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.new_tokens < 2:
        raise UserError(f"--new-tokens must be at least 2 (the first token is timed apart), got {args.new_tokens}")
    if any(batch < 1 for batch in args.batch_sizes):
        raise UserError(f"--batch-sizes must be at least 1, got {args.batch_sizes}")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be at least 1, got {args.threads}")
    if args.budget_s is not None and not args.budget_s > 0:
        raise UserError(f"--budget-s must be a positive number of seconds, got {args.budget_s!r}")


def write_images(folder: Path, count: int) -> list[Path]:
    """``count`` photos-sized RGB images of different sizes and colours."""
    paths = []
    for index in range(count):
        image = Image.new("RGB", (480 + 16 * (index % 5), 360 + 24 * (index % 3)), (40 * index % 255, 90, 200 - 7 * index % 200))
        image.paste((250, 250, 250), (40, 40, 160 + 10 * (index % 7), 140))
        paths.append(folder / f"image{index}.png")
        image.save(paths[-1])
    return paths


def items_for(images: list[Path]) -> list[Any]:
    from llava.eval.items import EvalItem, ImageRef

    return [EvalItem(question_id=index, question=QUESTIONS[index % len(QUESTIONS)],
                     prompt=f"{index}: {QUESTIONS[index % len(QUESTIONS)]}", images=(ImageRef(str(path)),))
            for index, path in enumerate(images)]


class Answering:
    """One loaded checkpoint answering item lists through the eval core, timed."""

    def __init__(self, generator: Any, name: str, device: str, scratch: Path) -> None:
        self.generator, self.name, self.device, self.scratch = generator, name, device, scratch

    def run(self, items: list[Any], batch: int, new_tokens: int) -> tuple[float, list[str]]:
        """Seconds to answer ``items`` in batches of ``batch`` with ``new_tokens`` tokens each, and the answers."""
        from llava.eval.core import GenerationConfig, run_items

        answers = self.scratch / "answers.jsonl"
        config = GenerationConfig(temperature=0, max_new_tokens=new_tokens)
        self._sync()
        started = time.perf_counter()
        run_items(items, answers, lambda: (self.generator, self.name), config, model_id=self.name, batch_size=batch, overwrite=True)
        self._sync()
        seconds = time.perf_counter() - started
        return seconds, [json.loads(line)["text"] for line in answers.read_text().splitlines()]

    def model_call(self, batch: int, new_tokens: int) -> Callable[[], Any]:
        """The model's part of answering: ``generate`` on a batch already tokenized and preprocessed as the generator
        does it (tower, projector, splice, prefill, then ``new_tokens`` tokens), as a function of nothing."""
        from llava.testing.fast_paths import prompt_batch

        generator = self.generator
        questions = [QUESTIONS[index % len(QUESTIONS)] for index in range(batch)]
        call = {**prompt_batch(generator.tokenizer, generator.image_processor, generator.model, questions),
                "do_sample": False, "max_new_tokens": new_tokens}

        def generate() -> Any:
            with torch.inference_mode():
                return generator.model.generate(**call)

        return generate

    def model_first_token(self, batch: int, rounds: int) -> float:
        """Median seconds of :meth:`model_call` with one new token (the model's part of a first token)."""
        generate = self.model_call(batch, 1)
        times = []
        for _ in range(rounds + 1):  # the first call may capture (another prompt bucket): not counted
            self._sync()
            started = time.perf_counter()
            generate()
            self._sync()
            times.append(time.perf_counter() - started)
        return statistics.median(times[1:])

    def profile(self, batch: int, new_tokens: int) -> dict[str, Any]:
        """:func:`profile_summary.profile_call` of the model's first token and of a whole answer (both run once
        unprofiled first, so that no capture or compile is profiled), and the decode step derived from the two."""
        first, answer = self.model_call(batch, 1), self.model_call(batch, new_tokens)
        first(), answer()
        device = torch.device(self.device)
        summaries = {"first_token": profile_call(first, device), "answer": profile_call(answer, device)}
        steps = new_tokens - 1
        summaries["per_decode_step"] = {
            key: round((summaries["answer"][key] - summaries["first_token"][key]) / steps, 3)
            for key in ("count", "aten_ops", "busy_ms", "wall_ms")}
        return summaries

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()


def measure(answering: Answering, items: list[Any], batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """The row of one (projector, path, batch) setting; see the module docstring. Each round answers one batch
    twice (one token, then ``--new-tokens``); the figures use the median round."""
    rounds, new = args.rounds, args.new_tokens
    warm = 0.0
    for index in range(rounds):
        chosen = items[index * batch : (index + 1) * batch]
        warm += answering.run(chosen, batch, 1)[0] + answering.run(chosen, batch, new)[0]
    firsts, wholes, texts = [], [], []
    for index in range(rounds):
        chosen = items[index * batch : (index + 1) * batch]
        firsts.append(answering.run(chosen, batch, 1)[0])
        seconds, answers = answering.run(chosen, batch, new)
        wholes.append(seconds)
        texts += answers
    first, whole = statistics.median(firsts), statistics.median(wholes)
    decode = whole - first
    return {
        "batch": batch, "rounds": rounds, "new_tokens": new, "warmup_s": round(warm, 3),
        "ttft_ms": round(first * 1e3, 3), "model_ttft_ms": round(answering.model_first_token(batch, rounds) * 1e3, 3),
        "decode_ms_per_step": round(decode / (new - 1) * 1e3, 3),
        "decode_tokens_per_s": round(batch * (new - 1) / decode, 2) if decode > 0 else None,
        "questions_per_s": round(batch / whole, 3),
        "rounds_ms": {"first_token": [round(value * 1e3, 3) for value in firsts],
                      "answer": [round(value * 1e3, 3) for value in wholes]},
        "answers": texts,
    }


def visual_tokens(generator: Any, image: Path) -> int:
    from llava.mm_utils import images_to_pixels, load_image

    model = generator.model
    pixels, sizes = images_to_pixels([load_image(str(image))], generator.image_processor, model.config, model.device, generator.dtype)
    with torch.inference_mode():
        return int(model.image_features(pixels, sizes)[0].shape[0])


class Report:
    """The rows so far, written to ``--out`` after each one (a run cut short by its time box keeps what it measured)."""

    def __init__(self, out: str, header: dict[str, Any], started: float) -> None:
        self.out, self.header, self.started = out, header, started
        self.rows: list[dict[str, Any]] = []
        self.skipped: list[str] = []

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        print(_line(row), file=sys.stderr, flush=True)
        self.save()

    def save(self) -> dict[str, Any]:
        result = {"header": {**self.header, "seconds": round(time.perf_counter() - self.started, 1)}, "rows": self.rows,
                  "skipped": self.skipped}
        write_json(self.out, result)
        return result


def run(args: argparse.Namespace, device: str, dtype: torch.dtype, paths: list[str], report: Report) -> None:
    """Every setting's row into ``report``; the settings the time budget leaves out are listed as skipped."""
    checkpoint = bench.write_random_llava(args.cache, bench.Shape(args.layers, args.shrink), args.projectors, device=device, dtype=dtype)
    print(f"checkpoint ready after {time.perf_counter() - report.started:.0f} s: {checkpoint.base.parent}", file=sys.stderr,
          flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        images = write_images(Path(scratch), max(args.batch_sizes) * args.rounds)
        items = items_for(images)
        for projector in args.projectors:
            if _out_of_time(args, report):
                report.skipped.append(f"{projector} (all)")
                continue
            generator, name = bench.load_answering(checkpoint, projector, device, dtype, fast="none", new_tokens=args.new_tokens)
            answering = Answering(generator, name, device, Path(scratch))
            measure_projector(answering, projector, visual_tokens(generator, images[0]), items, paths, args, report)
            del generator, answering
            gc.collect()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    report.save()


def measure_projector(answering: Answering, projector: str, tokens: int, items: list[Any], paths: list[str],
                      args: argparse.Namespace, report: Report) -> None:
    """One loaded projector at every batch size and path; greedy answers of a fast path are compared with eager's."""
    from llava.model.fast_flag import use_fast

    for batch in args.batch_sizes:
        eager_texts = None
        for fast in paths:
            if _out_of_time(args, report):
                report.skipped.append(f"{projector} batch {batch} --fast {fast}")
                continue
            row = {"projector": projector, "visual_tokens": tokens, "fast": fast, "batch": batch}
            try:
                use_fast(answering.generator.model, fast)
                row.update(measure(answering, items, batch, args))
                if batch in args.profile_batches:
                    row["profile"] = answering.profile(batch, args.new_tokens)
            except Exception as error:  # a benchmark row, not a crash: the other settings still run and are kept
                traceback.print_exc()  # the log keeps where it failed; the row keeps the one-line reason
                row["error"] = f"{type(error).__name__}: {error}"
                report.add(row)
                continue
            texts = row.pop("answers")
            eager_texts = texts if fast == "none" else eager_texts
            row["same_answers"] = None if fast == "none" or eager_texts is None else texts == eager_texts
            if row["same_answers"] is False:
                row["first_difference_words"] = [first_difference(a, b) for a, b in zip(eager_texts, texts) if a != b]
            report.add(row)


def first_difference(eager: str, fast: str) -> int:
    """The index of the first word at which two answers differ."""
    pairs = zip(eager.split(), fast.split())
    return next((index for index, (a, b) in enumerate(pairs) if a != b), min(len(eager.split()), len(fast.split())))


def _out_of_time(args: argparse.Namespace, report: Report) -> bool:
    return args.budget_s is not None and time.perf_counter() - report.started > args.budget_s


def _line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['projector']:>14} batch {row['batch']:>3} --fast {row['fast']:<9} FAILED: {row['error']}"
    line = (f"{row['projector']:>14} K={row['visual_tokens']:<4} batch {row['batch']:>3} --fast {row['fast']:<9} "
            f"TTFT {row['ttft_ms']:9.2f} ms (model {row['model_ttft_ms']:8.2f})  decode {row['decode_ms_per_step']:8.2f} ms/step "
            f"{row['decode_tokens_per_s'] or float('nan'):9.1f} tok/s  {row['questions_per_s']:7.2f} q/s  same {row['same_answers']}")
    for part in ("first_token", "answer") if "profile" in row else ():
        line += f"\n    profile {part}: {summary_line(row['profile'][part])}"
    return line


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| projector | K | batch | --fast | TTFT ms | model TTFT ms | decode ms/step | decode tok/s | questions/s | same answers |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['projector']} | | {row['batch']} | {row['fast']} | failed: {row['error'][:80]} | | | | | |")
            continue
        same = "" if row["same_answers"] is None else ("yes" if row["same_answers"] else
                                                      f"**no**: {len(row['first_difference_words'])} of {row['batch'] * row['rounds']}, "
                                                      f"from word {min(row['first_difference_words'])}")
        lines.append(f"| {row['projector']} | {row['visual_tokens']} | {row['batch']} | {row['fast']} | {row['ttft_ms']:.2f} | "
                     f"{row['model_ttft_ms']:.2f} | "
                     f"{row['decode_ms_per_step']:.2f} | {row['decode_tokens_per_s'] or float('nan'):.1f} | {row['questions_per_s']:.2f} | {same} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    check_args(args)
    device, dtype = bench.start_run(args)
    paths = args.fast or (["none", "cudagraph"] if device.startswith("cuda") else ["none", "compile"])
    from llava.model.fast_flag import resolve_fast

    for fast in paths:
        resolve_fast(fast, device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    header = bench.run_header(argv, args, device, dtype)
    report = Report(args.out, header, time.perf_counter())
    run(args, device, dtype, paths, report)
    print(table(report.rows))
    if report.skipped:
        print(f"\nskipped (time budget): {', '.join(report.skipped)}")
    return report.save()


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
