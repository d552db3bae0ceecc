"""Pipelines to cost: built-in presets (published LLaVA-style settings) and local ``config.json`` files.

A :class:`PipelineSpec` holds transformers configs (vision tower and LLM) and the LLaVA wiring (feature
layer, projector depth, views per image). Nothing here downloads anything: presets carry the published
dimensions, and local configs are read from disk. Known hub names in ``mm_vision_tower`` map to the
built-in tower configs, so an upstream LLaVA ``config.json`` works as it is.

Tower configs are read through llava's vision-tower registry (the class registered for the config's
``model_type`` says which transformers config class it is), and visual-token counts come from
:func:`llava.visual_tokens.visual_token_count`, the rule the model itself is checked against. The generalization
presets and the recipes in ``scripts/next/`` describe the same settings (tests/llava/cost/test_presets.py holds them
to it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from llava.model.published import KNOWN_TOWERS, clip_vit_l14_336, siglip2_so400m_512, siglip_so400m_384

from .flops import LMDims, VisionDims

if TYPE_CHECKING:  # transformers is imported where a config is built, so that listing the presets stays light
    from transformers import LlamaConfig, Qwen2Config

__all__ = ["InputSpec", "KNOWN_TOWERS", "NEXT_PINPOINTS_336", "NEXT_PINPOINTS_384", "PipelineSpec", "PRESETS",
           "list_presets", "get_preset", "load_spec", "load_vision_config", "projector_depth"]


#: LLaVA-1.6's five AnyRes canvases for a 336 px tower, as (width, height).
NEXT_PINPOINTS_336: tuple[tuple[int, int], ...] = ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))
#: The same five canvases in 384 px tower sides (SigLIP so400m-384): 5 x 729 = 3645 tokens for a 2x2 canvas.
NEXT_PINPOINTS_384: tuple[tuple[int, int], ...] = tuple((w * 384 // 336, h * 384 // 336) for w, h in NEXT_PINPOINTS_336)
#: The image whose views an AnyRes input costs: any image that fills the 2x2 canvas (the nominal count of published figures).
ANYRES_EXAMPLE_IMAGE = (1024, 1024)


@dataclass(frozen=True)
class InputSpec:
    """One visual-input setting: ``views`` tower inputs of ``image_size`` px each.

    AnyRes inputs name their canvases (``grid_pinpoints``, ``(width, height)``); ``views`` must then be what
    ``example_image`` gets (the base view plus its canvas's crops: 5 for a 2x2 canvas).
    """

    label: str
    image_size: int
    views: int = 1
    grid_pinpoints: tuple[tuple[int, int], ...] | None = None
    example_image: tuple[int, int] = ANYRES_EXAMPLE_IMAGE

    def __post_init__(self) -> None:
        if self.grid_pinpoints is None:
            if self.views != 1:
                raise ValueError(f"input {self.label!r} has {self.views} views but no grid_pinpoints; a single-view input has 1")
            return
        from llava.visual_tokens import anyres_view_count

        views = anyres_view_count(self.example_image, self.grid_pinpoints, self.image_size)
        if views != self.views:
            raise ValueError(
                f"input {self.label!r}: a {self.example_image} image gets {views} views with its grid_pinpoints, "
                f"not {self.views}"
            )

    @property
    def image_aspect_ratio(self) -> str:
        """The training / inference ``image_aspect_ratio`` of this input (``pad`` for one view)."""
        return "anyres" if self.grid_pinpoints is not None else "pad"


@dataclass(frozen=True)
class PipelineSpec:
    """A LLaVA-style pipeline: vision tower → (compressor) → ``mlp{depth}x_gelu`` → LLM."""

    name: str
    vision: Any
    llm: Any
    inputs: tuple[InputSpec, ...]
    select_layer: int = -2
    projector_depth: int = 2
    description: str = ""

    @property
    def vision_dims(self) -> VisionDims:
        return VisionDims.from_config(self.vision)

    @property
    def lm_dims(self) -> LMDims:
        return LMDims.from_config(self.llm)

    @property
    def mm_hidden(self) -> int:
        return self.vision.hidden_size

    def grid(self, inp: InputSpec) -> tuple[int, int]:
        n = self.vision_dims.grid(inp.image_size)
        return n, n

    def feature_tokens(self, inp: InputSpec) -> int:
        """Vision tokens handed to the projector (CLS dropped), all views."""
        h, w = self.grid(inp)
        return h * w * inp.views

    def visual_tokens(self, inp: InputSpec, per_view: int | None = None) -> int:
        """Visual tokens the LLM gets for ``inp`` (``flat`` merge): the grid per view, or a budget ``per_view``.

        The count is :func:`llava.visual_tokens.visual_token_count` for ``inp.example_image``, the model's own rule.
        """
        from llava.visual_tokens import visual_token_count

        return visual_token_count(
            inp.example_image, inp.grid_pinpoints, inp.image_size, self.grid(inp), per_view, "flat",
            image_aspect_ratio=inp.image_aspect_ratio if inp.grid_pinpoints is not None else None,
        )

    def input(self, label: str | None) -> tuple[InputSpec, ...]:
        """All inputs, or the one whose label (token count) is ``label``."""
        if label is None:
            return self.inputs
        chosen = tuple(i for i in self.inputs if i.label == str(label))
        if not chosen:
            raise ValueError(f"preset {self.name!r} has no {label}-token input; expected one of {[i.label for i in self.inputs]}")
        return chosen


# -- built-in LLMs (published dimensions); the towers are llava.model.published's ---------------------
def vicuna_7b() -> LlamaConfig:
    """lmsys/vicuna-7b-v1.5 (Llama-2-7B dims): 32 layers, 4096, MLP 11008, 32 heads (no GQA), vocab 32000."""
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5)


def qwen25_3b() -> Qwen2Config:
    """Qwen/Qwen2.5-3B: 36 layers, 2048, MLP 11008, 16 query / 2 KV heads, vocab 151936, tied embeddings."""
    from transformers import Qwen2Config

    return Qwen2Config(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rms_norm_eps=1e-6,
                       tie_word_embeddings=True)


PRESETS: dict[str, Callable[[], PipelineSpec]] = {}


def register_preset(name: str):
    def wrap(factory: Callable[[], PipelineSpec]) -> Callable[[], PipelineSpec]:
        PRESETS[name] = factory
        return factory

    return wrap


@register_preset("llava-v1.5-7b")
def _llava_v15_7b() -> PipelineSpec:
    return PipelineSpec(
        name="llava-v1.5-7b", vision=clip_vit_l14_336(), llm=vicuna_7b(), inputs=(InputSpec("576", 336),),
        description="LLaVA-1.5-7B: CLIP-L/14-336 (layer -2, patch tokens) + mlp2x_gelu + Vicuna-7B (paper Table 1)",
    )


@register_preset("llava-next-7b-2880")
def _llava_next_7b() -> PipelineSpec:
    return PipelineSpec(
        name="llava-next-7b-2880", vision=clip_vit_l14_336(), llm=vicuna_7b(),
        inputs=(InputSpec("2880", 336, views=5, grid_pinpoints=NEXT_PINPOINTS_336),),
        description="LLaVA-NeXT-style AnyRes, 5 views x 576 = 2880 tokens (flat, no newline tokens); a compressor per view",
    )


@register_preset("qwen2.5-3b-siglip")
def _qwen25_3b_siglip() -> PipelineSpec:
    return PipelineSpec(
        name="qwen2.5-3b-siglip", vision=siglip_so400m_384(), llm=qwen25_3b(),
        inputs=(InputSpec("729", 384), InputSpec("3645", 384, views=5, grid_pinpoints=NEXT_PINPOINTS_384)),
        description="SigLIP so400m-patch14-384 (729 tokens, or AnyRes 5 views x 729) + mlp2x_gelu + Qwen2.5-3B",
    )


@register_preset("qwen2.5-3b-siglip2")
def _qwen25_3b_siglip2() -> PipelineSpec:
    return PipelineSpec(
        name="qwen2.5-3b-siglip2", vision=siglip2_so400m_512(), llm=qwen25_3b(), inputs=(InputSpec("1024", 512),),
        description="SigLIP2 so400m-patch16-512 (native 32 x 32 = 1024 tokens) + mlp2x_gelu + Qwen2.5-3B",
    )


def list_presets() -> list[str]:
    return sorted(PRESETS)


def get_preset(name: str) -> PipelineSpec:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; expected one of {list_presets()}")
    return PRESETS[name]()


# -- local config files ------------------------------------------------------------------------------
_LLAMA_TYPES = ("llama", "llava", "llava_llama", "vicuna")
_QWEN2_TYPES = ("qwen2", "llava_qwen", "llava_qwen2")
_LM_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
_LM_OPTIONAL = ("num_key_value_heads", "head_dim", "tie_word_embeddings", "rms_norm_eps", "max_position_embeddings",
                "hidden_act", "rope_theta", "rope_parameters")
_VISION_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "image_size", "patch_size")


def _read_json(path: str | Path, what: str) -> tuple[dict, Path]:
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(f"{what} {str(path)!r} does not exist")
    try:
        return json.loads(path.read_text()), path
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} {str(path)!r} is not valid JSON ({exc.msg} at line {exc.lineno})") from None


def _lm_config(values: dict, source: str) -> Any:
    from transformers import LlamaConfig, Qwen2Config

    model_type = values.get("model_type", "llama")
    if model_type in _LLAMA_TYPES:
        cls = LlamaConfig
    elif model_type in _QWEN2_TYPES:
        cls = Qwen2Config
    else:
        raise ValueError(f"{source}: unsupported LLM model_type {model_type!r}; expected one of {list(_LLAMA_TYPES + _QWEN2_TYPES)}")
    missing = [k for k in _LM_KEYS if k not in values]
    if missing:
        raise ValueError(f"{source}: LLM config lacks {missing}; these are needed to count its FLOPs")
    return cls(**{k: values[k] for k in _LM_KEYS + _LM_OPTIONAL if values.get(k) is not None})


def _vision_config_class(model_type: str, source: str) -> Any:
    """The transformers config class of the tower that llava's registry builds for ``model_type``."""
    from llava.model.multimodal_encoder.registry import resolve_vision_tower

    try:
        return resolve_vision_tower(model_type, source).config_class
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def _vision_from_dict(values: dict, source: str) -> Any:
    model_type = values.get("model_type", "")
    cls = _vision_config_class(model_type, source)
    if isinstance(values.get("vision_config"), dict):  # a whole CLIP / SigLIP model: its vision part
        values = values["vision_config"]
    missing = [k for k in _VISION_KEYS if k not in values]
    if missing:
        raise ValueError(f"{source}: vision config lacks {missing}; these are needed to count its FLOPs")
    # LLaVA-style towers read hidden states, so a SigLIP pooling head is never run.
    extra = {"vision_use_head": False} if "vision_use_head" in cls().to_dict() else {}
    keep = _VISION_KEYS + ("num_channels", "hidden_act", "layer_norm_eps")
    return cls(**{k: values[k] for k in keep if k in values}, **extra)


def load_vision_config(path: str | Path) -> Any:
    """A registered tower's vision config from a ``config.json`` (or its folder): full model or vision-only."""
    values, resolved = _read_json(path, "vision config")
    return _vision_from_dict(values, str(resolved))


def projector_depth(projector_type: str | None) -> int:
    """Linear layers of the MLP a projector type ends in: ``linear`` 1, a name ending in ``mlp{N}x_gelu`` N, else 2.

    Compressor types whose name does not say it (``*_k16``) feed upstream's ``mlp2x_gelu``; their plugin's cost
    counts their own projector anyway, so the depth only sets the uncompressed reference row.

    Raises:
        ValueError: For a projector type that is not registered (one sentence listing the registered ones).
    """
    if projector_type in (None, ""):
        return 2
    if projector_type == "linear":
        return 1
    from llava.model.multimodal_projector.builtin import MLP_PATTERN
    from llava.model.multimodal_projector.registry import resolve_projector

    match = re.search(MLP_PATTERN + "$", projector_type)
    if match is not None:
        return int(match.group(1))

    resolve_projector(projector_type)
    return 2


def load_spec(path: str | Path, vision_config: str | Path | None = None) -> PipelineSpec:
    """A :class:`PipelineSpec` from a local ``config.json``.

    Accepted: an upstream LLaVA config (LLM fields + ``mm_vision_tower`` naming a local folder or a known hub
    tower), a transformers ``LlavaConfig`` (``text_config`` + ``vision_config``), or a plain Llama/Qwen2
    config with ``vision_config`` (a path) given. One view per image (the presets cover AnyRes inputs).
    """
    values, resolved = _read_json(path, "config file")
    source = str(resolved)
    text = values.get("text_config") or values
    llm = _lm_config(text, source)
    select_layer = values.get("mm_vision_select_layer", values.get("vision_feature_layer", -2))
    if isinstance(select_layer, bool) or not isinstance(select_layer, int):
        raise ValueError(f"{source}: the vision feature layer must be one integer, got {select_layer!r}")
    if vision_config is not None:
        vision = load_vision_config(vision_config)
    elif isinstance(values.get("vision_config"), dict):
        vision = _vision_from_dict(values["vision_config"], source)
    elif values.get("mm_vision_tower"):
        tower = values["mm_vision_tower"]
        local = Path(tower) if Path(tower).is_absolute() else resolved.parent / tower
        if local.is_dir() or Path(tower).is_dir():
            vision = load_vision_config(local if local.is_dir() else tower)
        elif tower in KNOWN_TOWERS:
            vision = KNOWN_TOWERS[tower]()
        else:
            raise ValueError(
                f"{source}: mm_vision_tower {tower!r} is neither a local folder nor a known tower "
                f"({sorted(KNOWN_TOWERS)}); pass --vision-config PATH"
            )
    else:
        raise ValueError(f"{source} names no vision tower (no mm_vision_tower or vision_config); pass --vision-config PATH")
    if values.get("mm_hidden_size") not in (None, vision.hidden_size):
        raise ValueError(f"{source}: mm_hidden_size {values['mm_hidden_size']} does not match the vision tower width {vision.hidden_size}")
    grid = vision.image_size // vision.patch_size
    return PipelineSpec(
        name=resolved.parent.name or source, vision=vision, llm=llm, inputs=(InputSpec(str(grid * grid), vision.image_size),),
        select_layer=select_layer, projector_depth=projector_depth(values.get("mm_projector_type")),
        description=f"local config {source}",
    )
