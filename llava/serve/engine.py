"""A loaded model behind upstream's worker API: request checks, the generation stream and the compressor panel.

:class:`ModelEngine` is what the model worker serves over HTTP and what the one-process demo calls
directly, so both check requests and stream answers the same way. Requests are upstream's
``/worker_generate_stream`` bodies (``prompt``, ``images`` as base64 files, ``temperature``, ``top_p``,
``max_new_tokens``, ``stop``); :meth:`ModelEngine.generate_stream` never raises: a bad request or a failed
generation becomes one chunk with a non-zero ``error_code`` and a message for the user.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image

from llava.constants import DEFAULT_IMAGE_TOKEN, IMAGE_TOKEN_INDEX
from llava.conversation import template_for_model
from llava.mm_utils import get_model_name_from_path, image_marker, tokenizer_image_token
from llava.model.compressor_text import question_kwargs
from llava.model.context_length import check_prompt_lengths, check_video_prompt, text_token_count

from .generation import prepare_pixels, stream_answer
from .images import ImageLimits, decode_base64_image
from .panels import compute_video_view, compute_view, view_for, view_payload
from .protocol import WORKER_ERROR, StreamChunk, sentence
from .reducer_panel import VIDEO_NOTE, compute_reducer_view, merged_payload, reducer_of

logger = logging.getLogger(__name__)

#: Upstream's cap on ``max_new_tokens`` per request.
MAX_NEW_TOKENS_CAP = 1024
#: Longest prompt accepted, in characters (the web UI cuts each user turn to 1536).
MAX_PROMPT_CHARS = 200_000
#: What a client can change when a conversation no longer fits the model.
NEW_CONVERSATION = "clear the history and start a new conversation"


def _number(params: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = params.get(key, default)
    if value is None:
        value = default
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number between {low:g} and {high:g}, got {value!r}") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise ValueError(f"{key} must be a number between {low:g} and {high:g}, got {value!r}")
    return number


@dataclass(frozen=True)
class GenerateRequest:
    """A checked ``/worker_generate_stream`` body (defaults as upstream's worker)."""

    prompt: str
    images: tuple[str, ...] = ()
    #: Base64-encoded video files (one ``<image>`` marker each, never together with images; issue 23).
    videos: tuple[str, ...] = ()
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: str | None = None

    @classmethod
    def from_params(cls, params: Any) -> GenerateRequest:
        """Check a request body.

        Raises:
            ValueError: Naming the first bad field and what is accepted.
        """
        if not isinstance(params, Mapping):
            raise ValueError(f"the request body must be a JSON object, got {type(params).__name__}")
        prompt = params.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("the prompt is empty; send a question")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ValueError(f"the prompt has {len(prompt)} characters, more than the {MAX_PROMPT_CHARS} accepted")
        images = params.get("images") or []
        if not isinstance(images, (list, tuple)) or not all(isinstance(image, str) for image in images):
            raise ValueError("images must be a list of base64-encoded image files")
        videos = params.get("videos") or []
        if not isinstance(videos, (list, tuple)) or not all(isinstance(video, str) for video in videos):
            raise ValueError("videos must be a list of base64-encoded video files")
        if videos and (images or len(videos) > 1):
            raise ValueError("send either images or one video per request, not both")
        stop = params.get("stop") or None
        if stop is not None and not isinstance(stop, str):
            raise ValueError(f"stop must be a string, got {stop!r}")
        max_new_tokens = _number(params, "max_new_tokens", 256, 1, 1e9)
        if max_new_tokens != int(max_new_tokens):
            raise ValueError(f"max_new_tokens must be a whole number, got {params.get('max_new_tokens')!r}")
        return cls(
            prompt=prompt,
            images=tuple(images),
            videos=tuple(videos),
            temperature=_number(params, "temperature", 1.0, 0.0, 100.0),
            top_p=_number(params, "top_p", 1.0, 0.0, 1.0),
            max_new_tokens=min(int(max_new_tokens), MAX_NEW_TOKENS_CAP),
            stop=stop,
        )


class ModelEngine:
    """One loaded LLaVA model with upstream's worker semantics.

    Args:
        tokenizer, model, image_processor, context_len: As returned by ``load_pretrained_model``.
        model_name: Name reported to the controller and matched against requests.
        image_limits: Checks applied to every uploaded image.
        stream_interval: Send a chunk every this many decoded pieces (the last one is always sent).
    """

    def __init__(
        self,
        tokenizer: Any,
        model: Any,
        image_processor: Any,
        context_len: int,
        model_name: str,
        *,
        image_limits: ImageLimits = ImageLimits(),
        stream_interval: int = 1,
    ) -> None:
        if stream_interval < 1:
            raise ValueError(f"stream_interval must be at least 1, got {stream_interval}")
        self.tokenizer = tokenizer
        self.model = model
        self.image_processor = image_processor
        self.context_len = context_len
        self.model_name = model_name
        self.image_limits = image_limits
        self.stream_interval = stream_interval
        self.max_context = int(getattr(model.config, "max_position_embeddings", None) or context_len)
        self.visual_tokens = self._visual_tokens_per_image() if self.is_multimodal else 0
        self.has_compressor_view = self.is_multimodal and (view_for(model) is not None or reducer_of(model) is not None)

    @classmethod
    def load(
        cls,
        model_path: str,
        model_base: str | None = None,
        model_name: str | None = None,
        *,
        load_8bit: bool = False,
        load_4bit: bool = False,
        device: str = "cuda",
        fast: str = "none",
        use_flash_attn: bool = False,
        image_limits: ImageLimits = ImageLimits(),
        stream_interval: int = 1,
        reducer: str | None = None,
    ) -> ModelEngine:
        """Load a checkpoint with ``load_pretrained_model``; ``model_name`` defaults to the path's name; ``fast`` is the
        generation path (:mod:`llava.model.fast_flag`); ``reducer`` is the in-LLM reducer type (``--reducer``) or ``None``."""
        from llava.model.builder import load_pretrained_model
        from llava.model.fast_flag import use_fast

        name = model_name or get_model_name_from_path(model_path)
        tokenizer, model, image_processor, context_len = load_pretrained_model(
            model_path, model_base, name, load_8bit, load_4bit, device=device, use_flash_attn=use_flash_attn,
            reducer=reducer,
        )
        model.eval()
        use_fast(model, fast)
        return cls(
            tokenizer, model, image_processor, context_len, name,
            image_limits=image_limits, stream_interval=stream_interval,
        )

    @property
    def is_multimodal(self) -> bool:
        return self.image_processor is not None

    @torch.inference_mode()
    def _visual_tokens_per_image(self) -> int:
        """K for a typical image, measured once (the token budget subtracts it per image)."""
        pixels, sizes = prepare_pixels([Image.new("RGB", (64, 64))], self.image_processor, self.model)
        return int(self.model.image_features(pixels, sizes)[0].shape[0])

    # ------------------------------------------------------------------------------------------ generation

    def generate_stream(self, params: Any) -> Iterator[StreamChunk]:
        """Answer one request: chunks ``{"text": prompt + answer so far, "error_code": 0}``, or one error chunk."""
        try:
            yield from self._generate(GenerateRequest.from_params(params))
        except ValueError as error:  # bad input (ImageRejected included): the message is for the user
            logger.info("rejected a request: %s", error)
            yield StreamChunk(sentence(str(error)), WORKER_ERROR)
        except Exception as error:
            logger.exception("generation failed")
            message = f"The worker failed to answer ({type(error).__name__}: {error}); see the worker log."
            yield StreamChunk(message, WORKER_ERROR)

    def _generate(self, request: GenerateRequest) -> Iterator[StreamChunk]:
        if request.videos:
            yield from self._generate_video(request)
            return
        self.image_limits.check_count(len(request.images))
        markers = request.prompt.count(DEFAULT_IMAGE_TOKEN)
        if request.images and not self.is_multimodal:
            raise ValueError(f"model {self.model_name!r} takes no images, but {len(request.images)} were sent")
        if len(request.images) != markers:
            raise ValueError(
                f"the prompt has {markers} {DEFAULT_IMAGE_TOKEN} marker(s) but {len(request.images)} image(s) were "
                "sent; send one image per marker"
            )
        images = [decode_base64_image(image, self.image_limits) for image in request.images]
        prompt = request.prompt
        if images:
            prompt = prompt.replace(DEFAULT_IMAGE_TOKEN, image_marker(self.model.config))
        input_ids = tokenizer_image_token(prompt, self.tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0)
        check_prompt_lengths([text_token_count(input_ids) + len(images) * self.visual_tokens], self.model.config, NEW_CONVERSATION)
        budget = self.max_context - input_ids.shape[1] - len(images) * self.visual_tokens
        max_new_tokens = min(request.max_new_tokens, budget)
        if max_new_tokens < 1:
            raise ValueError(
                f"the conversation is too long for the model's context of {self.max_context} tokens; "
                "clear the history and start a new conversation"
            )
        pixels, sizes = prepare_pixels(images, self.image_processor, self.model) if images else (None, None)
        questions = question_kwargs(self.model, self.tokenizer, [prompt], template_for_model(self.model_name)) if images else {}
        answers = stream_answer(
            self.model, self.tokenizer, input_ids, images=pixels, image_sizes=sizes, temperature=request.temperature,
            top_p=request.top_p, max_new_tokens=max_new_tokens, stop=request.stop, **questions,
        )
        pending, sent, answer = 0, None, ""
        for answer in answers:
            pending += 1
            if pending >= self.stream_interval:
                sent, pending = answer, 0
                yield StreamChunk(request.prompt + answer)
        if answer != sent:
            yield StreamChunk(request.prompt + answer)

    def _generate_video(self, request: GenerateRequest) -> Iterator[StreamChunk]:
        """:meth:`_generate` for a request with one video (frames by LLaVA-NeXT's rule, :mod:`llava.serve.video_input`)."""
        from .video_input import decode_planned_video, probe_base64_video, video_pixels

        if not self.is_multimodal:
            raise ValueError(f"model {self.model_name!r} takes no videos, but one was sent")
        if request.prompt.count(DEFAULT_IMAGE_TOKEN) != 1:
            raise ValueError(f"a prompt with a video needs exactly one {DEFAULT_IMAGE_TOKEN} marker for it")
        plan = probe_base64_video(request.videos[0], self.image_limits)  # the header only: nothing decoded yet
        prompt = request.prompt.replace(DEFAULT_IMAGE_TOKEN, image_marker(self.model.config))
        input_ids = tokenizer_image_token(prompt, self.tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0)
        check_video_prompt(self.model, text_token_count(input_ids), plan.frame_count, fix=NEW_CONVERSATION)
        video = decode_planned_video(plan, self.image_limits)
        pixels, tokens = video_pixels(self.model, self.image_processor, video)
        max_new_tokens = min(request.max_new_tokens, self.max_context - input_ids.shape[1] - tokens)
        if max_new_tokens < 1:
            raise ValueError(
                f"the video and the conversation are too long for the model's context of {self.max_context} tokens; "
                "clear the history and start a new conversation"
            )
        answer = ""
        for answer in stream_answer(
            self.model, self.tokenizer, input_ids, images=[pixels], image_sizes=[video.size], temperature=request.temperature,
            top_p=request.top_p, max_new_tokens=max_new_tokens, stop=request.stop, modalities=["video"],
            **question_kwargs(self.model, self.tokenizer, [prompt], template_for_model(self.model_name)),
        ):
            yield StreamChunk(request.prompt + answer)

    # ------------------------------------------------------------------------------------------ compressor panel

    def compressor_view(self, params: Any) -> dict[str, Any]:
        """``/worker_get_compressor_view``: the panel for the first of ``params["images"]`` (see
        :mod:`llava.serve.panels`); with an in-LLM reducer also the positions it keeps, after one prefill with
        ``params["prompt"]`` when given (:mod:`llava.serve.reducer_panel`).

        Returns:
            ``{"available": False}`` for models whose projector has no view, else the panel's JSON.

        Raises:
            ValueError: If the body has no image or the image is refused.
        """
        if not self.has_compressor_view:
            return {"available": False}
        videos = params.get("videos") if isinstance(params, Mapping) else None
        if videos:
            from .video_input import decode_base64_video

            video = decode_base64_video(videos[0], self.image_limits)
            payload = view_payload(compute_video_view(self.model, self.image_processor, video))
            if reducer_of(self.model) is not None:
                payload["summary" if payload["available"] else "error"] = " ".join(filter(None, [payload.get("summary"), VIDEO_NOTE]))
            return payload
        images = params.get("images") if isinstance(params, Mapping) else None
        if not isinstance(images, (list, tuple)) or not images:
            raise ValueError("the request needs 'images': a list with at least one base64-encoded image file")
        image = decode_base64_image(images[0], self.image_limits)
        reducer = compute_reducer_view(self.model, self.tokenizer, self.image_processor, image, self.model_name, params.get("prompt"))
        return merged_payload(compute_view(self.model, self.image_processor, image), reducer)

    def status(self, queue_length: int = 0) -> dict[str, Any]:
        """Upstream's worker status: ``{"model_names", "speed", "queue_length"}``."""
        return {"model_names": [self.model_name], "speed": 1, "queue_length": int(queue_length)}


__all__ = ["GenerateRequest", "MAX_NEW_TOKENS_CAP", "ModelEngine"]
