"""Frozen vision-tower features ``X ∈ R^{L x D_v}``, ``L = N²`` (paper §3.1 eq. ``setup_X``), from a local folder.

Accepted ``--vision-tower`` folders:

- a Hugging Face CLIP or SigLIP checkpoint (``model_type`` ``clip``/``clip_vision_model``/``siglip``/
  ``siglip_vision_model``), with its ``preprocessor_config.json`` (without one, a processor is built from the
  tower's ``image_size`` and the family's mean/std, and a warning says so);
- a LLaVA checkpoint whose ``config.json`` names the tower in ``mm_vision_tower`` (an absolute folder, or one
  relative to the checkpoint or the working directory). Its ``mm_vision_select_layer`` becomes the default
  layer. The key is read from JSON; nothing from ``llava`` is imported.

Features are ``hidden_states[select_layer]`` (LLaVA's default ``-2``, the penultimate layer) with CLIP's CLS
token dropped (LLaVA's ``patch`` selection), so every tower gives an ``N x N`` grid for any ``N``.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .data import InputError

__all__ = ["TOWER_FAMILIES", "VisionTower", "resolve_tower_path", "load_tower"]

logger = logging.getLogger(__name__)

#: config ``model_type`` -> family; CLIP prepends a CLS token, SigLIP does not.
TOWER_FAMILIES = {"clip": "clip", "clip_vision_model": "clip", "siglip": "siglip", "siglip_vision_model": "siglip"}
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise InputError(f"{str(folder)!r} has no config.json; expected a CLIP/SigLIP vision tower or a LLaVA checkpoint folder")
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
    name = str(config["mm_vision_tower"])
    for candidate in (Path(name), folder / name, Path.cwd() / name):
        if candidate.is_dir():
            settings = {k: config[k] for k in ("mm_vision_select_layer", "mm_vision_select_feature") if k in config}
            return candidate, settings
    raise InputError(f"mm_vision_tower {name!r} in {str(folder / 'config.json')!r} is not a local folder; download the tower "
                     "and pass its folder as --vision-tower")


@dataclass
class VisionTower:
    """A frozen tower with its processor; :meth:`encode` maps PIL images to ``[batch, N², D_v]`` float32."""

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
        hidden = self.model(pixel_values=pixels, output_hidden_states=True).hidden_states[self.select_layer]
        if self.family == "clip":
            hidden = hidden[:, 1:]  # drop CLS: LLaVA's 'patch' selection
        grid = math.isqrt(hidden.shape[1])
        if grid * grid != hidden.shape[1]:
            raise InputError(f"the tower gives {hidden.shape[1]} patch tokens, which is not an N x N grid")
        return hidden.float().cpu()


def _processor(folder: Path, family: str, config: dict[str, Any]):
    from transformers import AutoImageProcessor, CLIPImageProcessor

    if (folder / "preprocessor_config.json").is_file():
        return AutoImageProcessor.from_pretrained(str(folder))
    vision = config.get("vision_config", config)
    size = int(vision.get("image_size", 224))
    logger.warning("%s has no preprocessor_config.json; resizing to %d px with %s normalisation", folder, size, family)
    mean, std = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)) if family == "clip" else \
        ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    return CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                              image_mean=list(mean), image_std=list(std))


def load_tower(path: str | Path, *, select_layer: int | None = None, device: str = "cpu",
               dtype: str = "float32") -> VisionTower:
    """Load a CLIP/SigLIP tower (or a LLaVA checkpoint's ``mm_vision_tower``) for feature extraction.

    Args:
        path: tower folder or LLaVA checkpoint folder.
        select_layer: hidden-state index (default: the checkpoint's ``mm_vision_select_layer``, else ``-2``).
        device: torch device string.
        dtype: ``float32``, ``float16`` or ``bfloat16``.
    """
    folder, settings = resolve_tower_path(path)
    config = _read_config(folder)
    family = TOWER_FAMILIES.get(config.get("model_type", ""))
    if family is None:
        raise InputError(f"{str(folder)!r} has model_type {config.get('model_type')!r}; expected one of {sorted(TOWER_FAMILIES)}")
    if dtype not in _DTYPES:
        raise InputError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPES)}")
    from transformers import CLIPVisionModel, SiglipVisionModel

    cls = CLIPVisionModel if family == "clip" else SiglipVisionModel
    model = cls.from_pretrained(str(folder), dtype=_DTYPES[dtype]).to(device).eval()
    layers = model.config.num_hidden_layers
    layer = int(settings.get("mm_vision_select_layer", -2) if select_layer is None else select_layer)
    if not -(layers + 1) <= layer <= layers:
        raise InputError(f"select layer {layer} is out of range for a {layers}-layer tower; expected {-(layers + 1)}..{layers}")
    return VisionTower(model=model, processor=_processor(folder, family, config), family=family, select_layer=layer,
                       name=folder.name, device=device, dtype=_DTYPES[dtype])
