"""Frozen vision-tower features ``X ∈ R^{L x D_v}``, ``L = N²`` (paper §3.1 eq. ``setup_X``), from a local folder.

Accepted ``--vision-tower`` folders:

- a saved vision tower of any ``model_type`` in LLaVA's vision-tower registry
  (``llava.model.multimodal_encoder.list_vision_towers()``: CLIP, SigLIP and fixed-resolution SigLIP2 built in),
  with its ``preprocessor_config.json`` (without one, the tower's default processor at its ``image_size`` is
  used, and a warning says so);
- a LLaVA checkpoint whose ``config.json`` names the tower in ``mm_vision_tower`` (an absolute folder, or one
  relative to the working directory or, failing that, to the checkpoint: the loaders' rule). Its ``mm_vision_select_layer`` becomes the default
  layer. The key is read from JSON.

Towers are built only through that registry (``build_vision_tower``), so the diagnostics see exactly the
features a LLaVA model gets: ``hidden_states[select_layer]`` (LLaVA's default ``-2``, the penultimate layer) with
the CLS token dropped where the tower has one (``patch`` selection), so every tower gives an ``N x N`` grid.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from .data import InputError

__all__ = ["VisionTower", "resolve_tower_path", "load_tower"]

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise InputError(f"{str(folder)!r} has no config.json; expected a vision tower or a LLaVA checkpoint folder")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{str(path)!r} is not valid JSON ({exc})") from None


def resolve_tower_path(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """The tower folder for ``path`` and the LLaVA settings found on the way (``{}`` for a plain tower)."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(f"vision tower path {str(folder)!r} does not exist or is not a folder")
    config = _read_config(folder)
    if "mm_vision_tower" not in config:
        return folder, {}
    from llava.model.multimodal_encoder.location import resolve_tower_path as loaders_rule

    name = str(config["mm_vision_tower"])
    candidate = Path(loaders_rule(name, folder))  # the working directory's folder, else the one beside the checkpoint
    if candidate.is_dir():
        settings = {k: config[k] for k in ("mm_vision_select_layer", "mm_vision_select_feature") if k in config}
        return candidate, settings
    raise InputError(f"mm_vision_tower {name!r} in {str(folder / 'config.json')!r} is not a local folder; download the tower "
                     "and pass its folder as --vision-tower")


@dataclass
class VisionTower:
    """A frozen registry tower with its processor; :meth:`encode` maps PIL images to ``[batch, N², D_v]`` float32.

    ``model`` is the LLaVA tower module (``llava.model.multimodal_encoder.BaseVisionTower``); ``family`` its
    family (``"clip"``, ``"siglip"``).
    """

    model: Any
    processor: Any
    family: str
    select_layer: int
    name: str
    device: str = "cpu"
    dtype: torch.dtype = torch.float32

    @torch.inference_mode()
    def encode(self, images: list) -> torch.Tensor:
        """Patch-token features of a batch of RGB ``PIL`` images: ``[batch, L, D_v]`` float32 on CPU."""
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"].to(self.device, self.dtype)
        return self.model(pixels).float().cpu()


def load_tower(path: str | Path, *, select_layer: int | None = None, device: str = "cpu",
               dtype: str = "float32") -> VisionTower:
    """Load a registered vision tower (or a LLaVA checkpoint's ``mm_vision_tower``) for feature extraction.

    Args:
        path: tower folder or LLaVA checkpoint folder.
        select_layer: hidden-state index (default: the checkpoint's ``mm_vision_select_layer``, else ``-2``).
        device: torch device string.
        dtype: ``float32``, ``float16`` or ``bfloat16``.

    Raises:
        InputError: one sentence for a missing folder, an unregistered ``model_type``, a layer out of range, a
            non-square token grid or an unknown dtype.
    """
    from llava.model.multimodal_encoder import build_vision_tower

    folder, settings = resolve_tower_path(path)
    if dtype not in _DTYPES:
        raise InputError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPES)}")
    layer = int(settings.get("mm_vision_select_layer", -2) if select_layer is None else select_layer)
    args = SimpleNamespace(mm_vision_tower=str(folder), mm_vision_select_layer=layer, mm_vision_select_feature="patch")
    try:
        tower = build_vision_tower(args)
        tower.num_patches_per_side  # the diagnostics need an N x N grid
    except ValueError as exc:
        raise InputError(str(exc)) from None
    tower.to(device=device, dtype=_DTYPES[dtype]).eval()
    return VisionTower(model=tower, processor=tower.image_processor, family=tower.family, select_layer=layer,
                       name=folder.name, device=device, dtype=_DTYPES[dtype])
