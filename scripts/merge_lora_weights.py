"""Merge a LoRA checkpoint into its base model and save a full checkpoint (upstream's script).

    python scripts/merge_lora_weights.py --model-path ./checkpoints/llava-v1.5-7b-lora \
        --model-base lmsys/vicuna-7b-v1.5 --save-model-path ./checkpoints/llava-v1.5-7b-merged

The checkpoint is loaded on the CPU with ``load_pretrained_model`` (which applies the adapter and the
``non_lora_trainables.bin`` projector and merges them; the folder's files say it is a LoRA checkpoint, whatever
its name), then saved with ``save_pretrained`` together with its tokenizer; the result loads without
``--model-base``.

``--save-model-path`` is checked before anything loads: it may not be the checkpoint, the base or a folder
holding them, and it must be new, empty, or a folder an earlier run of this script wrote (it carries the
``.llava-output`` marker). The merged model is written into a temporary folder beside it that replaces it
only when everything is saved, so a failed or killed run leaves the old folder as it was.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from llava.mm_utils import get_model_name_from_path
from llava.outputs import atomic_folder, guard_outputs
from llava.utils import cli_main

COMMAND = "scripts/merge_lora_weights.py"


def merge_lora(model_path: str, model_base: str | None, save_model_path: str) -> None:
    """Load ``model_path`` (+ ``model_base``) merged, then save it to ``save_model_path``.

    Raises:
        UserError: If the output folder is (or holds) the checkpoint or the base, is a folder of someone
            else's files, or cannot be written.
    """
    from llava.model.builder import load_pretrained_model

    inputs = {flag: path for flag, path in (("--model-path", model_path), ("--model-base", model_base))
              if path and os.path.exists(os.path.expanduser(path))}
    guard_outputs(inputs=inputs, folders={"--save-model-path": save_model_path})
    model_name = get_model_name_from_path(model_path)
    tokenizer, model, _, _ = load_pretrained_model(model_path, model_base, model_name, device_map="cpu", device="cpu")
    with atomic_folder(save_model_path, command=COMMAND) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", "--model_path", dest="model_path", type=str, required=True)
    parser.add_argument("--model-base", "--model_base", dest="model_base", type=str, default=None)
    parser.add_argument("--save-model-path", "--save_model_path", dest="save_model_path", type=str, required=True)
    args = parser.parse_args(argv)
    merge_lora(args.model_path, args.model_base, args.save_model_path)
    print(f"saved the merged model to {args.save_model_path}")


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
