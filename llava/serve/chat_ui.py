"""The gradio chat page shared by ``gradio_web_server`` (controller + workers) and ``demo`` (one process).

Upstream's layout and controls: model selector, image upload (with the hidden pre-processing mode), a
chatbot, a text box with *Send*, *Regenerate* and *Clear*, and a *Parameters* accordion (temperature 0.2,
top-p 0.7, max output tokens 512). Under the chat, for a model whose compressor has a view, a panel shows
what the compressor keeps of the image (the compressor draws it; see :mod:`llava.serve.panels`).

Events that gradio clients can call: ``/add_text`` (question, image, mode) then ``/http_bot`` (model,
temperature, top_p, max_output_tokens), as the *Send* button does; ``/regenerate``; ``/clear_history``.
Bad input (an empty question, a file that is not an image, an image with too many pixels) is refused with
one sentence in an error pop-up; the page and the server carry on. Uploads that are not images are refused and
deleted as they arrive (:mod:`llava.serve.uploads`); accepted ones are deleted from gradio's cache an hour
after upload and when the server stops (``delete_cache``). The page's server has the limits of the other
servers (:class:`llava.serve.webapi.ServerLimits`): a body deadline, a connection limit, a keep-alive timeout.
"""

from __future__ import annotations

import base64
import logging
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gradio as gr
from PIL import Image, UnidentifiedImageError

from llava.constants import DEFAULT_IMAGE_TOKEN
from llava.conversation import Conversation, conv_templates, default_conversation, template_for_model
from llava.openai_client import conversation_messages

from .backends import ChatBackend
from .demo_examples import demo_examples
from .flags import image_limits, server_limits
from .images import ImageLimits, ImageRejected, decode_base64_image, open_image_file
from .protocol import sentence
from .templates import stop_string
from .uploads import ImageUploadsOnly
from .webapi import BodyDeadline, ServerLimits

logger = logging.getLogger(__name__)

CURSOR = "▌"
#: Upstream's hard cut-offs on one user turn, without and with an image.
MAX_TEXT_CHARS = 1536
MAX_TEXT_CHARS_WITH_IMAGE = 1200
#: Upstream's cap on the tokens the page asks for.
MAX_REQUEST_TOKENS = 1536

TITLE = """# LLaVA with visual-token compression
Upload an image, ask about it. For a model with a visual-token compressor, the panel under the chat shows what
the compressor keeps of the image."""

NOTICE = """This is a research demo: answers can be wrong, and nothing here is moderated. Do not upload
private images to a server you do not control."""

EMPTY_QUESTION = "The question is empty; type a question about the image before sending."

CSS = "#buttons button { min-width: min(120px, 100%); }"

#: gradio's cache clean-up (``delete_cache``): every 10 minutes, files older than an hour go; all go at shutdown.
CACHE_SWEEP_SECONDS = 600
CACHE_MAX_AGE_SECONDS = 3600


@dataclass(frozen=True)
class UiOptions:
    """How the page behaves.

    Args:
        model_list_mode: ``"once"`` (models listed at start-up) or ``"reload"`` (re-listed on each page load).
        conv_mode: Conversation template for every model; ``None`` picks one from the model name.
        concurrency_count: Answers generated at once; further requests wait in the gradio queue.
        image_limits: Checks applied to uploads.
        embed: Hide the title and notes (for embedding the page).
    """

    model_list_mode: str = "once"
    conv_mode: str | None = None
    concurrency_count: int = 16
    image_limits: ImageLimits = field(default_factory=ImageLimits)
    embed: bool = False

    def __post_init__(self) -> None:
        if self.model_list_mode not in ("once", "reload"):
            raise ValueError(f"model_list_mode must be 'once' or 'reload', got {self.model_list_mode!r}")
        if self.conv_mode is not None and self.conv_mode not in conv_templates:
            known = ", ".join(sorted(conv_templates))
            raise ValueError(f"unknown conversation mode {self.conv_mode!r}; expected one of {known}")
        if self.concurrency_count < 1:
            raise ValueError(f"concurrency_count must be at least 1, got {self.concurrency_count}")


def chat_messages(conv: Conversation | None) -> list[dict[str, Any]]:
    """The conversation as gradio ``Chatbot`` messages; an uploaded image is shown as a thumbnail."""
    if conv is None:
        return []
    messages: list[dict[str, Any]] = []
    for index, (_, message) in enumerate(conv.messages[conv.offset:]):
        role = "user" if index % 2 == 0 else "assistant"
        if message is None:
            continue
        if isinstance(message, tuple):
            text, image, _ = message
            thumbnail = image.copy()
            thumbnail.thumbnail((256, 256))
            messages.append({"role": role, "content": gr.Image(value=thumbnail)})
            message = text.replace(DEFAULT_IMAGE_TOKEN, "").strip()
        messages.append({"role": role, "content": message})
    return messages


