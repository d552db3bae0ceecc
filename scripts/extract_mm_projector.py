"""Extract the projector weights of a LLaVA checkpoint into an ``mm_projector.bin`` (upstream's script).

    python scripts/extract_mm_projector.py --model-path ./checkpoints/llava-v1.5-7b --output ./mm_projector.bin

Every tensor whose name contains ``mm_projector`` (for a Braco projector: the coder and the MLP), plus
``embed_tokens`` when the model was trained with ``mm_use_im_start_end``, is read from the checkpoint's
shards (``*.safetensors`` or ``pytorch_model*.bin``, with or without an index) and saved with ``torch.save``
under its full name, the layout ``--pretrain_mm_mlp_adapter`` and ``--model-base`` loading read.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from llava.eval.files import atomic_output
from llava.utils import UserError, cli_main


def weight_files(model_path: Path) -> list[Path]:
    """The checkpoint's weight shards, safetensors first (from the index when there is one).

    Raises:
        UserError: If the folder holds no weights.
    """
    for index_name, pattern in (("model.safetensors.index.json", "*.safetensors"), ("pytorch_model.bin.index.json", "pytorch_model*.bin")):
        index = model_path / index_name
        if index.is_file():
            return sorted({model_path / name for name in json.loads(index.read_text())["weight_map"].values()})
        shards = sorted(model_path.glob(pattern))
        if shards:
            return shards
    raise UserError(f"--model-path {os.fspath(model_path)!r} holds no *.safetensors or pytorch_model*.bin weights")


def _read(shard: Path, keep) -> dict[str, torch.Tensor]:
    if shard.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(shard), framework="pt") as handle:
            return {key: handle.get_tensor(key) for key in handle.keys() if keep(key)}
    state = torch.load(shard, map_location="cpu", weights_only=True)  # never unpickle code from a checkpoint
    return {key: value for key, value in state.items() if keep(key)}


def extract_projector(model_path: str | os.PathLike[str], output: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Write the projector tensors of ``model_path`` to ``output``; returns them.

    Raises:
        UserError: If the checkpoint has no projector weights, or ``output`` is inside a weight file's name.
    """
    folder = Path(os.path.expanduser(os.fspath(model_path)))
    if not folder.is_dir():
        raise UserError(f"--model-path {os.fspath(model_path)!r} is not a checkpoint folder")
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    names = ["mm_projector"] + (["embed_tokens"] if config.get("mm_use_im_start_end") else [])
    tensors: dict[str, torch.Tensor] = {}
    for shard in weight_files(folder):
        tensors.update(_read(shard, lambda key: any(name in key for name in names)))
    if not any("mm_projector" in key for key in tensors):
        raise UserError(f"--model-path {os.fspath(model_path)!r} has no mm_projector weights (is it a LLaVA checkpoint?)")
    with atomic_output(output, "wb") as handle:
        torch.save(tensors, handle)
    return tensors


def main(argv: Sequence[str] | None = None) -> dict[str, torch.Tensor]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", "--model_path", dest="model_path", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    tensors = extract_projector(args.model_path, args.output)
    print(f"saved {len(tensors)} tensors to {args.output}")
    return tensors


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
