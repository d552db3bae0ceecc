"""A LLaVA-1.5-7B-shaped checkpoint with random weights, in upstream's on-disk layout, written once into a cache folder.

Layout (what upstream's stage 1 leaves and ``load_pretrained_model(path, model_base)`` reads)::

    <cache>/<key>/vicuna-7b/                         the base LLM: config.json, model*.safetensors, tokenizer files
    <cache>/<key>/clip-vit-large-patch14-336/        the vision tower and its image processor
    <cache>/<key>/llava-v1.5-7b-<projector>-pretrain/   config.json (mm_* keys) + mm_projector.bin, one per projector

``<key>`` names the shape (``L32`` for the whole model; ``L2-w8`` for 2 LLM layers at 1/8 of every width), so runs
with other ``--layers`` never mix. The shapes are ``llava.cost.presets``' ``llava-v1.5-7b`` (Vicuna-7B, CLIP-L/14-336);
``layers`` caps the LLM's layers and the tower's (at least 2, so LLaVA's select layer -2 exists), ``shrink`` divides
every width (hidden sizes, heads, MLP, vocabulary) for a CPU run. The LLM is initialised on ``device`` (a 7B model
in seconds on a GPU) and saved as safetensors; a folder is complete once it holds the project's output marker, so a
killed write is redone, and a folder of someone else's files is refused.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from llava.outputs import MARKER, atomic_folder, check_output_folder, is_ours, write_text
from llava.utils import UserError

COMMAND = "benchmarks/answer_speed.py"
TEMPLATE_TEXTS = [
    "A chat between a curious human and an artificial intelligence assistant.",
    "The assistant gives helpful, detailed, and polite answers to the human's questions.",
    "USER: ASSISTANT: What is shown in the image? Describe the colours and the shapes. Answer the question using a "
    "single word or phrase. How many objects are there? Which one is the largest?",
]


@dataclass(frozen=True)
class Shape:
    """How far the preset is cut down: LLM layers (tower layers follow, at least 2) and a width divisor."""

    layers: int | None = None
    shrink: int = 1

    @property
    def key(self) -> str:
        return f"L{self.layers or 'all'}" + (f"-w{self.shrink}" if self.shrink > 1 else "")


@dataclass(frozen=True)
class RandomLlava:
    """The written folders."""

    base: Path
    tower: Path
    projectors: dict[str, Path]


def _configs(shape: Shape):
    from llava.cost.presets import get_preset

    spec = get_preset("llava-v1.5-7b")
    llm, vision = spec.llm, spec.vision
    s = shape.shrink
    if shape.layers:
        llm.num_hidden_layers = min(llm.num_hidden_layers, shape.layers)
        vision.num_hidden_layers = min(vision.num_hidden_layers, max(2, shape.layers))
    if s > 1:
        llm.hidden_size, llm.intermediate_size = llm.hidden_size // s, llm.intermediate_size // s
        llm.num_attention_heads = llm.num_key_value_heads = max(1, llm.num_attention_heads // s)
        llm.vocab_size = max(llm.vocab_size // s, 512)
        vision.hidden_size, vision.intermediate_size = vision.hidden_size // s, vision.intermediate_size // s
        vision.num_attention_heads = max(1, vision.num_attention_heads // s)
    return llm, vision


def _write_base(folder: Path, llm_config, tokenizer_dir: Path, device: str, dtype: torch.dtype) -> None:
    from transformers import LlamaForCausalLM

    from llava.testing.tiny import _copy_tokenizer

    llm_config.pad_token_id, llm_config.bos_token_id, llm_config.eos_token_id = 0, 1, 2
    with torch.device(device):
        model = LlamaForCausalLM._from_config(llm_config, dtype=dtype)
    model.save_pretrained(folder)
    del model
    _copy_tokenizer(tokenizer_dir, folder)


def _write_tower(folder: Path, vision) -> None:
    from llava.testing.tiny import build_tiny_clip_tower

    build_tiny_clip_tower(folder, image_size=vision.image_size, patch_size=vision.patch_size, hidden=vision.hidden_size,
                          layers=vision.num_hidden_layers, heads=vision.num_attention_heads, intermediate=vision.intermediate_size)


def write_random_llava(cache: str | os.PathLike[str], shape: Shape, projectors: list[str], *, device: str,
                       dtype: torch.dtype) -> RandomLlava:
    """The folders for ``shape`` under ``cache``, written now where missing (see the module docstring).

    Raises:
        UserError: When ``cache/<key>`` holds files this project did not write.
    """
    from llava.testing.tiny import build_tiny_projector_checkpoint, train_tiny_tokenizer

    root = Path(cache) / f"llava-v1.5-7b-random-{shape.key}"
    check_output_folder(root, "--cache")
    if not is_ours(root):
        root.mkdir(parents=True, exist_ok=True)
        write_text(root / MARKER, f"written by {COMMAND}; a re-run of it reuses or replaces what is here\n")
    llm_config, vision = _configs(shape)
    parts = {"base": root / "vicuna-7b", "tower": root / "clip-vit-large-patch14-336"}
    if not is_ours(parts["tower"]):
        with atomic_folder(parts["tower"], command=COMMAND) as folder:
            _write_tower(folder, vision)
    if not is_ours(parts["base"]):
        with atomic_folder(root / "tokenizer", command=COMMAND) as tokenizer:
            train_tiny_tokenizer(tokenizer, texts=TEMPLATE_TEXTS * 20)
        with atomic_folder(parts["base"], command=COMMAND) as folder:
            _write_base(folder, llm_config, root / "tokenizer", device, dtype)
    written = {}
    for projector in projectors:
        folder = root / f"llava-v1.5-7b-{projector}-pretrain"
        if not is_ours(folder):
            with atomic_folder(folder, command=COMMAND) as staging:
                build_tiny_projector_checkpoint(staging, parts["base"], parts["tower"], projector_type=projector)
        written[projector] = folder
    return RandomLlava(base=parts["base"], tower=parts["tower"], projectors=written)


def add_checkpoint_args(parser: argparse.ArgumentParser) -> None:
    """The flags of a benchmark that answers with a random checkpoint: where it lives, the shape, device and output."""
    parser.add_argument("--cache", required=True, help="folder for the random checkpoint (written once, then reused)")
    parser.add_argument("--out", required=True, help="JSON file for the results")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--dtype", default=None, help="float16, bfloat16 or float32 (default: float16 on cuda, float32 on cpu)")
    parser.add_argument("--layers", type=int, default=None, help="cap the LLM's layers (and the tower's, at least 2)")
    parser.add_argument("--shrink", type=int, default=1, help="divide every width by this (a CPU run)")


def check_checkpoint_args(args: argparse.Namespace) -> None:
    """:func:`add_checkpoint_args`' values, each bad one one sentence."""
    if args.shrink < 1:
        raise UserError(f"--shrink must be at least 1, got {args.shrink}")
    if args.layers is not None and args.layers < 1:
        raise UserError(f"--layers must be at least 1, got {args.layers}")