NOT_AN_IMAGE = "The upload is not an image this server can read; upload a PNG, JPEG, WebP, BMP or GIF file."


def refuse_unreadable_uploads(component: gr.Image) -> gr.Image:
    """Make ``component`` answer a file that is not an image with :data:`NOT_AN_IMAGE` instead of a traceback.

    gradio opens the upload in ``preprocess``, before any event function runs, so the check wraps that
    method of this one instance (a subclass would make gradio write a ``.pyi`` stub next to this module).
    """
    preprocess = component.preprocess

    def checked(payload: Any) -> Any:
        try:
            return preprocess(payload)
        except (UnidentifiedImageError, OSError, ValueError):
            raise gr.Error(NOT_AN_IMAGE, print_exception=False) from None

    component.preprocess = checked  # type: ignore[method-assign]
    return component


def read_uploaded_video(path: str, limits: Any) -> tuple[str, Image.Image]:
    """``(base64 of the uploaded video file, its first frame)`` for the chat page.

    Raises:
        ValueError: If the file is refused by the servers' one video check (:func:`llava.serve.video_input.
            probe_uploaded_video`: upload limits, a still picture, frames over the pixel bound or changing size).
    """
    from .video_input import decode_planned_video, probe_uploaded_video

    first = decode_planned_video(probe_uploaded_video(path, limits, frames=1), limits)
    with open(path, "rb") as handle:
        encoded = base64.b64encode(handle.read()).decode("ascii")
    return encoded, Image.fromarray(first.frames[0])


def _png_to_image(encoded: str) -> Image.Image:
    """A panel picture a worker sent (base64 PNG), opened by the servers' image rule (header checked first)."""
    return decode_base64_image(encoded)


