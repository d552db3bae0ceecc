"""CLIP vision tower: pixels ``[N, 3, H, W]`` → one feature vector per patch ``[N, P, D]``.

The tower is frozen and runs without gradients. Features come from ``hidden_states[select_layer]`` (the
penultimate layer, before the post-layernorm, for LLaVA-1.5) with the CLS token dropped (``patch``) or kept
(``cls_patch``). With ``delay_load`` only the ``CLIPVisionConfig`` is read, so a LLaVA model can be built
(e.g. inside ``from_pretrained``) before the CLIP weights are loaded with :meth:`CLIPVisionTower.load_model`.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn as nn
from transformers import CLIPImageProcessorPil, CLIPVisionConfig, CLIPVisionModel

logger = logging.getLogger(__name__)

SELECT_FEATURES = ("patch", "cls_patch")


class CLIPVisionTower(nn.Module):
    """A frozen ``CLIPVisionModel`` that returns the patch features LLaVA projects into the LLM.

    Args:
        vision_tower: A local directory or hub name holding a ``CLIPVisionModel`` and its image processor.
        args: Any object with ``mm_vision_select_layer`` (index into the hidden states, e.g. -2) and
            optionally ``mm_vision_select_feature`` (``"patch"``, the default, or ``"cls_patch"``) and
            ``unfreeze_mm_vision_tower`` (load the weights even when ``delay_load`` is set).
        delay_load: Read only the config now; call :meth:`load_model` before the first forward.
    """

    def __init__(self, vision_tower: str, args: Any, delay_load: bool = False) -> None:
        super().__init__()
        self.is_loaded = False
        self.vision_tower_name = str(vision_tower)
        self.select_layer = int(getattr(args, "mm_vision_select_layer", -2))
        self.select_feature = getattr(args, "mm_vision_select_feature", None) or "patch"
        if self.select_feature not in SELECT_FEATURES:
            raise ValueError(
                f"unknown mm_vision_select_feature {self.select_feature!r}; expected one of {', '.join(SELECT_FEATURES)}"
            )
        self.image_processor: CLIPImageProcessorPil | None = None
        if not delay_load or getattr(args, "unfreeze_mm_vision_tower", False):
            self.load_model()
        else:
            self.cfg_only = CLIPVisionConfig.from_pretrained(self.vision_tower_name)

    def load_model(self, device_map: Any = None) -> None:
        """Load the image processor and the frozen ``CLIPVisionModel`` (a no-op when already loaded).

        The processor is the PIL backend, which resizes exactly like the processor upstream LLaVA was
        trained with (the torchvision backend differs in the last bits of the bicubic resize).

        Args:
            device_map: Passed to ``CLIPVisionModel.from_pretrained`` (e.g. ``"auto"`` or ``{"": "cpu"}``).
        """
        if self.is_loaded:
            logger.info("vision tower %s is already loaded; not loading it again", self.vision_tower_name)
            return
        self.image_processor = CLIPImageProcessorPil.from_pretrained(self.vision_tower_name)
        # float32 like upstream (transformers 4.x loaded CLIP in fp32); callers cast afterwards if they want.
        self.vision_tower = CLIPVisionModel.from_pretrained(
            self.vision_tower_name, device_map=device_map, dtype=torch.float32
        )
        self.vision_tower.requires_grad_(False)
        self.is_loaded = True

    def feature_select(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Pick ``hidden_states[select_layer]`` and drop the CLS token unless ``cls_patch``.

        Args:
            hidden_states: Per-layer outputs, each ``[N, 1 + P, D]``.

        Returns:
            ``[N, P, D]`` (``patch``) or ``[N, 1 + P, D]`` (``cls_patch``).
        """
        features = hidden_states[self.select_layer]
        if self.select_feature == "patch":
            return features[:, 1:]
        return features

    def _encode(self, images: torch.Tensor) -> torch.Tensor:
        outputs = self.vision_tower(images.to(device=self.device, dtype=self.dtype), output_hidden_states=True)
        return self.feature_select(outputs.hidden_states).to(images.dtype)

    @torch.no_grad()
    def forward(self, images: torch.Tensor | list[torch.Tensor]) -> torch.Tensor | list[torch.Tensor]:
        """Encode images; features come back in the input dtype.

        Args:
            images: ``[N, 3, H, W]``, or a list of ``[3, H, W]`` images encoded one by one.

        Returns:
            ``[N, P, D]``, or a list of ``[1, P, D]`` for a list input (``P`` counts the CLS token for
            ``cls_patch``).
        """
        if not self.is_loaded:
            raise RuntimeError(
                f"vision tower {self.vision_tower_name!r} was built with delay_load; call load_model() before using it"
            )
        if isinstance(images, (list, tuple)):
            return [self._encode(image.unsqueeze(0)) for image in images]
        return self._encode(images)

    @property
    def dummy_feature(self) -> torch.Tensor:
        """``[1, hidden_size]`` zeros on the tower's device and dtype."""
        return torch.zeros(1, self.hidden_size, device=self.device, dtype=self.dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self._loaded_model().dtype

    @property
    def device(self) -> torch.device:
        return self._loaded_model().device

    @property
    def config(self) -> CLIPVisionConfig:
        """The CLIP vision config (available before :meth:`load_model` too)."""
        return self.vision_tower.config if self.is_loaded else self.cfg_only

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def num_patches_per_side(self) -> int:
        return int(self.config.image_size) // int(self.config.patch_size)

    @property
    def num_patches(self) -> int:
        """Patch tokens per image (without CLS): 576 for CLIP-L/14 at 336 px."""
        return self.num_patches_per_side**2

    def _loaded_model(self) -> CLIPVisionModel:
        if not self.is_loaded:
            raise RuntimeError(
                f"vision tower {self.vision_tower_name!r} was built with delay_load; call load_model() before using it"
            )
        return self.vision_tower