def start_run(args: argparse.Namespace) -> tuple[str, torch.dtype]:
    """Refuse an ``--out`` this run cannot write (before any work) and resolve ``--device`` / ``--dtype``."""
    from llava.devices import resolve_device, resolve_dtype
    from llava.outputs import guard_outputs

    guard_outputs(files={"--out": args.out})
    device = resolve_device(args.device)
    return device, resolve_dtype(args.dtype, device)


def run_header(argv: list[str] | None, args: argparse.Namespace, device: str, dtype: torch.dtype) -> dict[str, Any]:
    """What a result file says about its run: the command, UTC date, device, dtype, versions and the shape."""
    import transformers

    return {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else
        f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, {os.cpu_count()} cores)",
        "dtype": str(dtype).removeprefix("torch."), "torch": torch.__version__, "transformers": transformers.__version__,
        "shape": Shape(args.layers, args.shrink).key,
    }


def load_answering(checkpoint: RandomLlava, projector: str, device: str, dtype: torch.dtype, *, fast: str | None,
                   new_tokens: int) -> tuple[Any, str]:
    """``llava.generation.load_generator`` on one projector of ``checkpoint`` in ``dtype``, every answer made
    exactly ``new_tokens`` long (``min_new_tokens``), so that timings compare like with like."""
    from llava.generation import load_generator

    generator, name = load_generator(str(checkpoint.projectors[projector]), str(checkpoint.base), "vicuna_v1", device, fast=fast)
    generator.model.to(dtype=dtype)
    generator.dtype = dtype
    generator.model.generation_config.min_new_tokens = new_tokens
    return generator, name


__all__ = ["RandomLlava", "Shape", "add_checkpoint_args", "check_checkpoint_args", "load_answering", "run_header", "start_run",
           "write_random_llava"]
