"""Generation rules shared by evaluation and serving (both import this module; neither imports the other).

:class:`LlavaGenerator` builds upstream's prompts (image markers, the template), batches them with left padding
and decodes greedy or sampled answers; :func:`load_generator` loads a checkpoint through
``load_pretrained_model`` on a device (float16 on CUDA, float32 elsewhere) and puts it on the ``--fast`` path
(:mod:`llava.model.fast_flag`). :mod:`llava.eval.core` runs the
question loop around it. :class:`GenerationConfig` (upstream's sampling options) and :func:`default_device` also
serve ``run_llava`` and the serving stack.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from PIL import Image

from llava.constants import IMAGE_TOKEN_INDEX
from llava.conversation import check_template_fits, conv_templates, stage1_template
from llava.devices import default_device, default_dtype, resolve_device
from llava.mm_utils import get_model_name_from_path, image_marker, tokenizer_image_token, visuals_to_pixels
from llava.model.compressor_text import question_kwargs
from llava.model.fast_flag import resolve_fast, use_fast
from llava.utils import UserError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Visuals:
    """A batch's pixels as :func:`llava.mm_utils.visuals_to_pixels` returns them, on the CPU."""

    pixels: torch.Tensor | list[torch.Tensor]
    sizes: list[Any]
    modalities: list[str] | None

    def on(self, device: Any) -> torch.Tensor | list[torch.Tensor]:
        """The pixels on ``device`` (a list stays a list: AnyRes views and videos differ in shape)."""
        if isinstance(self.pixels, list):
            return [tensor.to(device) for tensor in self.pixels]
        return self.pixels.to(device)


@dataclass(frozen=True)
class GenerationConfig:
    """Sampling options with upstream's meaning: ``temperature > 0`` samples, 0 is greedy."""

    temperature: float = 0.2
    top_p: float | None = None
    num_beams: int = 1
    max_new_tokens: int = 1024

    def __post_init__(self) -> None:
        """Check the values before any model loads (one sentence naming the flag and what is accepted)."""
        check_generation_values(self.temperature, self.top_p, self.num_beams, self.max_new_tokens)

    def generate_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"num_beams": self.num_beams, "max_new_tokens": self.max_new_tokens, "use_cache": True}
        if self.temperature > 0:
            kwargs.update(do_sample=True, temperature=self.temperature)
            if self.top_p is not None:
                kwargs["top_p"] = self.top_p
        else:
            kwargs["do_sample"] = False
        return kwargs


