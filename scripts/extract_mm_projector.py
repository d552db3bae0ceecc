"""Extract the projector weights of a LLaVA checkpoint into an ``mm_projector.bin`` (upstream's script).

    python scripts/extract_mm_projector.py --model-path ./checkpoints/llava-v1.5-7b --output ./mm_projector.bin

Every tensor whose name contains ``mm_projector`` (for a Braco projector: the coder and the MLP), plus
``embed_tokens`` when the model was trained with ``mm_use_im_start_end``, is read from the checkpoint's
shards (``*.safetensors`` or ``pytorch_model*.bin``, with or without an index) and saved with ``torch.save``
under its full name, the layout ``--pretrain_mm_mlp_adapter`` and ``--model-base`` loading read. A LoRA folder
(``adapter_config.json``) keeps its projector in ``non_lora_trainables.bin`` (or ``.safetensors``): it is read from
there, its names without PEFT's ``base_model.model.`` prefix; a stage-1 folder's ``mm_projector.bin`` is read as is.
Every file goes through the project's one weights reader.

``--output`` is checked before anything is read: it may not be one of the checkpoint's own files (its shards,
their index, ``config.json``), and it is written atomically with the user's umask, so a failed run leaves
the old file as it was. ``.bin`` shards are read with ``weights_only=True``: a shard holding other pickled
objects is refused in one sentence.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from llava.model.checkpoint_layout import ADAPTER_FILE, NON_LORA_FILES, PROJECTOR_FILES, read_config_file
from llava.model.weights_io import load_weights_file, strip_lora_prefixes
from llava.outputs import atomic_output, guard_outputs
from llava.utils import UserError, cli_main

INDEX_FILES = (("model.safetensors.index.json", "*.safetensors"), ("pytorch_model.bin.index.json", "pytorch_model*.bin"))


def weight_files(model_path: Path) -> list[Path]:
    """The checkpoint's weight shards, safetensors first (from the index when there is one).

    Raises:
        UserError: If the folder holds no weights, or an index is not readable.
    """
    for index_name, pattern in INDEX_FILES:
        index = model_path / index_name
        if index.is_file():
            weight_map = read_config_file(index, index_name).get("weight_map")
            if not isinstance(weight_map, dict):
                raise UserError(f"{os.fspath(index)} has no 'weight_map' object; restore the index from the original checkpoint")
            return sorted({model_path / name for name in weight_map.values()})
        shards = sorted(model_path.glob(pattern))
        if shards:
            return shards
    raise UserError(f"--model-path {os.fspath(model_path)!r} holds no *.safetensors or pytorch_model*.bin weights")


def projector_files(model_path: Path) -> list[Path]:
    """The files holding the projector: a LoRA folder's ``non_lora_trainables``, else the model's shards, else a
    stage-1 folder's ``mm_projector`` file.

    Raises:
        UserError: For a LoRA folder without ``non_lora_trainables``, or a folder without weights.
    """
    found = {name: model_path / name for name in (*NON_LORA_FILES, *PROJECTOR_FILES) if (model_path / name).is_file()}
    if (model_path / ADAPTER_FILE).is_file():
        lora = [found[name] for name in NON_LORA_FILES if name in found]
        if not lora:
            raise UserError(
                f"--model-path {os.fspath(model_path)!r} is a LoRA checkpoint without {' or '.join(NON_LORA_FILES)}, where "
                "its projector would be; merge it first with scripts/merge_lora_weights.py, then extract from the merged folder"
            )
        return lora[:1]
    try:
        return weight_files(model_path)
    except UserError:
        stage1 = [found[name] for name in PROJECTOR_FILES if name in found]
        if stage1:
            return stage1[:1]
        raise


def _read(shard: Path, keep: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    if shard.suffix == ".safetensors":
        from safetensors import safe_open

        from llava.model.weights_io import weights_file_error

        try:
            with safe_open(str(shard), framework="pt") as handle:
                return {key: handle.get_tensor(key) for key in handle.keys() if keep(key)}
        except Exception as error:  # SafetensorError, OSError: a truncated or foreign file
            raise weights_file_error(os.fspath(shard), error) from None
    # Mapped, not read: only the projector's tensors are copied out of a multi-gigabyte shard.
    state = load_weights_file(shard, mmap=True)
    return {key: value.clone() for key, value in state.items() if keep(key)}


def _inputs(folder: Path) -> dict[str, Path]:
    """The checkpoint's files this command reads, which ``--output`` must never be."""
    names = ["config.json", ADAPTER_FILE] + [index for index, _ in INDEX_FILES]
    found = {f"--model-path's {name}": folder / name for name in names if (folder / name).exists()}
    for pattern in ("*.safetensors", "*.bin"):
        found.update({f"--model-path's weights file {shard.name}": shard for shard in folder.glob(pattern)})
    return found


def extract_projector(model_path: str | os.PathLike[str], output: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Write the projector tensors of ``model_path`` to ``output``; returns them.

    Raises:
        UserError: If ``output`` is one of the checkpoint's files or cannot be written, the checkpoint has no
            projector weights, or a weight file is unreadable.
    """
    folder = Path(os.path.expanduser(os.fspath(model_path)))
    if not folder.is_dir():
        raise UserError(f"--model-path {os.fspath(model_path)!r} is not a checkpoint folder")
    guard_outputs(inputs=_inputs(folder), files={"--output": output})
    config_path = folder / "config.json"
    config = read_config_file(config_path) if config_path.is_file() else {}
    names = ["mm_projector"] + (["embed_tokens"] if config.get("mm_use_im_start_end") else [])
    tensors: dict[str, torch.Tensor] = {}
    for shard in projector_files(folder):
        tensors.update(strip_lora_prefixes(_read(shard, lambda key: any(name in key for name in names))))
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
