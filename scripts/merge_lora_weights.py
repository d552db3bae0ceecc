"""Merge a LoRA checkpoint into its base model and save a full checkpoint (upstream's script).

    python scripts/merge_lora_weights.py --model-path ./checkpoints/llava-v1.5-7b-lora \
        --model-base lmsys/vicuna-7b-v1.5 --save-model-path ./checkpoints/llava-v1.5-7b-merged

The checkpoint is loaded on the CPU with ``load_pretrained_model`` (which applies the adapter and the
``non_lora_trainables.bin`` projector and merges them, by upstream's name rule: the path's name contains
"llava" and "lora"), then saved with ``save_pretrained`` together with its tokenizer; the result loads
without ``--model-base``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from llava.eval.files import same_file
from llava.mm_utils import get_model_name_from_path
from llava.utils import UserError, cli_main


def merge_lora(model_path: str, model_base: str | None, save_model_path: str) -> None:
    """Load ``model_path`` (+ ``model_base``) merged, then save it to ``save_model_path``.

    Raises:
        UserError: If the output folder is the checkpoint or the base itself.
    """
    from llava.model.builder import load_pretrained_model

    for flag, source in (("--model-path", model_path), ("--model-base", model_base)):
        if source and os.path.isdir(os.path.expanduser(source)) and same_file(source, save_model_path):
            raise UserError(f"--save-model-path {save_model_path!r} is the {flag} folder; choose a new folder")
    model_name = get_model_name_from_path(model_path)
    tokenizer, model, _, _ = load_pretrained_model(model_path, model_base, model_name, device_map="cpu", device="cpu")
    model.save_pretrained(save_model_path)
    tokenizer.save_pretrained(save_model_path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", "--model_path", dest="model_path", type=str, required=True)
    parser.add_argument("--model-base", "--model_base", dest="model_base", type=str, default=None)
    parser.add_argument("--save-model-path", "--save_model_path", dest="save_model_path", type=str, required=True)
    args = parser.parse_args(argv)
    merge_lora(args.model_path, args.model_base, args.save_model_path)


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
