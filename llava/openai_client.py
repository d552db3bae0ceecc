"""A client of an OpenAI-compatible chat endpoint (``vllm serve``, or any server speaking the API) for questions
about images: the loaders' ``--backend openai``, the demo's and ``llava.serve.cli``'s ``--endpoint``.

The endpoint is the API root, e.g. ``http://127.0.0.1:8000/v1``: ``/models`` and ``/chat/completions`` are appended.
The key, when the server wants one, comes from ``OPENAI_API_KEY`` (never from a flag, where ``ps`` would show it)
and is sent as a Bearer token. Images travel as ``data:image/png;base64,...`` URLs, one ``image_url`` part per
image before the question's text, which vLLM renders as ``<image>\\n`` per image followed by the text: the layout
:meth:`llava.generation.LlavaGenerator.build_prompt` gives the local model.

Every call goes through :mod:`llava.net`, under the judge client's rules: a total deadline (``timeout`` seconds,
however slowly the server sends), a size cap on every reply, redirects followed only within the endpoint's origin
(so the key never reaches another host), and no secret in any message. Rate limits (HTTP 429), server errors and
dropped connections are retried with growing pauses; any other refusal stops at once with one sentence.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from llava import net
from llava.endpoints import check_secret, join_url
from llava.utils import UserError

logger = logging.getLogger(__name__)

KEY_ENV = "OPENAI_API_KEY"
#: The API root messages suggest (``vllm serve``'s default address).
EXAMPLE_ROOT = "http://127.0.0.1:8000/v1"
#: Seconds one answer may take in all (a long answer of a busy server included).
DEFAULT_TIMEOUT = 600.0
#: Seconds a call that lists the served models may take.
MODELS_TIMEOUT = 30.0
#: Largest reply read: an answer of a few thousand tokens is a few tens of KiB.
MAX_REPLY_BYTES = 8 * 1024 * 1024
#: Largest server-sent event of a streamed answer.
MAX_EVENT_BYTES = 1024 * 1024
_RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504})


def endpoint_root(url: str, flag: str = "--endpoint") -> str:
    """``url`` checked as an API root by the one rule for API URLs (:func:`llava.endpoints.join_url`: http(s), a
    host, a valid port, no credentials, no fragment; a query is kept and routes go on its path), without a trailing
    slash.

    Raises:
        UserError: Naming ``flag`` and what to change.
    """
    join_url(url, "", flag, example=EXAMPLE_ROOT)
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/")))


def api_key_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``OPENAI_API_KEY``, checked by the one rule for keys (:func:`llava.endpoints.check_secret`); ``None`` when
    unset or empty.

    Raises:
        UserError: When an HTTP header cannot carry it (a line break, a space, a non-ASCII character); the message
            names the character and its position, never the key.
    """
    key = (os.environ if env is None else env).get(KEY_ENV) or None
    return check_secret(key, KEY_ENV) if key is not None else None


def image_data_url(image: Any) -> str:
    """A PIL image as a lossless ``data:image/png;base64,...`` URL (RGB, as the loaders read images)."""
    buffer = io.BytesIO()
    (image if image.mode == "RGB" else image.convert("RGB")).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def image_data_url_of_base64(encoded: str) -> str:
    """A base64-encoded image (the demo's PNG or JPEG) as a data URL of its own type."""
    kind = "jpeg" if encoded.startswith("/9j/") else "png"
    return f"data:image/{kind};base64,{encoded}"


def user_message(text: str, images: Sequence[Any] = ()) -> dict[str, Any]:
    """One user turn: an ``image_url`` part per image (PIL images or data URLs), then the text."""
    if not images:
        return {"role": "user", "content": text}
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": image if isinstance(image, str) else image_data_url(image)}}
        for image in images
    ]
    parts.append({"type": "text", "text": text})
    return {"role": "user", "content": parts}


