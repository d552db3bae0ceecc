"""``braco export --official IN OUT``: a copy of a Braco checkpoint that the official Braco code loads.

Checkpoints trained here record ``mm_projector_type: braco_c2s5`` (or ``braco_k9``, ...) plus the ``mm_fourier_*``
keys; the official LLaVA overlay (zrrraa/Braco) builds only ``fourier_mlp{N}x_gelu`` and its ``examples/infer.py``
accepts only ``fourier_mlp2x_gelu``. The parameter names are already the official ones (``0.polar_proj.weight``,
``0.spatial_scorer.1.weight``, ``1.weight``, ...), so the weights are carried unchanged (hard-linked when ``OUT`` is
on the same file system, else copied) and only ``config.json`` is rewritten:

- ``mm_projector_type`` becomes ``fourier_mlp{N}x_gelu`` (``N`` = 2 for every ``braco_*`` type);
- every ``mm_fourier_*`` key the official builder reads is written with this checkpoint's value (the builder's own
  defaults differ, e.g. no polar embedding when the key is absent); the ``mm_braco_*`` keys it does not know go;
- transformers 4.37 (the official environment) reads ``torch_dtype`` and ``rope_theta``, which transformers 5
  stores as ``dtype`` and ``rope_parameters``: both names are written;
- a vision tower found beside the checkpoint (a relative ``mm_vision_tower``) is written as an absolute path.

Options the official code does not have are refused in one sentence: C = 0, ``randrot`` coordinates, a ``learned``
or ``sincos2d`` embedding, a fractional scorer width. Top-level files only: ``checkpoint-*`` folders stay behind.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from llava.model.multimodal_encoder.location import resolve_tower_path
from llava.outputs import MARKER, atomic_folder, disk_errors, guard_outputs, write_json
from llava.utils import UserError

from .config import PROJECTOR_PREFIX, BracoConfig, to_mm_keys
from .llava_plugin import OFFICIAL_FORM, braco_config_from_model_config

__all__ = ["export_official", "main", "official_config"]

#: Markers of this project's commands, never carried into an export.
_OUR_MARKERS = (MARKER, ".llava-quickstart")


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not folder.is_dir():
        raise UserError(f"IN {os.fspath(folder)!r} is not a folder; pass a Braco checkpoint folder (stage 1 or stage 2)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"IN {os.fspath(folder)!r} has no config.json; pass a Braco checkpoint folder (stage 1 or stage 2)") from None
    except (OSError, ValueError) as error:
        raise UserError(f"{os.fspath(path)!r} cannot be read as JSON ({error}); pass a Braco checkpoint folder") from None
    if not isinstance(config, dict):
        raise UserError(f"{os.fspath(path)!r} is not a JSON object; pass a Braco checkpoint folder")
    return config


def _mlp_depth(projector_type: str) -> int:
    official = OFFICIAL_FORM.parse(projector_type)
    if official is not None:
        return official["N"]
    if projector_type.startswith(PROJECTOR_PREFIX):
        return 2
    raise UserError(
        f"mm_projector_type {projector_type!r} is not a Braco projector (braco_c<C>s<S>, braco_k<K> or fourier_mlp<N>x_gelu); "
        "only Braco checkpoints have an official format"
    )


def _check_exportable(cfg: BracoConfig) -> None:
    """Refuse what the official ``FourierFreqSelect`` cannot express (one sentence naming the option)."""
    problems = {
        "C = 0 (the official compressor needs C >= 1)": cfg.cutoff < 1,
        f"{cfg.resolved_coordinates!r} coordinates (official: coefficients or the C x C inverse DCT)": cfg.resolved_coordinates not in ("coef", "idct"),
        f"the {cfg.embedding!r} embedding (official: polar or none)": cfg.embedding not in ("polar", "none"),
        f"scorer width {cfg.scorer_hidden_mult} x d (official: a whole multiple)": float(cfg.scorer_hidden_mult) != int(cfg.scorer_hidden_mult),
    }
    for what, bad in problems.items():
        if bad:
            raise UserError(f"this checkpoint uses {what}, which the official Braco code cannot build; it has no official export")


def official_config(config: dict[str, Any], folder: Path) -> tuple[dict[str, Any], BracoConfig]:
    """``config`` (a checkpoint's ``config.json`` read from ``folder``) as the official code reads it, and the coder's
    settings (see the module docstring)."""
    projector_type = config.get("mm_projector_type")
    if not isinstance(projector_type, str):
        raise UserError(f"{os.fspath(folder / 'config.json')!r} names no mm_projector_type; pass a Braco checkpoint folder")
    depth = _mlp_depth(projector_type)
    try:
        cfg = braco_config_from_model_config(SimpleNamespace(**config), projector_type)
    except ValueError as error:
        raise UserError(f"{os.fspath(folder / 'config.json')!r}: {error}") from None
    _check_exportable(cfg)
    out = {key: value for key, value in config.items() if not key.startswith("mm_braco_")}
    out.update({key: value for key, value in to_mm_keys(cfg).items() if not key.startswith("mm_braco_")})
    out["mm_fourier_spatial_hidden_mult"] = int(cfg.scorer_hidden_mult)
    out["mm_projector_type"] = f"fourier_mlp{depth}x_gelu"
    if "dtype" in out and "torch_dtype" not in out:
        out["torch_dtype"] = out["dtype"]
    rope = out.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope and "rope_theta" not in out:
        out["rope_theta"] = rope["rope_theta"]
    for key in ("mm_vision_tower", "vision_tower"):
        if isinstance(out.get(key), str) and out[key]:
            found = resolve_tower_path(out[key], folder)
            out[key] = os.path.abspath(found) if os.path.isdir(found) else out[key]
    return out, cfg


def _carry(source: Path, target: Path) -> str:
    """Hard-link ``source`` to ``target`` (``"linked"``), or copy it when linking is not possible (``"copied"``)."""
    try:
        os.link(source, target)
        return "linked"
    except OSError:
        shutil.copy2(source, target)
        return "copied"


def export_official(source: str | os.PathLike[str], out: str | os.PathLike[str]) -> dict[str, Any]:
    """Write the official-format copy of the checkpoint ``source`` into the new folder ``out``.

    Returns:
        ``{"projector_type", "tokens", "files": {name: "linked"|"copied"|"written"}, "left_out": [names]}``.

    Raises:
        UserError: For a missing or non-Braco ``source``, an option the official code lacks, or an ``out`` that is
            ``source``, holds files of the user's, or cannot be written.
    """
    folder = Path(source)
    config, cfg = official_config(_read_config(folder), folder)
    guard_outputs(inputs={"IN": folder}, folders={"OUT": out})
    entries = sorted(folder.iterdir())
    files = [entry for entry in entries if entry.is_file() and entry.name != "config.json" and entry.name not in _OUR_MARKERS]
    left_out = [entry.name + "/" for entry in entries if entry.is_dir()]
    done: dict[str, str] = {}
    with disk_errors("OUT", out), atomic_folder(out, command="braco export --official") as staging:
        for entry in files:
            done[entry.name] = _carry(entry, staging / entry.name)
        write_json(staging / "config.json", config)
        done["config.json"] = "written"
    return {"projector_type": config["mm_projector_type"], "tokens": cfg.output_tokens, "name": cfg.name, "files": done,
            "left_out": left_out}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="braco export", description=__doc__.splitlines()[0])
    parser.add_argument("--official", action="store_true", required=True,
                        help="the official Braco code's format (zrrraa/Braco: fourier_mlp2x_gelu and its mm_fourier_* keys)")
    parser.add_argument("source", metavar="IN", help="a Braco checkpoint folder trained here (stage 2, or stage 1)")
    parser.add_argument("out", metavar="OUT", help="a new or empty folder for the export")
    args = parser.parse_args(argv)
    try:
        result = export_official(args.source, args.out)
    except UserError as error:
        parser.exit(2, f"braco export: error: {error}\n")
    counts = {kind: sum(1 for value in result["files"].values() if value == kind) for kind in ("linked", "copied", "written")}
    print(f"{args.out}: mm_projector_type {result['projector_type']} ({result['name']}, {result['tokens']} visual tokens); "
          f"files: {counts['linked']} hard-linked, {counts['copied']} copied, config.json rewritten"
          + (f"; left out: {', '.join(result['left_out'])}" if result["left_out"] else ""))
    return result


if __name__ == "__main__":
    main()
