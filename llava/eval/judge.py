"""One client for the GPT judges (LLaVA-Bench review, MM-Vet grading): any OpenAI-compatible endpoint.

The endpoint comes from the environment, so the same commands run against OpenAI, Azure-style proxies or a
local server (vLLM, llama.cpp, a test double on 127.0.0.1):

- ``OPENAI_API_KEY``: sent as a Bearer token; required when the endpoint is OpenAI's own. A key holding a control
  character (a carriage return from a Windows ``.env`` file), a space or a non-ASCII character is refused before
  the first call; messages never show a key (:mod:`llava.endpoints`).
- ``OPENAI_BASE_URL``: the endpoint root (default ``https://api.openai.com/v1``); ``/chat/completions`` is added
  to its path and a query (Azure's ``?api-version=...``) is kept.
- ``LLAVA_JUDGE_MODEL``: the judge model, unless the command names one.

Rate limits (HTTP 429), server errors, dropped connections and calls that miss their deadline are retried with
growing pauses; any other refusal (a bad key, an unknown model) and a request that cannot be built stop at once
with one sentence. Calls go through
:mod:`llava.net`: each has a total deadline (``timeout`` seconds, however slowly the endpoint sends), a reply larger
than ``max_reply_bytes`` is refused, and a redirect to another origin is never followed (the key stays with the
endpoint; set ``OPENAI_BASE_URL`` to the final address instead). Neither is retried nor recorded as a grade.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llava import net
from llava.endpoints import api_endpoint
from llava.numeric import check_number, check_seconds
from llava.utils import UserError

logger = logging.getLogger(__name__)

BASE_URL_ENV, KEY_ENV, MODEL_ENV = "OPENAI_BASE_URL", "OPENAI_API_KEY", "LLAVA_JUDGE_MODEL"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Seconds one judge call may take in all (upstream's ``openai`` client waited 120 s per read).
DEFAULT_TIMEOUT = 120.0
#: The most retries of one judge call (``--max-retries``; each pauses up to a minute).
MAX_RETRIES = 100
#: Largest judge reply accepted: a review of 1024 tokens is a few KiB.
DEFAULT_MAX_REPLY_BYTES = 1024 * 1024
# HTTP answers worth another try: rate limits and server-side trouble.
_RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class JudgeReply:
    """The judge's answer text and the model that wrote it (as the endpoint names it)."""

    text: str
    model: str


class JudgeClient:
    """Calls an OpenAI-compatible ``/chat/completions`` endpoint, retrying transient failures.

    Args:
        base_url: Endpoint root, e.g. ``https://api.openai.com/v1``.
        api_key: Bearer token (``None``: no Authorization header).
        model: Judge model name.
        max_retries: Extra attempts after a transient failure.
        pause: First pause between attempts in seconds (doubled each time, at most 60 s).
        timeout: Seconds one call may take in all, connection and whole reply included.
        max_reply_bytes: Largest reply accepted; a larger one stops the run.
        sleep: How to wait between attempts (default :func:`time.sleep`, looked up at call time).
        key_name: Where ``api_key`` came from, for messages (never the key itself).

    Raises:
        UserError: For a malformed base URL or key (:func:`llava.endpoints.api_endpoint`), before any call.
    """

    def __init__(self, base_url: str, api_key: str | None, model: str, *, max_retries: int = 6,
                 pause: float = 1.0, timeout: float = DEFAULT_TIMEOUT, max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
                 sleep: Callable[[float], None] | None = None, key_name: str = KEY_ENV) -> None:
        check_number(max_retries, "--max-retries", 0, MAX_RETRIES, integer=True)
        check_seconds(timeout, "--judge-timeout")
        self.endpoint = api_endpoint(base_url, "/chat/completions", api_key, base_name=BASE_URL_ENV, key_name=key_name)
        self.url, self.model = self.endpoint.url, model
        self.max_retries, self.pause, self.timeout, self._sleep = max_retries, pause, timeout, sleep
        self.max_reply_bytes = max_reply_bytes

    def _post(self, messages: Sequence[Mapping[str, str]], max_tokens: int, temperature: float) -> net.Response:
        body = {"model": self.model, "messages": list(messages), "temperature": temperature, "max_tokens": max_tokens}
        return net.request("POST", self.url, json=body, headers=self.endpoint.headers(), deadline=self.timeout,
                           max_bytes=self.max_reply_bytes)

    def chat(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int, temperature: float) -> JudgeReply:
        """The judge's reply to ``messages`` (``[{"role", "content"}, ...]``).

        Raises:
            UserError: When the endpoint refuses the request, redirects to another origin, sends a reply over
                the size cap, or still fails after ``max_retries`` retries.
        """
        wait = self.pause
        for attempt in range(self.max_retries + 1):
            try:
                response = self._post(messages, max_tokens, temperature)
            except net.RequestInvalid:
                raise  # a malformed URL or header: every try would fail alike
            except (net.RedirectRefused, net.ResponseTooLarge) as error:
                raise UserError(f"the judge at {self.url} cannot be used: {error}; nothing was recorded") from None
            except net.NetError as error:  # missed deadline, refused or dropped connection: worth another try
                problem = str(error)
            else:
                if response.ok:
                    try:
                        return _reply(response.json(), self.url, self.model)
                    except ValueError as error:  # not JSON, or JSON without the reply
                        problem = f"{type(error).__name__}: {error}"
                elif response.status in _RETRYABLE:
                    problem = f"HTTP {response.status}"
                else:
                    detail = response.body[:300].decode("utf-8", "replace")
                    raise UserError(f"the judge at {self.url} refused the request: HTTP {response.status} {detail}")
            if attempt < self.max_retries:
                logger.warning("judge call failed (%s); retrying in %.1f s", problem, wait)
                (self._sleep or time.sleep)(wait)
                wait = min(wait * 2, 60.0)
        raise UserError(f"the judge at {self.url} still fails after {self.max_retries} retries ({problem}); run again to resume")


def _reply(payload: Any, url: str, requested: str) -> JudgeReply:
    try:
        text = str(payload["choices"][0]["message"]["content"])
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"the judge at {url} sent a reply without choices[0].message.content") from None
    model = payload.get("model") if isinstance(payload, Mapping) else None
    return JudgeReply(text=text, model=str(model or requested))


def judge_from_env(judge_model: str | None, default_model: str, *, max_retries: int, api_key: str | None = None,
                   timeout: float = DEFAULT_TIMEOUT) -> JudgeClient:
    """The judge named by the environment (see the module docstring); ``judge_model`` wins over it.

    ``api_key`` is used only when ``OPENAI_API_KEY`` is not set.

    Raises:
        UserError: When the endpoint is OpenAI's own and no key is set, or the URL or key is malformed.
    """
    base_url = os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    key_name = KEY_ENV if os.environ.get(KEY_ENV) else "--openai_api_key"
    api_key = os.environ.get(KEY_ENV) or api_key or None
    if api_key is None and base_url == DEFAULT_BASE_URL:
        raise UserError(f"set {KEY_ENV} to the judge's API key (and {BASE_URL_ENV} for another OpenAI-compatible endpoint)")
    model = judge_model or os.environ.get(MODEL_ENV) or default_model
    return JudgeClient(base_url, api_key, model, max_retries=max_retries, timeout=timeout, key_name=key_name)


__all__ = [
    "BASE_URL_ENV", "DEFAULT_BASE_URL", "DEFAULT_MAX_REPLY_BYTES", "DEFAULT_TIMEOUT", "KEY_ENV", "MODEL_ENV", "JudgeClient", "JudgeReply",
    "judge_from_env",
]