def conversation_messages(conv: Any, images: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """A :class:`llava.conversation.Conversation`'s turns after its few-shot ``offset`` as chat messages, up to its open
    assistant turn; the ``<image>`` markers are dropped and ``images`` go with the first user turn (the server's
    template puts them back where the model was trained to see them)."""
    from llava.constants import DEFAULT_IMAGE_TOKEN

    messages: list[dict[str, Any]] = []
    for index, (_, message) in enumerate(conv.messages[conv.offset:]):
        if message is None:
            break
        text = message[0] if isinstance(message, tuple) else str(message)
        if index % 2 == 0:
            messages.append(user_message(text.replace(DEFAULT_IMAGE_TOKEN, "").strip(), images if index == 0 else ()))
        else:
            messages.append({"role": "assistant", "content": text})
    return messages


@dataclass(frozen=True)
class Sampling:
    """The decoding options the API offers: ``temperature`` 0 is greedy."""

    temperature: float = 0.0
    top_p: float | None = None
    max_tokens: int = 1024
    stop: str | None = None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.top_p is not None and self.temperature > 0:
            body["top_p"] = self.top_p
        if self.stop:
            body["stop"] = [self.stop]
        return body


class ChatEndpoint:
    """Calls one OpenAI-compatible endpoint (see the module docstring).

    Args:
        url: The API root, e.g. ``http://127.0.0.1:8000/v1`` (checked by :func:`endpoint_root`).
        api_key: Bearer token, or ``None`` for none.
        timeout: Seconds one answer may take in all.
        max_retries: Extra attempts after a transient failure.
        pause: First pause between attempts (doubled each time, at most 30 s).
        sleep: How to wait between attempts (default :func:`time.sleep`).
    """

    def __init__(self, url: str, api_key: str | None = None, *, timeout: float = DEFAULT_TIMEOUT, max_retries: int = 2,
                 pause: float = 1.0, sleep: Callable[[float], None] | None = None, flag: str = "--endpoint") -> None:
        if not (isinstance(timeout, (int, float)) and timeout > 0 and timeout != float("inf")):
            raise UserError(f"--request-timeout must be a positive number of seconds, got {timeout!r}")
        if api_key is not None:
            check_secret(api_key, "the API key")
        self.url = endpoint_root(url, flag)
        self.api_key, self.timeout, self.max_retries, self.pause = api_key, float(timeout), max_retries, pause
        self._sleep = sleep

    # -------------------------------------------------------------------------------------------- calls

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _refused(self, path: str, response_status: int, body: bytes) -> UserError:
        detail = _error_detail(body)
        hint = ""
        if response_status == 401:
            hint = f"; set {KEY_ENV} to the server's key"
        elif response_status == 404 and path == "/models":
            hint = f"; give the API root, e.g. {EXAMPLE_ROOT}"
        return UserError(f"the endpoint {self.url} refused {path}: HTTP {response_status}{detail}{hint}")

    def _call(self, method: str, path: str, body: Any, deadline: float) -> Any:
        """The JSON reply to one call, retrying transient failures.

        Raises:
            UserError: On a refusal, a redirect to another origin, an oversized or non-JSON reply, or failures
                that outlast the retries.
        """
        wait = self.pause
        for attempt in range(self.max_retries + 1):
            try:
                response = net.request(method, join_url(self.url, path, example=EXAMPLE_ROOT), json=body, headers=self._headers(), deadline=deadline,
                                       max_bytes=MAX_REPLY_BYTES)
            except (net.RedirectRefused, net.ResponseTooLarge) as error:
                raise UserError(f"the endpoint {self.url} cannot be used: {error}") from None
            except net.NetError as error:
                problem = str(error)
            else:
                if response.ok:
                    try:
                        return response.json()
                    except ValueError:
                        raise UserError(f"the endpoint {self.url} answered {path} with something that is not JSON "
                                        f"({_shown(response.body)}); is it an OpenAI-compatible server?") from None
                if response.status not in _RETRYABLE:
                    raise self._refused(path, response.status, response.body)
                problem = f"HTTP {response.status}{_error_detail(response.body)}"
            if attempt < self.max_retries:
                logger.warning("%s%s failed (%s); retrying in %.1f s", self.url, path, problem, wait)
                (self._sleep or time.sleep)(wait)
                wait = min(wait * 2, 30.0)
        raise UserError(f"the endpoint {self.url} still fails after {self.max_retries} retries ({problem})")

    def served_models(self) -> list[str]:
        """The model ids the endpoint serves (``GET /models``).

        Raises:
            UserError: When the endpoint cannot be reached or answers something else than a model list.
        """
        payload = self._call("GET", "/models", None, min(self.timeout, MODELS_TIMEOUT))
        try:
            return [str(entry["id"]) for entry in payload["data"]]
        except (KeyError, TypeError):
            raise UserError(f"the endpoint {self.url} answered /models without a list of models "
                            "({'data': [{'id': ...}]}); is it an OpenAI-compatible server?") from None

    def resolve_model(self, requested: str | None = None) -> str:
        """``requested`` when the endpoint serves it, else the endpoint's only model.

        Raises:
            UserError: When ``requested`` is not served, or the endpoint serves several models and none was named.
        """
        models = self.served_models()
        if requested is not None:
            if requested not in models:
                raise UserError(f"the endpoint {self.url} does not serve {requested!r}; it serves: {', '.join(models) or 'nothing'}")
            return requested
        if len(models) != 1:
            raise UserError(f"the endpoint {self.url} serves {len(models)} models ({', '.join(models) or 'none'}); "
                            "name one with --served-model")
        return models[0]

    def complete(self, messages: Sequence[Mapping[str, Any]], model: str, sampling: Sampling) -> str:
        """The assistant's answer to ``messages`` (``/chat/completions``, not streamed).

        Raises:
            UserError: See :meth:`_call`; also for a reply without ``choices[0].message.content``.
        """
        body = {"model": model, "messages": list(messages), **sampling.body()}
        payload = self._call("POST", "/chat/completions", body, self.timeout)
        try:
            return str(payload["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError):
            raise UserError(f"the endpoint {self.url} answered without choices[0].message.content") from None

    def stream(self, messages: Sequence[Mapping[str, Any]], model: str, sampling: Sampling) -> Iterator[str]:
        """The answer so far, after each streamed piece (server-sent events of ``/chat/completions``).

        Raises:
            UserError: On a refusal, a redirect to another origin, a missed deadline, an oversized event, a dropped
                connection or a malformed event (no retries: part of the answer may have been shown).
        """
        body = {"model": model, "messages": list(messages), "stream": True, **sampling.body()}
        answer = ""
        try:
            with net.open_stream("POST", join_url(self.url, "/chat/completions", example=EXAMPLE_ROOT), json=body, headers=self._headers(),
                                 deadline=self.timeout, max_redirects=5) as response:
                if not response.ok:
                    raise self._refused("/chat/completions", response.status, response.read(64 * 1024))
                for event in response.pieces(b"\n\n", MAX_EVENT_BYTES):
                    piece = _event_text(event, self.url)
                    if piece is None:
                        break
                    answer += piece
                    yield answer
        except net.NetError as error:
            raise UserError(f"the endpoint {self.url} cannot be used: {error}") from None


def _event_text(event: bytes, url: str) -> str | None:
    """The text one server-sent event adds (``""`` for none), or ``None`` at ``data: [DONE]``.

    Raises:
        UserError: For an event that is not ``data: <JSON chunk>``, or an error event.
    """
    text = ""
    for line in event.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue  # comments and other fields carry no text
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            return None
        try:
            chunk = json.loads(data)
        except ValueError:
            chunk = None
        if isinstance(chunk, dict) and "error" in chunk:
            raise UserError(f"the endpoint {url} stopped the answer:{_error_detail(data.encode())}")
        try:
            choices = chunk["choices"]  # type: ignore[index]
            text += (choices[0]["delta"].get("content") or "") if choices else ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise UserError(f"the endpoint {url} sent a malformed stream event ({_shown(data.encode())})") from None
    return text


def _shown(body: bytes, limit: int = 120) -> str:
    """The start of a reply body, for a message."""
    text = body[:limit].decode("utf-8", "replace").strip()
    return repr(text) + ("..." if len(body) > limit else "")


def _error_detail(body: bytes) -> str:
    """`` (message)`` from an OpenAI-style error body, or the body's start; ``""`` for an empty body."""
    try:
        data = json.loads(body)
        message = data.get("error", {}).get("message") if isinstance(data.get("error"), dict) else data.get("error") or data.get("message")
    except (ValueError, AttributeError):
        message = None
    if message:
        return f" ({str(message)[:300]})"
    return f" ({_shown(body)})" if body.strip() else ""


class EndpointGenerator:
    """:class:`llava.generation.LlavaGenerator`'s ``generate`` against an endpoint: one request per question, at
    most ``concurrency`` at once, answers in question order (what :func:`llava.eval.core.run_items` calls).

    Args:
        endpoint: The client.
        model: The served model id.
        concurrency: Requests in flight at once (the loaders' ``--batch-size``).
    """

    def __init__(self, endpoint: ChatEndpoint, model: str, concurrency: int = 1) -> None:
        self.endpoint, self.model, self.concurrency = endpoint, model, max(1, int(concurrency))

    def generate(self, questions: Sequence[str], images: Sequence[Sequence[Any]], config: Any) -> list[str]:
        """Answers to ``questions`` (user-turn texts without image markers), each with its PIL images.

        ``config`` is a :class:`llava.generation.GenerationConfig` (``num_beams`` must be 1: the API has no beams).
        """
        sampling = Sampling(float(config.temperature), config.top_p, int(config.max_new_tokens))

        def answer(index: int) -> str:
            messages = [user_message(questions[index], images[index])]
            return self.endpoint.complete(messages, self.model, sampling).strip()

        if self.concurrency == 1 or len(questions) == 1:
            return [answer(index) for index in range(len(questions))]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(questions))) as pool:
            return list(pool.map(answer, range(len(questions))))


__all__ = [
    "DEFAULT_TIMEOUT", "KEY_ENV", "ChatEndpoint", "EndpointGenerator", "Sampling", "api_key_from_env", "conversation_messages",
    "endpoint_root", "image_data_url", "image_data_url_of_base64", "user_message",
]