def check_generation_values(temperature: Any, top_p: Any, num_beams: Any, max_new_tokens: Any) -> None:
    """The one check of upstream's decoding flags, shared by the loaders, ``run_llava`` and the serving stack.

    Raises:
        UserError: ``--temperature`` not a finite number >= 0; ``--top_p`` not in (0, 1]; ``--num_beams`` not an
            integer >= 1; ``--max_new_tokens`` not an integer >= 1.
    """
    if not _is_number(temperature) or not math.isfinite(temperature) or temperature < 0:
        raise UserError(f"--temperature must be a finite number >= 0 (0 is greedy), got {temperature!r}")
    if top_p is not None and (not _is_number(top_p) or not 0 < top_p <= 1):
        raise UserError(f"--top_p must be a number in (0, 1], got {top_p!r}")
    if not _is_integer(num_beams) or num_beams < 1:
        raise UserError(f"--num_beams must be an integer >= 1, got {num_beams!r}")
    if not _is_integer(max_new_tokens) or max_new_tokens < 1:
        raise UserError(f"--max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class LlavaGenerator:
    """Prompt building and batched generation for a loaded LLaVA model (shared by the loaders and the demo).

    Args:
        tokenizer, model, image_processor: As returned by ``load_pretrained_model``.
        conv_mode: Key of ``conv_templates``; must fit the tokenizer (:func:`llava.conversation.check_template_fits`).
        device: Where inputs go.
        dtype: Dtype of the image tensors.
    """

    def __init__(self, tokenizer: Any, model: Any, image_processor: Any, *, conv_mode: str, device: str, dtype: torch.dtype) -> None:
        check_template_fits(conv_mode, tokenizer)
        self.tokenizer, self.model, self.image_processor = tokenizer, model, image_processor
        self.conv_mode, self.device, self.dtype = conv_mode, device, dtype
        pad = tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else (tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0)

    def build_prompt(self, question: str, num_images: int) -> str:
        """The full prompt: one image marker per image (wrapped in start/end tokens if the model uses
        them), a newline, the question, in the conversation template with an open assistant turn."""
        text = (image_marker(self.model.config) + "\n") * num_images + question
        conv = conv_templates[self.conv_mode].copy()
        conv.append_message(conv.roles[0], text)
        conv.append_message(conv.roles[1], None)
        return conv.get_prompt()

    def _batch_inputs(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokenise and left-pad: ``[batch, max_len]`` ids and attention mask."""
        sequences = [tokenizer_image_token(prompt, self.tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt") for prompt in prompts]
        width = max(len(sequence) for sequence in sequences)
        input_ids = torch.full((len(sequences), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, sequence in enumerate(sequences):
            input_ids[row, width - len(sequence) :] = sequence
            attention_mask[row, width - len(sequence) :] = 1
        return input_ids.to(self.device), attention_mask.to(self.device)

    @torch.inference_mode()
    def prepare_visuals(self, images: Sequence[Sequence[Any]]) -> Visuals | None:
        """The batch's images (or videos) preprocessed on the CPU in the model's dtype; ``None`` when there are none.

        Reads only the image processor and the model's config, so it may run in another thread while the model
        generates (the loaders' loop prepares the next batch so)."""
        flat = [image for per_question in images for image in per_question]
        if not flat:
            return None
        # A video (llava.video.SampledVideo) is one item with one marker, tagged for the model (issue 23).
        pixels, sizes, modalities = visuals_to_pixels(flat, self.image_processor, self.model.config, "cpu", self.dtype)
        return Visuals(pixels, sizes, modalities)

    @torch.inference_mode()
    def generate(self, questions: Sequence[str], images: Sequence[Sequence[Image.Image]], config: GenerationConfig,
                 visuals: Visuals | None = None) -> list[str]:
        """Answer a batch; every question must come with the same number of images.

        Args:
            questions: User-turn texts without image markers.
            images: Per question, its PIL images (or videos, :class:`llava.video.SampledVideo`, one marker each).
            config: Sampling options.
            visuals: :meth:`prepare_visuals` of ``images``, when it was done beforehand.

        Returns:
            The decoded, stripped answers, in order.
        """
        counts = {len(per_question) for per_question in images}
        if len(counts) > 1:
            raise ValueError(f"a batch must have the same number of images per question, got counts {sorted(counts)}")
        prompts = [self.build_prompt(question, len(per_question)) for question, per_question in zip(questions, images)]
        input_ids, attention_mask = self._batch_inputs(prompts)
        if visuals is None:
            visuals = self.prepare_visuals(images)
        image_kwargs: dict[str, Any] = {"images": None, "image_sizes": None}
        if visuals is not None:
            image_kwargs = {"images": visuals.on(self.device), "image_sizes": visuals.sizes}
            if visuals.modalities is not None:
                image_kwargs["modalities"] = visuals.modalities
            image_kwargs.update(question_kwargs(self.model, self.tokenizer, prompts, self.conv_mode))
        output_ids = self.model.generate(
            input_ids, attention_mask=attention_mask, pad_token_id=self.pad_token_id, **image_kwargs, **config.generate_kwargs()
        )
        return [text.strip() for text in self.tokenizer.batch_decode(output_ids, skip_special_tokens=True)]


def check_reducer_flag(args: Any) -> None:
    """Refuse an unknown ``--reducer`` in one sentence before any model loads (``none`` and no flag pass)."""
    from llava.model.reducers import NO_REDUCER, resolve_reducer

    name = getattr(args, "reducer", None)
    if name is not None and name != NO_REDUCER:
        resolve_reducer(name)


def load_generator(
    model_path: str, model_base: str | None, conv_mode: str, device: str | None = None, projector_settings: Mapping[str, str] | None = None,
    projector_type: str | None = None, *, fast: str | None = None, reducer: str | None = None,
) -> tuple[LlavaGenerator, str]:
    """Load a checkpoint with ``load_pretrained_model`` on ``device`` and wrap it.

    ``projector_type`` (``--projector-type``) replaces the checkpoint's ``mm_projector_type`` before the model is built
    (LLaVA-NeXT's ``overwrite_config``), e.g. a training-free compressor in front of an ``mlp2x_gelu`` checkpoint's
    MLP; the checkpoint's projector weights must load into it unchanged. ``projector_settings`` (``--projector-setting
    KEY=VALUE``) that are not runtime settings go into that override too; runtime settings change the projector's
    compressor after loading (e.g. a nested-query compressor's token count), checked by the plugin.
    ``fast`` is ``--fast`` (:mod:`llava.model.fast_flag`; ``None``: the device's default). ``reducer`` (``--reducer``) is
    the in-LLM reducer type to run (:mod:`llava.model.reducers`), or ``None``.

    Returns:
        ``(generator, model name)``.
    """
    from llava.model.builder import load_pretrained_model
    from llava.utils import disable_torch_init, enable_torch_init

    device = resolve_device(device)
    fast = resolve_fast(fast, device)
    dtype = default_dtype(device)
    model_path = os.path.expanduser(model_path)
    model_name = get_model_name_from_path(model_path)
    runtime, built = _split_settings(projector_settings or {})
    overwrite = None if projector_type is None else {"mm_projector_type": projector_type, **built}
    disable_torch_init()
    try:
        tokenizer, model, image_processor, _ = load_pretrained_model(model_path, model_base, model_name, device=device,
                                                                     overwrite_config=overwrite, reducer=reducer)
    finally:
        enable_torch_init()
    if runtime:
        from llava.model.multimodal_projector.plugins import apply_runtime_settings

        apply_runtime_settings(model, runtime)
    if model.dtype != dtype:
        model.to(dtype=dtype)
    model.eval()
    use_fast(model, fast)
    return LlavaGenerator(tokenizer, model, image_processor, conv_mode=_conv_mode_for(model_name, conv_mode), device=device, dtype=dtype), model_name


def _split_settings(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(runtime settings, settings applied when the projector is built)`` of ``--projector-setting`` values."""
    from llava.model.multimodal_projector.plugins import plugin_settings

    runtime = {setting.key for _, setting in plugin_settings() if setting.runtime}
    return ({k: v for k, v in settings.items() if k in runtime}, {k: v for k, v in settings.items() if k not in runtime})


def _conv_mode_for(model_name: str, conv_mode: str) -> str:
    tagged = stage1_template(model_name, conv_mode)
    if tagged != conv_mode:
        logger.warning("%s looks like a plain (stage-1) model; using conv mode %s", model_name, tagged)
    return tagged


__all__ = [
    "GenerationConfig", "LlavaGenerator", "check_generation_values", "check_reducer_flag", "default_device", "default_dtype", "load_generator",
    "resolve_device", "Visuals",
]
