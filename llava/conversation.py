"""Chat templates: how a conversation is rendered into the prompt string a LLaVA model was trained on.

A :class:`Conversation` holds a system text, two role names and a list of ``[role, message]`` turns.
``get_prompt`` renders them in one of five separator styles (:class:`SeparatorStyle`); a ``None``
message is an open turn, i.e. the place where the model continues. The gradio demo stores the first
user turn as a tuple ``(text, PIL image, image_process_mode)``; it renders as ``"<image>\\n" + text``.

``conv_templates`` holds upstream LLaVA's templates under upstream's keys, with the same system texts,
roles, separators and version strings, so that prompts (and therefore token ids) match checkpoints
trained with upstream code. The templates are shared objects: always ``.copy()`` one before appending
messages.

Example::

    conv = conv_templates["vicuna_v1"].copy()
    conv.append_message(conv.roles[0], "<image>\\nWhat is this?")
    conv.append_message(conv.roles[1], None)
    prompt = conv.get_prompt()  # "<system> USER: <image>\\nWhat is this? ASSISTANT:"
"""

from __future__ import annotations

import base64
import dataclasses
from enum import Enum, auto
from io import BytesIO
from typing import TYPE_CHECKING, Any, Sequence, Union

from llava.constants import DEFAULT_IMAGE_TOKEN

if TYPE_CHECKING:
    from PIL import Image

# A user turn from the demo: (text, image, one of IMAGE_PROCESS_MODES).
ImageMessage = tuple[str, "Image.Image", str]
Message = Union[str, ImageMessage, None]

IMAGE_PROCESS_MODES: tuple[str, ...] = ("Pad", "Crop", "Resize", "Default")

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
        version: Template version string; the training code dispatches on it.
        skip_next: Set by the demo when the next generation request should be skipped.
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

        Returns:
            The prompt string.

        Raises:
            ValueError: For a ``LLAMA_2`` conversation whose first turn is open or not from the user.
        """
        turns = self._turns()
        style = self.sep_style
        if style is SeparatorStyle.SINGLE:
            return self._render_single(turns)
        if style is SeparatorStyle.TWO:
            return self._render_two(turns)
        if style is SeparatorStyle.MPT:
            return self._render_mpt(turns)
        if style is SeparatorStyle.LLAMA_2:
            return self._render_llama_2(turns)
        if style is SeparatorStyle.PLAIN:
            return self._render_plain(turns)
        raise ValueError(
            f"unknown separator style {style!r}; expected one of {[s.name for s in SeparatorStyle]}"
        )

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


# ---------------------------------------------------------------------- templates

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
)

conv_chatml_direct = Conversation(
    system="<|im_start|>system\nAnswer the questions.",
    roles=("<|im_start|>user\n", "<|im_start|>assistant\n"),
    messages=(),
    offset=0,
    sep_style=SeparatorStyle.MPT,
    sep="<|im_end|>",
    version="mpt",
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
    "mpt": conv_mpt,
}

__all__ = [
    "IMAGE_PROCESS_MODES",
    "Conversation",
    "SeparatorStyle",
    "conv_templates",
    "default_conversation",
]