def build_demo(backend: ChatBackend, options: UiOptions, models: list[str]) -> gr.Blocks:
    """The chat page for ``backend``; ``models`` fills the selector at start (``"once"`` mode)."""

    def fresh_state() -> Conversation:
        return default_conversation.copy()

    def panel(visible: bool, summary: str = "", image: Image.Image | None = None) -> tuple[Any, Any, Any]:
        return gr.Column(visible=visible), gr.Markdown(value=summary), gr.Image(value=image)

    def selector(choices: list[str], preferred: str | None = None) -> Any:
        value = preferred if preferred in choices else (choices[0] if choices else None)
        return gr.Dropdown(choices=choices, value=value)

    def load_demo(request: gr.Request) -> tuple[Any, ...]:
        preferred = request.query_params.get("model") if request is not None else None
        choices = backend.list_models() if options.model_list_mode == "reload" else list(models)
        return (fresh_state(), selector(choices, preferred))

    def buttons(enabled: bool) -> tuple[Any, Any]:
        return gr.Button(interactive=enabled), gr.Button(interactive=enabled)

    def add_text(
        state: Conversation | None, text: str, image_path: str | None, mode: str, video_path: str | None = None
    ) -> tuple[Any, ...]:
        text = text or ""
        if not text.strip():
            raise gr.Error(EMPTY_QUESTION, print_exception=False)
        if image_path and video_path:
            raise gr.Error("Upload an image or a video, not both.", print_exception=False)
        video = None
        if video_path:
            try:
                video, image_path = read_uploaded_video(video_path, options.image_limits), None
            except ValueError as error:
                raise gr.Error(sentence(str(error)), print_exception=False) from None
            text = text[:MAX_TEXT_CHARS_WITH_IMAGE]
            if DEFAULT_IMAGE_TOKEN not in text:
                text = text + "\n" + DEFAULT_IMAGE_TOKEN
            state = fresh_state()
            state.video = video[0]
            message: Any = (text, video[1], mode)
        elif image_path:
            try:
                image = open_image_file(image_path, options.image_limits)
            except ImageRejected as error:
                raise gr.Error(sentence(str(error)), print_exception=False) from None
            text = text[:MAX_TEXT_CHARS_WITH_IMAGE]
            if DEFAULT_IMAGE_TOKEN not in text:
                text = text + "\n" + DEFAULT_IMAGE_TOKEN
            message = (text, image, mode)
            state = fresh_state()  # a new image starts a new conversation, as upstream
        else:
            message = text[:MAX_TEXT_CHARS]
            state = state if state is not None else fresh_state()
        state.append_message(state.roles[0], message)
        state.append_message(state.roles[1], None)
        state.skip_next = False
        return (state, chat_messages(state), "", None, *buttons(False), *panel(False), None, None)

    def regenerate(state: Conversation | None, image_process_mode: str) -> tuple[Any, ...]:
        if state is None or len(state.messages) < state.offset + 2:
            raise gr.Error("There is no answer to regenerate yet; ask a question first.", print_exception=False)
        state.messages[-1][-1] = None
        previous = state.messages[-2]
        if isinstance(previous[1], tuple):
            previous[1] = (*previous[1][:2], image_process_mode)
        state.skip_next = False
        return (state, chat_messages(state), "", None, *buttons(False), *panel(False), gr.skip(), gr.skip())

    def clear_history() -> tuple[Any, ...]:
        state = fresh_state()
        return (state, [], "", None, *buttons(False), *panel(False), None, None)

    def http_bot(
        state: Conversation | None, model: str | None, temperature: float, top_p: float, max_new_tokens: float
    ) -> Iterator[tuple[Any, ...]]:
        if state is None or state.skip_next or len(state.messages) < state.offset + 2:
            yield (state, chat_messages(state), *buttons(True), *panel(False))
            return
        model = model or ""
        if len(state.messages) == state.offset + 2:
            # First round: render the conversation in the template the model was trained with.
            template = conv_templates[options.conv_mode or template_for_model(model)].copy()
            template.append_message(template.roles[0], state.messages[-2][1])
            template.append_message(template.roles[1], None)
            template.video = state.video
            state = template
        prompt = state.get_prompt()
        # A video conversation sends the video itself; its first frame only illustrates the chat.
        images = [] if state.video else state.get_images()
        videos = [state.video] if state.video else []
        payload = {
            "model": model,
            "prompt": prompt,
            "temperature": float(temperature),
            "top_p": float(top_p),
            "max_new_tokens": min(int(max_new_tokens), MAX_REQUEST_TOKENS),
            "stop": stop_string(state),
            "images": images,
            "messages": conversation_messages(state),
            **({"videos": videos} if videos else {}),
        }
        logger.info("request: model=%s, %d image(s), %d prompt characters", model, len(images), len(prompt))
        state.messages[-1][-1] = CURSOR
        yield (state, chat_messages(state), *buttons(False), *panel(False))
        for chunk in backend.stream(payload):
            if not chunk.ok:
                state.messages[-1][-1] = f"{chunk.text} (error_code: {chunk.error_code})"
                yield (state, chat_messages(state), *buttons(True), *panel(False))
                return
            state.messages[-1][-1] = chunk.text[len(prompt):].strip() + CURSOR
            yield (state, chat_messages(state), *buttons(False), *panel(False))
        state.messages[-1][-1] = str(state.messages[-1][-1]).removesuffix(CURSOR)
        if videos:
            view = backend.compressor_view(model, [], videos)
        else:
            view = backend.compressor_view(model, images[:1], prompt=prompt) if images else {"available": False}
        if view.get("available"):
            text = view["summary"] + (f"\n\n{view['help']}" if view.get("help") else "")
            shown = panel(True, text, _png_to_image(view["png"]))
        elif view.get("error"):
            shown = panel(True, f"Compressor view unavailable: {view['error']}")
        else:
            shown = panel(False)
        yield (state, chat_messages(state), *buttons(True), *shown)

    with gr.Blocks(title="LLaVA", analytics_enabled=False, delete_cache=(CACHE_SWEEP_SECONDS, CACHE_MAX_AGE_SECONDS)) as demo:
        state = gr.State()
        if not options.embed:
            gr.Markdown(TITLE)
        with gr.Row():
            with gr.Column(scale=3):
                model_selector = gr.Dropdown(
                    choices=models, value=models[0] if models else None, interactive=True, allow_custom_value=True,
                    label="Model", elem_id="model_selector",
                )
                imagebox = refuse_unreadable_uploads(
                    gr.Image(
                        type="filepath", image_mode=None, sources=["upload", "clipboard"], label="Image",
                        elem_id="imagebox",
                    )
                )
                videobox = gr.Video(sources=["upload"], label="Video (instead of an image)", elem_id="videobox")
                # The video reaches add_text through a State, so the page's API (question, image, mode) is unchanged.
                video_path = gr.State()
                image_process_mode = gr.Radio(
                    ["Crop", "Resize", "Pad", "Default"], value="Default", label="Preprocess for non-square image",
                    visible=False,
                )
                with gr.Accordion("Parameters", open=False):
                    temperature = gr.Slider(0.0, 1.0, value=0.2, step=0.1, interactive=True, label="Temperature")
                    top_p = gr.Slider(0.0, 1.0, value=0.7, step=0.1, interactive=True, label="Top P")
                    max_output_tokens = gr.Slider(
                        1, 1024, value=512, step=1, interactive=True, label="Max output tokens"
                    )
            with gr.Column(scale=8):
                chatbot = gr.Chatbot(elem_id="chatbot", label="LLaVA Chatbot", height=480, layout="panel")
                with gr.Row():
                    textbox = gr.Textbox(
                        show_label=False, placeholder="Enter text and press ENTER", container=False, scale=8,
                        elem_id="textbox",
                    )
                    submit_btn = gr.Button(value="Send", variant="primary", scale=1, min_width=50, elem_id="send")
                examples = demo_examples()
                if examples:  # clickable: fills the image box and the question
                    gr.Examples(examples=examples, inputs=[imagebox, textbox], label="Examples", elem_id="examples")
                with gr.Row(elem_id="buttons"):
                    regenerate_btn = gr.Button(value="Regenerate", interactive=False, elem_id="regenerate")
                    clear_btn = gr.Button(value="Clear", interactive=False, elem_id="clear")
                with gr.Column(visible=False, elem_id="compressor_panel") as compressor_panel:
                    gr.Markdown("### What the compressor keeps of the image")
                    compressor_summary = gr.Markdown(elem_id="compressor_summary")
                    compressor_image = gr.Image(
                        type="pil", format="png", interactive=False, show_label=False, elem_id="compressor_maps"
                    )
        if not options.embed:
            gr.Markdown(NOTICE)

        panel_outputs = [compressor_panel, compressor_summary, compressor_image]
        turn_outputs = [state, chatbot, textbox, imagebox, regenerate_btn, clear_btn, *panel_outputs, videobox, video_path]
        bot_inputs = [state, model_selector, temperature, top_p, max_output_tokens]
        bot_outputs = [state, chatbot, regenerate_btn, clear_btn, *panel_outputs]
        bot_options = {"concurrency_limit": options.concurrency_count, "concurrency_id": "http_bot"}

        submit_btn.click(
            add_text, [state, textbox, imagebox, image_process_mode, video_path], turn_outputs, api_name="add_text"
        ).success(http_bot, bot_inputs, bot_outputs, api_name="http_bot", **bot_options)
        textbox.submit(
            add_text, [state, textbox, imagebox, image_process_mode, video_path], turn_outputs, api_visibility="private"
        ).success(http_bot, bot_inputs, bot_outputs, api_visibility="private", **bot_options)
        regenerate_btn.click(
            regenerate, [state, image_process_mode], turn_outputs, api_name="regenerate"
        ).success(http_bot, bot_inputs, bot_outputs, api_visibility="private", **bot_options)
        clear_btn.click(clear_history, None, turn_outputs, api_name="clear_history", queue=False)
        videobox.change(lambda path: path, videobox, video_path, api_name="set_video", queue=False)
        demo.load(load_demo, None, [state, model_selector], api_visibility="private", queue=False)
    return demo


