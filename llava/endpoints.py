"""An HTTP API's endpoint and key, checked once before the first call: the one rule every API client follows
(the GPT judges; an OpenAI-compatible client of a model server).

* **The base URL is parsed, not concatenated.** ``https://host/openai/deployments/gpt4?api-version=2024-02-01``
  plus the route ``/chat/completions`` is ``https://host/openai/deployments/gpt4/chat/completions?api-version=...``:
  the route goes on the path and the query is kept (appending text to the whole URL would put the route inside the
  query). A base URL that is not ``http(s)://host[:port][/path][?query]`` (another scheme, no host, a bad port, a
  user name or password, a fragment, a space or control character) is one sentence naming the variable.
* **A key is checked before it is sent.** A control character (a carriage return left by a Windows ``.env`` file),
  a space or a non-ASCII character in the key is one sentence naming the variable, the character and its
  position, before any call: such a request cannot be built, so it is the user's error and never retried.
* **A key is never shown.** Messages name the variable; where a key must be told apart, :func:`mask_secret` shows
  its last 4 characters at most, and :class:`Endpoint`'s ``repr`` leaves the key out.

What cannot be sent at all is refused again by :func:`llava.net.check_request` for any request, so a client that
builds its headers another way cannot leak a key through an error message either.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

from llava.net import unsendable_character
from llava.utils import UserError

#: Characters of a key shown at most, from its end.
SHOWN_KEY_CHARACTERS = 4


def mask_secret(secret: str | None) -> str:
    """``'...1234'`` for a key (its last 4 characters, and only for a key of 12 or more), ``'(none)'`` without one."""
    if not secret:
        return "(none)"
    if len(secret) < 3 * SHOWN_KEY_CHARACTERS:
        return "(hidden)"
    return "..." + secret[-SHOWN_KEY_CHARACTERS:]


def _where(position: int, length: int) -> str:
    if position == length - 1:
        return "at its end"
    if position == 0:
        return "at its start"
    return f"at position {position + 1} of {length}"


def check_secret(secret: str, name: str) -> str:
    """``secret`` (an API key) when an HTTP header can carry it as a Bearer token.

    Args:
        secret: The key.
        name: Where it came from, for the message (``"OPENAI_API_KEY"``).

    Raises:
        UserError: Naming ``name``, the character and its position, never the key.
    """
    found = unsendable_character(secret, allow_space=False, ascii_only=True)
    if found is None:
        return secret
    position, character = found
    hint = " (e.g. from a Windows .env file)" if secret[position] in "\r\n" else ""
    raise UserError(f"{name} holds {character} {_where(position, len(secret))}{hint}; remove it (nothing was sent)")


@dataclass(frozen=True)
class Endpoint:
    """One API call's address and key.

    Attributes:
        url: The whole URL of the call: the base URL's path plus the route, the base URL's query kept.
        key: The Bearer token, or ``None``; left out of ``repr``.
    """

    url: str
    key: str | None = field(default=None, repr=False)

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header carrying the key (none without a key)."""
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    @property
    def key_hint(self) -> str:
        """The key as messages may show it (:func:`mask_secret`)."""
        return mask_secret(self.key)


def join_url(base_url: str, route: str, name: str = "the base URL", example: str = "https://api.openai.com/v1") -> str:
    """``route`` appended to the path of ``base_url``, its query kept; ``example`` is the root messages suggest.

    Raises:
        UserError: For a base URL that is not ``http(s)://host[:port][/path][?query]`` (see the module docstring).
    """
    found = unsendable_character(base_url, allow_space=False, ascii_only=True)
    if found is not None:
        raise UserError(f"{name} holds {found[1]} {_where(found[0], len(base_url))}; remove it")
    parts = urllib.parse.urlsplit(base_url)
    example = f"e.g. {example}"
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise UserError(f"{name} {base_url!r} is not an http:// or https:// URL with a host; {example}")
    try:
        parts.port  # noqa: B018 - only to validate it
    except ValueError:
        raise UserError(f"{name} {base_url!r} has a bad port; {example}") from None
    if parts.username is not None or parts.password is not None:
        raise UserError(f"{name} holds a user name or password before the host; remove it and pass the key on its own")
    if parts.fragment or base_url.endswith("#"):
        raise UserError(f"{name} {base_url!r} has a fragment ('#...'), which is never sent; remove it")
    path = parts.path.rstrip("/") + "/" + route.lstrip("/")
    return urllib.parse.urlunsplit((parts.scheme.lower(), parts.netloc, path, parts.query, ""))


def api_endpoint(base_url: str, route: str, key: str | None = None, *, base_name: str = "the base URL",
                 key_name: str = "the API key") -> Endpoint:
    """The endpoint of ``route`` under ``base_url``, with ``key``, both checked (see the module docstring).

    Args:
        base_url: The API's root, e.g. ``https://api.openai.com/v1`` (a query, e.g. Azure's ``?api-version=``, is kept).
        route: The call's route under it, e.g. ``/chat/completions``.
        key: The Bearer token, or ``None`` for an endpoint that needs none.
        base_name: Where ``base_url`` came from, for messages (``"OPENAI_BASE_URL"``).
        key_name: Where ``key`` came from, for messages (``"OPENAI_API_KEY"``).

    Raises:
        UserError: For a malformed base URL or key: one sentence that never shows the key.
    """
    url = join_url(base_url, route, base_name)
    return Endpoint(url, check_secret(key, key_name) if key else None)


__all__ = ["Endpoint", "SHOWN_KEY_CHARACTERS", "api_endpoint", "check_secret", "join_url", "mask_secret"]
