"""Chat templates: how a conversation is rendered into the prompt string a LLaVA model was trained on.

A :class:`Conversation` holds a system text, two role names and a list of ``[role, message]`` turns.
``get_prompt`` renders them in one of six separator styles (:class:`SeparatorStyle`); a ``None``
message is an open turn, i.e. the place where the model continues. The gradio demo stores the first
user turn as a tuple ``(text, PIL image, image_process_mode)``; it renders as ``"<image>\\n" + text``.

``conv_templates`` holds upstream LLaVA's templates under upstream's keys, plus LLaVA-NeXT's (ChatML for Qwen:
``qwen_1_5``, ``qwen_2``, ``qwen_2_5``; ``llava_llama_3``, ``gemma_instruct``, ``mistral_orca``,
``mistral_zephyr``, ``llava_llama_2_simple``, ``llava_llama_2_mmtag``), with the same system texts, roles,
separators and version strings, so that prompts (and therefore token ids) match checkpoints trained with upstream
code. The templates are shared objects:
``.copy()`` (upstream's idiom) or ``copy.deepcopy`` (LLaVA-NeXT's) one before appending messages; appending to
the shared template itself is refused.

:func:`template_for_model` is the one place that picks a template from a model name (eval, serve and
``run_llava`` all call it), and :func:`check_template_fits` refuses a template whose special tokens the
tokenizer lacks (a ChatML template on a LLaMA tokenizer, a ``</s>`` template on a Qwen tokenizer).

Example::

    conv = conv_templates["vicuna_v1"].copy()
    conv.append_message(conv.roles[0], "<image>\\nWhat is this?")
    conv.append_message(conv.roles[1], None)
    prompt = conv.get_prompt()  # "<system> USER: <image>\\nWhat is this? ASSISTANT:"

Why this file is over 500 lines: upstream's module path holds the class and the template table together, and
checkpoints depend on every character of those templates; the table (about 240 lines) is data. The rules that choose
and check a template follow it here because eval, serving and training import them from this path.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
from enum import Enum, auto
from io import BytesIO
from typing import TYPE_CHECKING, Any, Union

from llava.constants import DEFAULT_IM_END_TOKEN, DEFAULT_IM_START_TOKEN, DEFAULT_IMAGE_TOKEN

if TYPE_CHECKING:
    from PIL import Image

# A user turn from the demo: (text, image, one of IMAGE_PROCESS_MODES).
ImageMessage = tuple[str, "Image.Image", str]
Message = Union[str, ImageMessage, None]

IMAGE_PROCESS_MODES: tuple[str, ...] = ("Pad", "Crop", "Resize", "Default")

logger = logging.getLogger(__name__)

# Fill colour of the demo's "Pad" mode: the CLIP image mean scaled to 0-255.
_PAD_COLOR = (122, 116, 104)
# Side length of the demo's "Resize" mode (the CLIP-L/336 input size).
_RESIZE_SIDE = 336


class SeparatorStyle(Enum):
    """How turns are joined into a prompt; see :meth:`Conversation.get_prompt`."""

    SINGLE = auto()
    TWO = auto()
    MPT = auto()
    PLAIN = auto()
    LLAMA_2 = auto()
    CHATML = auto()
    LLAMA_3 = auto()
    GEMMA = auto()


def _message_text(message: Message) -> str | None:
    """Return the text of a message, dropping the image of a demo ``(text, image, mode)`` tuple."""
    if isinstance(message, tuple):
        return message[0]
    return message


@dataclasses.dataclass
class Conversation:
    """A conversation history plus the template that renders it.

    Attributes:
        system: System text placed before the first turn.
        roles: ``(user role, assistant role)`` names as they appear in the prompt.
        messages: ``[role, message]`` pairs; a message is text, a demo image tuple, or ``None`` for
            an open turn. Templates store a tuple here so that they cannot be appended to by mistake.
        offset: Number of leading messages (few-shot examples) hidden from the chat UI.
        sep_style: Rendering style.
        sep: Main separator.
        sep2: Second separator (after assistant turns in ``TWO``/``LLAMA_2``/``PLAIN``).
        version: Template version string (upstream's; ``mmtag`` in it changes how images are marked).
        skip_next: Set by the demo when the next generation request should be skipped.
        required_tokens: Strings of the template that the tokenizer must encode as one token each (the
            separators that end turns, ChatML's role markers); see :func:`check_template_fits`.
        video: The demo's uploaded video, base64-encoded, when the conversation is about one.
    """

    system: str
    roles: tuple[str, str]
    messages: list[list[Any]] | tuple[Any, ...]
    offset: int
    sep_style: SeparatorStyle = SeparatorStyle.SINGLE
    sep: str = "###"
    sep2: str | None = None
    version: str = "Unknown"
    skip_next: bool = False
    required_tokens: tuple[str, ...] = ()
    #: The demo's uploaded video (a base64-encoded file) when the first turn is about a video; its first frame is
    #: the turn's picture in the chat.
    video: str | None = None

    # ------------------------------------------------------------------ prompt rendering

    def _turns(self) -> list[tuple[str, str | None]]:
        """Return ``(role, text)`` turns, with a leading demo image turned into its image token."""
        turns = [(role, _message_text(message)) for role, message in self.messages]
        if turns and isinstance(self.messages[0][1], tuple):
            role, text = turns[0]
            text = (text or "").replace(DEFAULT_IMAGE_TOKEN, "").strip()
            if "mmtag" in self.version:
                turns[0] = (role, text)
                # mmtag models were trained with the image as its own acknowledged exchange.
                turns[:0] = [
                    (self.roles[0], "<Image>" + DEFAULT_IMAGE_TOKEN + "</Image>"),
                    (self.roles[1], "Received."),
                ]
            else:
                turns[0] = (role, DEFAULT_IMAGE_TOKEN + "\n" + text)
        return turns

    def get_prompt(self) -> str:
        """Render the conversation into the model's prompt string.

        Styles (``msg`` falsy means an open turn):

        * ``SINGLE``: ``system + sep``, then ``"role: msg" + sep``; open turn ``"role:"``.
        * ``TWO``: ``system + sep``, then ``"role: msg"`` followed by ``sep`` after user turns and
          ``sep2`` after assistant turns; open turn ``"role:"``.
        * ``MPT``: ``system + sep``, then ``role + msg + sep``; open turn ``role``.
        * ``LLAMA_2``: user turns as ``"[INST] msg [/INST]"`` (the first one prefixed by a
          ``<<SYS>>`` block when the system text is non-empty) preceded by ``sep`` except at the
          very start, assistant turns as ``" msg " + sep2``; open turns add nothing.
        * ``PLAIN``: ``system``, then each message followed by ``sep`` (user) or ``sep2`` (assistant).
        * ``CHATML`` (LLaVA-NeXT's Qwen style): ``system + sep + "\\n"`` (nothing for an empty system),
          then ``role + "\\n" + msg + sep + "\\n"``; open turn ``role + "\\n"``.
        * ``LLAMA_3`` (LLaVA-NeXT's ``llava_llama_3``, which renders through Llama-3-Instruct's chat template):
          ``"<|begin_of_text|>"``, then the system and every non-empty turn as ``"<|start_header_id|>" + role +
          "<|end_header_id|>\\n\\n" + msg.strip() + sep`` (``sep`` = ``<|eot_id|>``), then always an open
          assistant header.
        * ``GEMMA`` (LLaVA-NeXT's ``gemma_instruct``): no system text; ``role + msg + sep``, open turn ``role``;
          turns must alternate user, model.

        Returns:
            The prompt string.

        Raises:
            ValueError: For a ``LLAMA_2`` conversation whose first turn is open or not from the user, or a
                ``GEMMA`` one whose turns do not alternate.
        """
        return _PROMPT_RENDERERS[self.sep_style](self, self._turns())

    def _second_sep(self) -> str:
        # Upstream leaves sep2 unset for PLAIN; it is used as "\n" there, so fall back to sep.
        return self.sep if self.sep2 is None else self.sep2

    def _render_single(self, turns: Sequence[tuple[str, str | None]]) -> str:
        parts = [self.system, self.sep]
        for role, text in turns:
            parts.append(f"{role}: {text}{self.sep}" if text else f"{role}:")
        return "".join(parts)

    def _render_two(self, turns: Sequence[tuple[str, str | None]]) -> str:
        seps = (self.sep, self._second_sep())
        parts = [self.system, self.sep]
        for index, (role, text) in enumerate(turns):
            parts.append(f"{role}: {text}{seps[index % 2]}" if text else f"{role}:")
        return "".join(parts)

    def _render_mpt(self, turns: Sequence[tuple[str, str | None]]) -> str:
        parts = [self.system, self.sep]
        for role, text in turns:
            parts.append(f"{role}{text}{self.sep}" if text else role)
        return "".join(parts)

    def _render_llama_2(self, turns: Sequence[tuple[str, str | None]]) -> str:
        if turns:
            first_role, first_text = turns[0]
            if not first_text:
                raise ValueError(
                    "a LLAMA_2 conversation must start with a non-empty user message, got an open turn"
                )
            if first_role != self.roles[0]:
                raise ValueError(
                    f"a LLAMA_2 conversation must start with the user role {self.roles[0]!r}, "
                    f"got {first_role!r}"
                )
        system_block = f"<<SYS>>\n{self.system}\n<</SYS>>\n\n" if self.system else ""
        parts: list[str] = []
        for index, (_, text) in enumerate(turns):
            if not text:
                continue
            if index == 0:
                text = system_block + text
            if index % 2 == 0:
                parts.append(f"{self.sep}[INST] {text} [/INST]")
            else:
                parts.append(f" {text} {self._second_sep()}")
        # The first instruction carries no leading separator (the tokenizer adds BOS itself).
        return "".join(parts).removeprefix(self.sep)

    def _render_plain(self, turns: Sequence[tuple[str, str | None]]) -> str:
        seps = (self.sep, self._second_sep())
        parts = [self.system]
        for index, (_, text) in enumerate(turns):
            if text:
                parts.append(text + seps[index % 2])
        return "".join(parts)

    def _render_chatml(self, turns: Sequence[tuple[str, str | None]]) -> str:
        parts = [f"{self.system}{self.sep}\n"] if self.system else []
        for role, text in turns:
            parts.append(f"{role}\n{text}{self.sep}\n" if text else f"{role}\n")
        return "".join(parts)

    def _render_llama_3(self, turns: Sequence[tuple[str, str | None]]) -> str:
        # Llama-3-Instruct's chat template with add_generation_prompt: bos, each message's content stripped.
        parts = [_LLAMA_3_BOS]
        for role, text in [("system", self.system), *((role, text) for role, text in turns if text)]:
            parts.append(f"{_LLAMA_3_HEADER[0]}{role}{_LLAMA_3_HEADER[1]}\n\n{(text or '').strip()}{self.sep}")
        parts.append(f"{_LLAMA_3_HEADER[0]}assistant{_LLAMA_3_HEADER[1]}\n\n")
        return "".join(parts)

    def _render_gemma(self, turns: Sequence[tuple[str, str | None]]) -> str:
        parts = []
        for index, (role, text) in enumerate(turns):
            if role != self.roles[index % 2]:
                raise ValueError(f"a GEMMA conversation alternates {self.roles[0]!r} and {self.roles[1]!r}; turn {index} is {role!r}")
            parts.append(f"{role}{text}{self.sep}" if text else role)
        return "".join(parts)

    # ------------------------------------------------------------------ editing

    def append_message(self, role: str, message: Message) -> None:
        """Append one turn; ``message=None`` opens a turn for the model to complete.

        Raises:
            RuntimeError: If this object is a shared template (its messages are a tuple).
        """
        if isinstance(self.messages, tuple):
            raise RuntimeError(
                "cannot append to a shared conversation template; call .copy() on it first"
            )
        self.messages.append([role, message])

    def copy(self) -> Conversation:
        """Return an independent copy whose message list can be edited freely."""
        return dataclasses.replace(self, messages=[[role, message] for role, message in self.messages])

    def __deepcopy__(self, memo: dict[int, Any]) -> Conversation:
        """``copy.deepcopy(template)`` gives an editable conversation, as LLaVA-NeXT's examples expect.

        NeXT's templates hold a plain list, so ``copy.deepcopy(conv_templates["qwen_1_5"])`` followed by
        ``append_message`` is how its README starts a chat; here the shared template's tuple becomes a fresh
        list (the messages themselves are deep-copied, so nothing is shared with the template).
        """
        messages = [[role, copy.deepcopy(message, memo)] for role, message in self.messages]
        return dataclasses.replace(self, messages=messages)

    # ------------------------------------------------------------------ images and UI

    def process_image(
        self,
        image: Image.Image,
        image_process_mode: str,
        *,
        return_pil: bool = False,
        image_format: str = "PNG",
        max_len: int = 1344,
        min_len: int = 672,
    ) -> Image.Image | str:
        """Prepare a demo image for sending to a model worker or for display.

        Args:
            image: The uploaded image.
            image_process_mode: ``"Pad"`` (pad to a square with the CLIP mean colour), ``"Crop"`` or
                ``"Default"`` (unchanged, the processor centre-crops later) or ``"Resize"`` (squash to
                336x336).
            return_pil: Return the PIL image instead of a base64 string.
            image_format: Encoding of the base64 string (``"PNG"`` or ``"JPEG"``).
            max_len: Images whose longer side exceeds this are downscaled ...
            min_len: ... so that the shorter side is at most this (and the longer at most ``max_len``).

        Returns:
            The processed image, or its base64-encoded bytes in ``image_format``.

        Raises:
            ValueError: For an unknown ``image_process_mode``.
        """
        if image_process_mode == "Pad":
            from llava.mm_utils import expand2square

            image = expand2square(image, _PAD_COLOR)
        elif image_process_mode in ("Crop", "Default"):
            pass
        elif image_process_mode == "Resize":
            image = image.resize((_RESIZE_SIDE, _RESIZE_SIDE))
        else:
            raise ValueError(
                f"unknown image_process_mode {image_process_mode!r}; expected one of {IMAGE_PROCESS_MODES}"
            )
        width, height = image.size
        if max(width, height) > max_len:
            aspect_ratio = max(width, height) / min(width, height)
            short_side = int(min(max_len / aspect_ratio, min_len, min(width, height)))
            long_side = int(short_side * aspect_ratio)
            new_size = (short_side, long_side) if height > width else (long_side, short_side)
            image = image.resize(new_size)
        if return_pil:
            return image
        if image_format.upper() in ("JPEG", "JPG") and image.mode not in ("RGB", "L"):
            image = image.convert("RGB")
        buffer = BytesIO()
        image.save(buffer, format=image_format)
        return base64.b64encode(buffer.getvalue()).decode()

    def get_images(self, return_pil: bool = False) -> list[Image.Image] | list[str]:
        """Return the images of the user turns after ``offset``, processed by their mode.

        Args:
            return_pil: Return PIL images instead of base64-encoded PNG strings.
        """
        images = []
        for index, (_, message) in enumerate(self.messages[self.offset:]):
            if index % 2 == 0 and isinstance(message, tuple):
                _, image, mode = message
                images.append(self.process_image(image, mode, return_pil=return_pil))
        return images

    def to_gradio_chatbot(self) -> list[list[str | None]]:
        """Return ``[user, assistant]`` pairs for a gradio ``Chatbot``, images inlined as HTML."""
        pairs: list[list[str | None]] = []
        for index, (_, message) in enumerate(self.messages[self.offset:]):
            if index % 2 == 1:
                pairs[-1][1] = message
                continue
            if isinstance(message, tuple):
                text, image, _ = message
                encoded = self.process_image(image, "Default", image_format="JPEG")
                html = f'<img src="data:image/jpeg;base64,{encoded}" alt="user upload image" />'
                message = html + text.replace(DEFAULT_IMAGE_TOKEN, "").strip()
            pairs.append([message, None])
        return pairs

    def dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable summary (images are dropped, their text kept)."""
        return {
            "system": self.system,
            "roles": self.roles,
            "messages": [[role, _message_text(message)] for role, message in self.messages],
            "offset": self.offset,
            "sep": self.sep,
            "sep2": self.sep2,
        }


_PROMPT_RENDERERS: dict[SeparatorStyle, Callable[[Conversation, Sequence[tuple[str, str | None]]], str]] = {
    SeparatorStyle.SINGLE: Conversation._render_single,
    SeparatorStyle.TWO: Conversation._render_two,
    SeparatorStyle.MPT: Conversation._render_mpt,
    SeparatorStyle.LLAMA_2: Conversation._render_llama_2,
    SeparatorStyle.PLAIN: Conversation._render_plain,
    SeparatorStyle.CHATML: Conversation._render_chatml,
    SeparatorStyle.LLAMA_3: Conversation._render_llama_3,
    SeparatorStyle.GEMMA: Conversation._render_gemma,
}


# ---------------------------------------------------------------------- templates

# LLaMA's sentence markers (the TWO and LLAMA_2 separators) and ChatML's role markers: each must be one token.
_BOS, _EOS = "<s>", "</s>"
_CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
# Llama 3's: the text start, a role header's brackets and the end of a turn (<|eot_id|>, id 128009).
_LLAMA_3_BOS, _LLAMA_3_HEADER, _LLAMA_3_EOT = "<|begin_of_text|>", ("<|start_header_id|>", "<|end_header_id|>"), "<|eot_id|>"
_GEMMA_TURN = ("<start_of_turn>", "<end_of_turn>")

_HUMAN_SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the human's questions."
)
_USER_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
_MMTAG_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant is able to understand the visual content that the user provides, "
    "and assist the user with a variety of tasks using natural language."
    "The visual content will be provided with the following format: <Image>visual content</Image>."
)
_LLAMA_2_SYSTEM = (
    "You are a helpful, respectful and honest assistant. Always answer as helpfully as possible, "
    "while being safe.  Your answers should not include any harmful, unethical, racist, sexist, "
    "toxic, dangerous, or illegal content. Please ensure that your responses are socially unbiased "
    "and positive in nature.\n\n"
    "If a question does not make any sense, or is not factually coherent, explain why instead of "
    "answering something not correct. If you don't know the answer to a question, please don't "
    "share false information."
)
_LLAVA_LLAMA_2_SYSTEM = (
    "You are a helpful language and vision assistant. "
    "You are able to understand the visual content that the user provides, "
    "and assist the user with a variety of tasks using natural language."
)

# The v0 template carries one worked example exchange (hidden from the UI by offset=2).
_V0_EXAMPLE_QUESTION = (
    "What are the key differences between renewable and non-renewable energy sources?"
)
_V0_EXAMPLE_ANSWER = (
    "Renewable energy sources are those that can be replenished naturally in a relatively "
    "short amount of time, such as solar, wind, hydro, geothermal, and biomass. "
    "Non-renewable energy sources, on the other hand, are finite and will eventually be "
    "depleted, such as coal, oil, and natural gas. Here are some key differences between "
    "renewable and non-renewable energy sources:\n"
    "1. Availability: Renewable energy sources are virtually inexhaustible, while non-renewable "
    "energy sources are finite and will eventually run out.\n"
    "2. Environmental impact: Renewable energy sources have a much lower environmental impact "
    "than non-renewable sources, which can lead to air and water pollution, greenhouse gas "
    "emissions, and other negative effects.\n"
    "3. Cost: Renewable energy sources can be more expensive to initially set up, but they "
    "typically have lower operational costs than non-renewable sources.\n"
    "4. Reliability: Renewable energy sources are often more reliable and can be used in more "
    "remote locations than non-renewable sources.\n"
    "5. Flexibility: Renewable energy sources are often more flexible and can be adapted to "
    "different situations and needs, while non-renewable sources are more rigid and inflexible.\n"
    "6. Sustainability: Renewable energy sources are more sustainable over the long term, while "
    "non-renewable sources are not, and their depletion can lead to economic and social "
    "instability.\n"
)

conv_vicuna_v0 = Conversation(
    system=_HUMAN_SYSTEM,
    roles=("Human", "Assistant"),
    messages=(("Human", _V0_EXAMPLE_QUESTION), ("Assistant", _V0_EXAMPLE_ANSWER)),
    offset=2,
    sep_style=SeparatorStyle.SINGLE,
    sep="###",
)

conv_vicuna_v1 = Conversation(
    system=_USER_SYSTEM,
    roles=("USER", "ASSISTANT"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.TWO,
    sep=" ",
    sep2="</s>",
    version="v1",
    required_tokens=(_EOS,),
)

conv_llama_2 = Conversation(
    system=_LLAMA_2_SYSTEM,
    roles=("USER", "ASSISTANT"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.LLAMA_2,
    sep="<s>",
    sep2="</s>",
    version="llama_v2",
    required_tokens=(_BOS, _EOS),
)

conv_llava_llama_2 = Conversation(
    system=_LLAVA_LLAMA_2_SYSTEM,
    roles=("USER", "ASSISTANT"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.LLAMA_2,
    sep="<s>",
    sep2="</s>",
    version="llama_v2",
    required_tokens=(_BOS, _EOS),
)

conv_mistral_instruct = Conversation(
    system="",
    roles=("USER", "ASSISTANT"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.LLAMA_2,
    sep="",
    sep2="</s>",
    version="llama_v2",
    required_tokens=(_EOS,),
)

conv_mpt = Conversation(
    system=(
        "<|im_start|>system\n"
        "A conversation between a user and an LLM-based AI assistant. "
        "The assistant gives helpful and honest answers."
    ),
    roles=("<|im_start|>user\n", "<|im_start|>assistant\n"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.MPT,
    sep="<|im_end|>",
    version="mpt",
    required_tokens=_CHATML_TOKENS,
)

conv_chatml_direct = Conversation(
    system="<|im_start|>system\nAnswer the questions.",
    roles=("<|im_start|>user\n", "<|im_start|>assistant\n"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.MPT,
    sep="<|im_end|>",
    version="mpt",
    required_tokens=_CHATML_TOKENS,
)

# LLaVA-NeXT's Qwen template (keys qwen_1_5 and qwen_2); qwen_2_5 differs only in its system text.
conv_qwen = Conversation(
    system="<|im_start|>system\nYou are a helpful assistant.",
    roles=("<|im_start|>user", "<|im_start|>assistant"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.CHATML,
    sep="<|im_end|>",
    version="qwen",
    required_tokens=_CHATML_TOKENS,
)

conv_qwen_2_5 = dataclasses.replace(
    conv_qwen,
    system="<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
)

conv_llava_plain = Conversation(
    system="",
    roles=("", ""),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.PLAIN,
    sep="\n",
)

conv_llava_v0 = Conversation(
    system=_HUMAN_SYSTEM,
    roles=("Human", "Assistant"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.SINGLE,
    sep="###",
)

conv_llava_v0_mmtag = Conversation(
    system=_MMTAG_SYSTEM,
    roles=("Human", "Assistant"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.SINGLE,
    sep="###",
    version="v0_mmtag",
)

conv_llava_v1 = Conversation(
    system=_HUMAN_SYSTEM,
    roles=("USER", "ASSISTANT"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.TWO,
    sep=" ",
    sep2="</s>",
    version="v1",
    required_tokens=(_EOS,),
)

conv_llava_v1_mmtag = Conversation(
    system=_MMTAG_SYSTEM,
    roles=("USER", "ASSISTANT"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.TWO,
    sep=" ",
    sep2="</s>",
    version="v1_mmtag",
    required_tokens=(_EOS,),
)

# LLaVA-NeXT's further templates (LLaVA-VL/LLaVA-NeXT llava/conversation.py, its keys and strings).
_LLAVA_LLAMA_2_SIMPLE_SYSTEM = "Answer the questions about the visual content that the user provides."

conv_llava_llama_2_simple = dataclasses.replace(conv_llava_llama_2, system=_LLAVA_LLAMA_2_SIMPLE_SYSTEM)

conv_llava_llama_2_mmtag = dataclasses.replace(
    conv_llava_llama_2,
    # NeXT joins the two sentences without a space.
    system=_LLAVA_LLAMA_2_SIMPLE_SYSTEM + "The visual content will be provided with the following format: <Image>visual content</Image>.",
    version="llama_v2_mmtag",
)

conv_llava_llama_3 = Conversation(
    system=_LLAVA_LLAMA_2_SYSTEM,
    roles=("user", "assistant"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.LLAMA_3,
    sep=_LLAMA_3_EOT,
    version="llama_v3",
    required_tokens=(_LLAMA_3_BOS, *_LLAMA_3_HEADER, _LLAMA_3_EOT),
)

conv_mistral_orca = dataclasses.replace(
    conv_mpt,
    system=(
        "<|im_start|>system\nYou are MistralOrca, a large language model trained by Alignment Lab AI. "
        "Write out your reasoning step-by-step to be sure you get the right answers!"
    ),
)

conv_mistral_zephyr = Conversation(
    system="<|system|>\nYou are a helpful AI assistant.",
    roles=("<|user|>\n", "<|assistant|>\n"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.MPT,
    sep=_EOS,
    version="mpt",
    required_tokens=(_EOS,),
)

conv_gemma_instruct = Conversation(
    system="",
    roles=(_GEMMA_TURN[0] + "user\n", _GEMMA_TURN[0] + "model\n"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.GEMMA,
    sep=_GEMMA_TURN[1] + "\n",
    version="gemma",
    required_tokens=_GEMMA_TURN,
)

default_conversation = conv_vicuna_v1

conv_templates: dict[str, Conversation] = {
    "default": conv_vicuna_v0,
    "v0": conv_vicuna_v0,
    "v1": conv_vicuna_v1,
    "vicuna_v1": conv_vicuna_v1,
    "llama_2": conv_llama_2,
    "mistral_instruct": conv_mistral_instruct,
    "chatml_direct": conv_chatml_direct,
    "mistral_direct": conv_chatml_direct,
    "plain": conv_llava_plain,
    "v0_plain": conv_llava_plain,
    "llava_v0": conv_llava_v0,
    "v0_mmtag": conv_llava_v0_mmtag,
    "llava_v1": conv_llava_v1,
    "v1_mmtag": conv_llava_v1_mmtag,
    "llava_llama_2": conv_llava_llama_2,
    "llava_mistral_instruct": conv_mistral_instruct,
    "mpt": conv_mpt,
    "qwen_1_5": conv_qwen,
    "qwen_2": conv_qwen,
    "qwen_2_5": conv_qwen_2_5,
    # LLaVA-NeXT's templates that upstream lacks. (NeXT also names v0_mmtag / v1_mmtag llava_v0_mmtag /
    # llava_v1_mmtag; those keys are left out: upstream's stage-1 rule would then pick them for "llava_v1".)
    "llava_llama_2_simple": conv_llava_llama_2_simple,
    "llava_llama_2_mmtag": conv_llava_llama_2_mmtag,
    "llava_llama_3": conv_llava_llama_3,
    "mistral_orca": conv_mistral_orca,
    "mistral_zephyr": conv_mistral_zephyr,
    "gemma_instruct": conv_gemma_instruct,
}

# ---------------------------------------------------------------------- model name -> template

# Upstream's rules (run_llava, cli, the web server), first match wins, on the lower-cased model name; a Qwen
# name gets LLaVA-NeXT's ChatML template first (the key LLaVA-OneVision's eval docs use).
_QWEN_RULE = ("qwen", "qwen_1_5")
_LLAVA_NAME_RULES: tuple[tuple[str, str], ...] = (
    _QWEN_RULE,
    ("llama-2", "llava_llama_2"),
    ("hermes", "chatml_direct"),  # Nous-Hermes bases (LLaVA-1.6-34B) speak ChatML
    ("mistral", "mistral_instruct"),
    ("mixtral", "mistral_instruct"),
    ("v1.6-34b", "chatml_direct"),
    ("v1", "llava_v1"),
    ("mpt", "mpt"),
)
_LANGUAGE_MODEL_NAME_RULES: tuple[tuple[str, str], ...] = (_QWEN_RULE, ("mpt", "mpt"), ("llama-2", "llama_2"))
# Stage-1 ("plain", not "finetune") and "mmtag" checkpoints mark images with <Image></Image>.
_MMTAG_VARIANTS = {"llava_v1": "v1_mmtag", "llava_v0": "v0_mmtag"}


def _first_match(name: str, rules: Sequence[tuple[str, str]], default: str) -> str:
    return next((template for part, template in rules if part in name), default)


def is_stage1_name(model_name: str) -> bool:
    """Upstream's stage-1 test of a model name: ``plain`` in it and ``finetune`` not (any case)."""
    name = model_name.lower()
    return "plain" in name and "finetune" not in name


def template_for_model(model_name: str) -> str:
    """The conversation template a model was trained with, from its name (upstream's rules).

    ``qwen`` anywhere: ``qwen_1_5``. A LLaVA name (``llava`` in it): ``llama-2`` -> ``llava_llama_2``,
    ``hermes`` -> ``chatml_direct``, ``mistral``/``mixtral`` -> ``mistral_instruct``, ``v1.6-34b`` ->
    ``chatml_direct``, ``v1`` -> ``llava_v1``, ``mpt`` -> ``mpt``, else ``llava_v0``; stage-1 (``plain``
    without ``finetune``) and ``mmtag`` names get the ``_mmtag`` variant. Other names (plain language
    models): ``mpt`` -> ``mpt``, ``llama-2`` -> ``llama_2``, else ``vicuna_v1``.

    Args:
        model_name: As :func:`llava.mm_utils.get_model_name_from_path` returns it.

    Returns:
        A key of ``conv_templates``.
    """
    name = model_name.lower()
    if "llava" not in name:
        return _first_match(name, _LANGUAGE_MODEL_NAME_RULES, "vicuna_v1")
    template = _first_match(name, _LLAVA_NAME_RULES, "llava_v0")
    return _MMTAG_VARIANTS.get(template, template) if "mmtag" in name or is_stage1_name(name) else template


def stage1_template(model_name: str, conv_mode: str) -> str:
    """Upstream ``model_vqa*``'s rule: for a stage-1 (``plain``, not ``finetune``) checkpoint, the template
    ``conv_mode + "_mmtag"`` when it exists (upstream crashes when it does not); otherwise ``conv_mode``."""
    tagged = conv_mode + "_mmtag"
    if is_stage1_name(model_name) and "mmtag" not in conv_mode and tagged in conv_templates:
        return tagged
    return conv_mode


# ---------------------------------------------------------------------- template vs tokenizer


def _is_one_token(text: str, tokenizer: Any) -> bool:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return len(ids) == 1 and ids[0] != tokenizer.unk_token_id


def missing_tokens(conv: Conversation, tokenizer: Any) -> list[str]:
    """The template's :attr:`~Conversation.required_tokens` that ``tokenizer`` does not encode as one token."""
    return [token for token in conv.required_tokens if not _is_one_token(token, tokenizer)]


def templates_for_tokenizer(tokenizer: Any) -> list[str]:
    """Sorted keys of the templates whose required tokens ``tokenizer`` has."""
    return sorted(key for key, conv in conv_templates.items() if not missing_tokens(conv, tokenizer))


def check_template_name(conv_mode: str) -> None:
    """Refuse a ``conv_mode`` that is not a key of ``conv_templates`` (callers check it before loading a model).

    Raises:
        ValueError: Naming ``conv_mode`` and the known templates.
    """
    if conv_mode not in conv_templates:
        raise ValueError(f"unknown conversation template {conv_mode!r}; expected one of {', '.join(sorted(conv_templates))}")


def check_template_fits(conv_mode: str, tokenizer: Any) -> None:
    """Refuse a template that relies on tokens the tokenizer lacks.

    A ChatML template on a tokenizer without ``<|im_start|>``/``<|im_end|>`` would spell the role markers
    out in pieces, and a ``</s>``-terminated template on a tokenizer without ``</s>`` never emits its stop
    token; either way the model is trained or prompted in a format it cannot follow.

    Raises:
        ValueError: For an unknown ``conv_mode``, or one whose required tokens are not single tokens of
            ``tokenizer``; the message lists the templates that fit it.
    """
    check_template_name(conv_mode)
    lacking = missing_tokens(conv_templates[conv_mode], tokenizer)
    if lacking:
        raise ValueError(
            f"conversation template {conv_mode!r} needs {' and '.join(map(repr, lacking))} as "
            f"{'a single token' if len(lacking) == 1 else 'single tokens'}, which "
            f"the tokenizer ({type(tokenizer).__name__}) lacks; templates that fit it: "
            f"{', '.join(templates_for_tokenizer(tokenizer))}"
        )


def resolve_conv_mode(model_name: str, requested: str | None, tokenizer: Any = None) -> str:
    """``requested`` if given (with a warning when it differs from :func:`template_for_model`'s choice), else
    that choice; checked against ``tokenizer`` when one is given.

    Raises:
        ValueError: If the template is unknown or does not fit ``tokenizer`` (see :func:`check_template_fits`).
    """
    inferred = template_for_model(model_name)
    if requested is not None and requested != inferred:
        logger.warning("the conversation template inferred from %r is %s; using %s as requested", model_name, inferred, requested)
    mode = requested or inferred
    if tokenizer is not None:
        check_template_fits(mode, tokenizer)
    elif mode not in conv_templates:
        raise ValueError(f"unknown conversation template {mode!r}; expected one of {', '.join(sorted(conv_templates))}")
    return mode


# ---------------------------------------------------------------------- the question of a prompt

# Stands for the first user message when a template renders its structure (no prompt contains NUL characters).
_QUESTION_PROBE = "\x00question\x00"
# An image marker as prompts spell it (plain, mm_use_im_start_end, mmtag), with the newline LLaVA puts after it.
_IMAGE_MARKER = re.compile(
    r"(?:<Image>)?(?:" + re.escape(DEFAULT_IM_START_TOKEN) + r")?" + re.escape(DEFAULT_IMAGE_TOKEN)
    + r"(?:" + re.escape(DEFAULT_IM_END_TOKEN) + r")?(?:</Image>)?"
)


def _template(conv: Conversation | str) -> Conversation:
    if isinstance(conv, Conversation):
        return conv
    if conv not in conv_templates:
        raise ValueError(f"unknown conversation template {conv!r}; expected one of {', '.join(sorted(conv_templates))}")
    return conv_templates[conv]


def _first_turn_bounds(template: Conversation, system: str, messages: Sequence[Any]) -> tuple[str, str]:
    """``(text before, text after)`` the first user message when ``template`` renders it with ``system`` and the
    few-shot ``messages`` before it, and an open assistant turn after it."""
    probe = dataclasses.replace(template, system=system, messages=[*map(list, messages)])
    probe.messages += [[template.roles[0], _QUESTION_PROBE], [template.roles[1], None]]
    head, tail = probe.get_prompt().split(_QUESTION_PROBE)
    return head, tail


def question_of(prompt: str, conv: Conversation | str) -> str:
    """The question of a prompt rendered with ``conv``'s template: the text of its first user turn, its image
    markers removed (with the newline after each), stripped.

    The template's structure says where that turn starts and ends: it renders a conversation whose first user
    message is a placeholder (after the template's own few-shot turns) and an open assistant turn; the text
    before the placeholder must begin the prompt (or, for a prompt written without the system text, its
    system-less version must occur in it, e.g. ``"USER: "``), and the text after it (``" ASSISTANT:"`` for ``vicuna_v1``,
    ``" [/INST]"`` for ``llama_2``/``mistral_instruct``, ``"<|im_end|>\n<|im_start|>assistant\n"`` for
    ChatML/Qwen) ends the turn at its first occurrence, so later turns and answers are never part of it. ``plain``
    has no roles: its user turn is the image, then (at inference) a newline and the text up to the prompt's last
    separator; stage 1's training text ``"<image>" + caption + "\n"`` has no user text (the caption is the answer).

    For LLaVA's layout (``"<image>\n"`` + the user's text) this is the text after the image up to ``ASSISTANT``,
    stripped, as question-conditioned compressors' releases read it.

    Args:
        prompt: A prompt (or training text) rendered with the template.
        conv: The template, or its key in ``conv_templates``.

    Raises:
        ValueError: If the prompt does not start the way the template renders a conversation, or its first user
            turn never ends.
    """
    template = _template(conv)
    head, tail = _first_turn_bounds(template, template.system, template.messages)
    start = len(head) if prompt.startswith(head) else None
    if start is None:  # a prompt written without the system text (and few-shot turns): its first role opener
        opener = _first_turn_bounds(template, "", ())[0].lstrip()
        found = prompt.find(opener) if opener else 0
        start = None if found < 0 else found + len(opener)
    if start is None:
        name = template.version if template.version != "Unknown" else template.sep_style.name.lower()
        raise ValueError(
            f"the prompt does not start the way the {name!r} template renders a conversation ({head[-40:]!r} before "
            f"the first user message); render it with that template, or give the question's token ids yourself"
        )
    turn = prompt[start:]
    plain = template.sep_style is SeparatorStyle.PLAIN
    if plain:
        leading = re.match(r"(?:" + _IMAGE_MARKER.pattern + r")+", turn)
        if leading is not None and not turn[leading.end():].startswith("\n"):
            return ""  # "<image>" + caption: the user turn is the image alone
    turn = re.sub(_IMAGE_MARKER.pattern + r"\n?", "", turn)
    # plain has no assistant role: its one user turn runs to the prompt's last separator
    end = (turn.rfind(tail) if plain else turn.find(tail)) if tail else len(turn)
    if end < 0:
        raise ValueError(f"the prompt's first user turn never ends: {tail.strip()!r} of the {name!r} template does not follow it")
    return turn[:end].strip()


__all__ = [
    "IMAGE_PROCESS_MODES",
    "Conversation",
    "SeparatorStyle",
    "check_template_fits",
    "conv_templates",
    "default_conversation",
    "missing_tokens",
    "question_of",
    "resolve_conv_mode",
    "is_stage1_name",
    "stage1_template",
    "template_for_model",
    "templates_for_tokenizer",
]