def _stop_on_sigterm() -> None:
    """Make SIGTERM stop the page as Ctrl-C does, so that gradio's shutdown (and its cache clean-up) runs."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def launch(demo: gr.Blocks, *, host: str, port: int | None, share: bool, concurrency_count: int,
           max_queue_size: int, image_limits: ImageLimits, limits: ServerLimits = ServerLimits(),
           block: bool = True) -> gr.Blocks:
    """Start the page: a bounded gradio queue, image-only uploads up to the size limit, the servers' connection
    limits, binding to ``host``."""
    from gradio.utils import get_upload_folder
    from starlette.middleware import Middleware

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    demo.queue(max_size=max_queue_size, default_concurrency_limit=concurrency_count)
    middleware = [Middleware(BodyDeadline, seconds=limits.body_timeout),
                  Middleware(ImageUploadsOnly, limits=image_limits, upload_folder=get_upload_folder())]
    if block:
        _stop_on_sigterm()
    demo.launch(
        server_name=host, server_port=port, share=share, max_file_size=image_limits.max_bytes, prevent_thread_lock=True,
        theme=gr.themes.Default(), css=CSS, footer_links=["api"], ssr_mode=False, app_kwargs={"middleware": middleware},
    )
    # gradio builds its uvicorn config itself; each new connection reads these two from it.
    demo.server.config.limit_concurrency = limits.limit_concurrency
    demo.server.config.timeout_keep_alive = limits.timeout_keep_alive
    if block:
        demo.block_thread()
    return demo


def options_from_args(args: Any, model_list_mode: str = "once") -> UiOptions:
    return UiOptions(
        model_list_mode=model_list_mode,
        conv_mode=args.conv_mode,
        concurrency_count=args.concurrency_count,
        image_limits=image_limits(args),
        embed=args.embed,
    )


def launch_from_args(demo: gr.Blocks, args: Any, options: UiOptions, block: bool = True) -> gr.Blocks:
    return launch(
        demo, host=args.host, port=args.port, share=args.share, concurrency_count=options.concurrency_count,
        max_queue_size=args.max_queue_size, image_limits=options.image_limits, limits=server_limits(args), block=block,
    )


__all__ = [
    "UiOptions",
    "build_demo",
    "chat_messages",
    "launch",
    "launch_from_args",
    "options_from_args",
    "refuse_unreadable_uploads",
]
