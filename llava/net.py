"""The one outgoing HTTP client of the package: a total deadline, a size cap, and no redirect to another origin.

Every network call that ``llava`` makes (the GPT judges, the controller asking its workers, a worker registering
with its controller, the web page asking the controller and the workers) goes through :func:`request` (a whole
reply, read up to ``max_bytes``) or :func:`open_stream` (a reply read piece by piece, e.g. the NUL-separated
chunks of ``/worker_generate_stream``). The rules, each held by a test in ``tests/llava/test_net.py``:

1. **A total deadline.** ``deadline`` seconds cover the connection, sending, the reply's headers and every byte
   of its body. A per-read timeout does not: a server sending one byte every two seconds never trips it. Here a
   watchdog shuts the socket when the deadline passes, so even a read that is blocked returns, and the call
   raises :class:`DeadlineExceeded`.
2. **A size cap.** A reply body larger than ``max_bytes`` (or a stream piece larger than ``max_piece``) raises
   :class:`ResponseTooLarge` as soon as the excess arrives (or at once, from ``Content-Length``); nothing larger
   is held in memory.
3. **No redirect to another origin.** Redirects within the origin (scheme, host and port) are followed, at most
   ``max_redirects`` of them; a redirect elsewhere raises :class:`RedirectRefused` and is not followed, so the
   request's headers (an ``Authorization`` key among them) never reach another origin.
4. **A request that cannot be built is the caller's error, not the network's.** A URL or a header holding a
   control character or a character HTTP cannot carry raises :class:`RequestInvalid` (a ``UserError``) before
   anything is sent; the message names the header, never its value, and no client retries it.

An API client (the GPT judges, an OpenAI-compatible client) builds its URL and key with
:func:`llava.endpoints.api_endpoint`, which checks both before the first call. Replies from the network (and the
servers' request bodies) are parsed with :func:`parse_json`, which turns every malformed document (a nesting deep
enough to exhaust Python's recursion limit included) into a ``ValueError``.

Proxies: ``http_proxy`` / ``https_proxy`` / ``no_proxy`` are honoured as by urllib (HTTPS through a ``CONNECT``
tunnel); loopback addresses never go through a proxy.

Stdlib only (``http.client``; ``UserError`` from :mod:`llava.utils`), so it imports nothing heavy and works without the
serving extras.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import ipaddress
import json as jsonlib
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from llava.utils import UserError

#: Redirect codes; 301/302/303 turn a POST into a GET without a body, as browsers and ``requests`` do.
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_READ_SIZE = 64 * 1024


class NetError(Exception):
    """A call that produced no usable reply; ``str(error)`` is one sentence naming the URL and what happened."""


class DeadlineExceeded(NetError):
    """The call did not finish within its deadline."""


class ResponseTooLarge(NetError):
    """The reply (or one piece of a stream) is larger than the cap."""


class RedirectRefused(NetError):
    """The server redirected to another origin, or redirected too often."""


class ConnectFailed(NetError):
    """The server could not be reached, or dropped the connection."""


class RequestInvalid(NetError, UserError):
    """The request cannot be built (a URL or header the caller gave is malformed): nothing was sent, and
    another try would fail alike."""


def parse_json(data: bytes | bytearray | str, what: str = "the body") -> Any:
    """``data`` parsed as JSON; every malformed document raises ``ValueError`` naming ``what``.

    Python's parser recurses once per nesting level, so ``[[[[...]]]]`` a few thousand levels deep raises
    ``RecursionError``, which code catching ``ValueError`` lets through (a 500 answer from a server, a traceback
    from a client); here it is one more ``ValueError``.
    """
    try:
        return jsonlib.loads(data)
    except RecursionError:
        raise ValueError(f"{what} is not valid JSON (nested too deeply)") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{what} is not valid JSON ({error})") from None


@dataclass(frozen=True)
class Origin:
    """Scheme, host and port: what a redirect must keep to be followed."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def origin_of(url: str) -> Origin:
    """The origin of an ``http``/``https`` URL (default ports filled in).

    Raises:
        NetError: For another scheme, a URL without a host, or a bad port.
    """
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise NetError(f"{url!r} is not an http:// or https:// URL")
    try:
        port = parts.port
    except ValueError:
        raise NetError(f"{url!r} has a bad port") from None
    if not parts.hostname:
        raise NetError(f"{url!r} names no host")
    return Origin(scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80))


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback IP address (``127.0.0.0/8``, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _mib(num_bytes: int) -> str:
    return f"{num_bytes / (1024 * 1024):.1f} MiB" if num_bytes >= 1024 * 1024 else f"{num_bytes} bytes"


class _Watchdog:
    """Shuts the call's socket when the deadline passes, so that a blocked read or write returns at once."""

    def __init__(self, seconds: float) -> None:
        self.deadline_at = time.monotonic() + seconds
        self.seconds = seconds
        self.fired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self.fire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        return self.deadline_at - time.monotonic()

    def watch(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self.fired:
                _shutdown(sock)

    def fire(self) -> None:
        with self._lock:
            self.fired = True
            _shutdown(self._sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shutdown(sock: socket.socket | None) -> None:
    if sock is None:
        return
    with contextlib.suppress(OSError):
        # The plain socket's shutdown, also for a TLS socket: it wakes a reader blocked in another thread without
        # touching the TLS object that reader is using.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _proxy_for(origin: Origin) -> urllib.parse.SplitResult | None:
    if is_loopback(origin.host) or urllib.request.proxy_bypass(origin.host):
        return None
    proxy = urllib.request.getproxies().get(origin.scheme)
    if not proxy:
        return None
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
    return parts if parts.hostname else None


def _proxy_auth(proxy: urllib.parse.SplitResult) -> dict[str, str]:
    if proxy.username is None:
        return {}
    credentials = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password or '')}"
    return {"Proxy-Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


class _Exchange:
    """One connection carrying one request and its reply, under a watchdog."""

    def __init__(self, method: str, url: str, body: bytes | None, headers: Mapping[str, str], watchdog: _Watchdog) -> None:
        self.url, self.watchdog = url, watchdog
        self.closed = False
        self.sock: socket.socket | None = None  # kept: http.client drops conn.sock once a reply owns the socket
        origin = origin_of(url)
        parts = urllib.parse.urlsplit(url)
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        proxy = _proxy_for(origin)
        timeout = max(watchdog.remaining(), 0.001)
        if proxy is None:
            self.conn = self._connection(origin.scheme, origin.host, origin.port, timeout)
        elif origin.scheme == "https":
            self.conn = http.client.HTTPSConnection(
                proxy.hostname, proxy.port or 80, timeout=timeout, context=ssl.create_default_context()
            )
            self.conn.set_tunnel(origin.host, origin.port, headers=_proxy_auth(proxy))
        else:
            self.conn = http.client.HTTPConnection(proxy.hostname, proxy.port or 80, timeout=timeout)
            target = urllib.parse.urlunsplit(("http", parts.netloc.rsplit("@", 1)[-1], parts.path or "/", parts.query, ""))
            headers = {**headers, **_proxy_auth(proxy)}
        try:
            self.conn.connect()
            self.sock = self.conn.sock
            watchdog.watch(self.sock)
            self._send(method, target, body, headers)
            self.response = self.conn.getresponse()
        except RequestInvalid:
            self.close()
            raise
        except (OSError, http.client.HTTPException, ValueError) as error:
            self.close()
            raise self.failure(error) from None

    def _send(self, method: str, target: str, body: bytes | None, headers: Mapping[str, str]) -> None:
        try:
            self.conn.request(method, target, body=body, headers=dict(headers))
        except (http.client.InvalidURL, ValueError) as error:  # checked up front; the library's text may hold a key
            raise RequestInvalid(f"the request to {self.url.split('?')[0]} cannot be built ({type(error).__name__}); "
                                 "nothing was sent") from None

    @staticmethod
    def _connection(scheme: str, host: str, port: int, timeout: float) -> http.client.HTTPConnection:
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def failure(self, error: BaseException) -> NetError:
        """``error`` from the socket as a :class:`NetError` (a :class:`DeadlineExceeded` once the watchdog fired)."""
        if self.watchdog.fired or isinstance(error, TimeoutError):
            return DeadlineExceeded(f"{self.url} did not answer within {self.watchdog.seconds:g} s")
        return ConnectFailed(f"{self.url} cannot be reached ({type(error).__name__}: {error})")

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of the body (``b""`` at its end)."""
        try:
            data = self.response.read1(size)
        except (OSError, http.client.HTTPException, ValueError) as error:
            raise self.failure(error) from None
        # A shut socket reads as the end of the body: report why it was shut instead.
        if self.watchdog.fired:
            raise self.failure(TimeoutError())
        if self.closed:
            raise ConnectFailed(f"the connection to {self.url} was closed while its reply was read")
        return data

    def interrupt(self) -> None:
        """Shut the socket (safe from any thread): a read blocked in another thread returns at once."""
        self.closed = True
        _shutdown(self.sock)

    def close(self) -> None:
        """Interrupt, then release the socket (in the thread that reads: the reply's buffer has a lock). Only
        once the socket is released does the kernel reset a peer that keeps sending."""
        self.interrupt()
        with contextlib.suppress(Exception):
            response = getattr(self, "response", None)
            if response is not None:
                response.close()
        with contextlib.suppress(Exception):
            self.conn.close()


_CHARACTER_NAMES = {"\r": "a carriage return (\\r)", "\n": "a line feed (\\n)", "\t": "a tab", " ": "a space",
                    "\0": "a NUL character"}


def unsendable_character(text: str, *, allow_space: bool = True, ascii_only: bool = False) -> tuple[int, str] | None:
    """``(position, description)`` of the first character of ``text`` that HTTP cannot carry in a header (a
    control character; with ``ascii_only`` anything outside ASCII; without ``allow_space`` a space), or ``None``.
    The description names the character (``a carriage return (\\r)``), never the text around it."""
    for position, char in enumerate(text):
        code = ord(char)
        if code < 32 or code == 127 or (char == " " and not allow_space):
            return position, _CHARACTER_NAMES.get(char, f"the control character U+{code:04X}")
        if code > (127 if ascii_only else 255):
            return position, f"the non-ASCII character U+{code:04X}"
    return None


def check_request(url: str, headers: Mapping[str, str]) -> None:
    """Refuse, before anything is sent, a URL or header that HTTP cannot carry.

    Raises:
        RequestInvalid: Naming the URL's origin or the header's name and the character, never a header's value.
    """
    shown = url.split("?")[0]
    found = unsendable_character(url, allow_space=False, ascii_only=True)
    if found is not None:
        raise RequestInvalid(f"the URL {shown[:200]!r} holds {found[1]} at position {found[0]}; a URL cannot carry it, "
                             "so nothing was sent")
    for name, value in headers.items():
        found = unsendable_character(name, allow_space=False, ascii_only=True) or unsendable_character(str(value))
        if found is not None:
            raise RequestInvalid(f"the {name[:60]!r} header of the request to {shown[:200]} holds {found[1]}, which an "
                                 "HTTP header cannot carry; nothing was sent (the value is not shown)")


def _encode(json: Any, data: bytes | None, headers: Mapping[str, str] | None) -> tuple[bytes | None, dict[str, str]]:
    sent = {"User-Agent": "llava", **(headers or {})}
    if json is not None:
        data = jsonlib.dumps(json).encode()
        sent.setdefault("Content-Type", "application/json")
    return data, sent


def _open(method: str, url: str, body: bytes | None, headers: dict[str, str], watchdog: _Watchdog,
          max_redirects: int) -> _Exchange:
    """Send the request, following redirects within the origin; the exchange whose reply is not a redirect."""
    origin = origin_of(url)
    for hop in range(max_redirects + 1):
        exchange = _Exchange(method, url, body, headers, watchdog)
        status = exchange.response.status
        location = exchange.response.getheader("Location")
        if status not in _REDIRECTS or not location:
            return exchange
        exchange.close()
        target = urllib.parse.urljoin(url, location)
        try:
            target_origin = origin_of(target)
        except NetError:
            target_origin = None
        if target_origin != origin:
            raise RedirectRefused(
                f"{url} redirected to another origin ({target.split('?')[0]}); the redirect was not followed, "
                "so nothing of the request went there"
            )
        if hop == max_redirects:
            raise RedirectRefused(f"{url} redirected more than {max_redirects} times; not followed further")
        if status in (301, 302, 303) and method not in ("GET", "HEAD"):
            method, body = "GET", None
            headers = {key: value for key, value in headers.items() if key.lower() not in ("content-type", "content-length")}
        url = target
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Response:
    """A whole reply: HTTP status, headers (lower-case names), the body (at most the call's ``max_bytes``) and the
    final URL."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        """The body parsed as JSON (:func:`parse_json`).

        Raises:
            ValueError: If it is not JSON, nested too deeply included.
        """
        return parse_json(self.body, f"the reply of {self.url}")


def _headers(response: http.client.HTTPResponse) -> dict[str, str]:
    """The reply's headers with lower-case names."""
    return {name.lower(): value for name, value in response.getheaders()}


def _declared_length(response: http.client.HTTPResponse) -> int | None:
    value = response.getheader("Content-Length", "")
    return int(value) if value.isdigit() else None


def request(method: str, url: str, *, json: Any = None, data: bytes | None = None,
            headers: Mapping[str, str] | None = None, deadline: float, max_bytes: int,
            max_redirects: int = 5) -> Response:
    """Send one request and read its whole reply.

    Args:
        method: ``"GET"``, ``"POST"``, ...
        url: An ``http://`` or ``https://`` URL.
        json: A body to send as JSON (``Content-Type: application/json``), or ``None``.
        data: Raw body bytes (when ``json`` is ``None``).
        headers: Extra request headers.
        deadline: Seconds for the whole call, redirects included.
        max_bytes: Largest reply body accepted.
        max_redirects: Redirects within the origin to follow (0: none; a redirect raises :class:`RedirectRefused`).

    Raises:
        DeadlineExceeded, ResponseTooLarge, RedirectRefused, ConnectFailed, RequestInvalid: See the module
            docstring.
    """
    body, sent = _encode(json, data, headers)
    check_request(url, sent)
    watchdog = _Watchdog(deadline)
    try:
        exchange = _open(method.upper(), url, body, sent, watchdog, max_redirects)
        try:
            declared = _declared_length(exchange.response)
            if declared is not None and declared > max_bytes:
                raise ResponseTooLarge(f"{exchange.url} sent a reply of {_mib(declared)}, more than the {_mib(max_bytes)} accepted")
            received = bytearray()
            while chunk := exchange.read(_READ_SIZE):
                received += chunk
                if len(received) > max_bytes:
                    raise ResponseTooLarge(f"{exchange.url} sent a reply larger than the {_mib(max_bytes)} accepted")
            response = exchange.response
            return Response(response.status, _headers(response), bytes(received), exchange.url)
        finally:
            exchange.close()
    finally:
        watchdog.cancel()


class Stream:
    """A reply read as it arrives (see :func:`open_stream`). :meth:`interrupt` may be called from any thread: it
    ends a read blocked in another one."""

    def __init__(self, exchange: _Exchange, watchdog: _Watchdog) -> None:
        self._exchange, self._watchdog = exchange, watchdog
        self.status = exchange.response.status
        self.headers = _headers(exchange.response)
        self.url = exchange.url
        self._closed = False

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def read(self, max_bytes: int) -> bytes:
        """The rest of the body, at most ``max_bytes``.

        Raises:
            ResponseTooLarge: If there is more.
        """
        received = bytearray()
        while chunk := self._exchange.read(_READ_SIZE):
            received += chunk
            if len(received) > max_bytes:
                raise ResponseTooLarge(f"{self.url} sent a reply larger than the {_mib(max_bytes)} accepted")
        return bytes(received)

    def pieces(self, delimiter: bytes, max_piece: int) -> Iterator[bytes]:
        """The body split at ``delimiter`` (delimiters removed, empty pieces skipped), as the pieces complete.

        Each byte is scanned once and each piece copied once, so a long stream costs time linear in its length
        (``requests``' ``iter_lines`` re-scans the pending data on every read).

        Raises:
            ResponseTooLarge: When a piece grows beyond ``max_piece`` bytes before its delimiter arrives.
        """
        buffer = bytearray()
        scanned = 0  # bytes of ``buffer`` known to hold no delimiter
        while chunk := self._exchange.read(_READ_SIZE):
            buffer += chunk
            start = 0
            while (end := buffer.find(delimiter, max(scanned, start))) >= 0:
                if end > start:
                    yield bytes(buffer[start:end])
                start = end + len(delimiter)
            del buffer[:start]
            scanned = max(len(buffer) - len(delimiter) + 1, 0)
            if len(buffer) > max_piece:
                raise ResponseTooLarge(
                    f"{self.url} sent a piece larger than {_mib(max_piece)} without a delimiter; the stream was cut"
                )
        if buffer:
            yield bytes(buffer)

    def interrupt(self) -> None:
        """End the stream from any thread: a read blocked in another thread returns (raising :class:`NetError`)."""
        self._exchange.interrupt()

    def close(self) -> None:
        """Close the connection (idempotent; from the thread that reads, else use :meth:`interrupt`)."""
        if not self._closed:
            self._closed = True
            self._exchange.close()
            self._watchdog.cancel()


@contextlib.contextmanager
def open_stream(method: str, url: str, *, json: Any = None, data: bytes | None = None,
                headers: Mapping[str, str] | None = None, deadline: float, max_redirects: int = 0) -> Iterator[Stream]:
    """Send one request and hand over its reply unread, as a :class:`Stream`; closed when the block ends.

    ``deadline`` covers the whole exchange, reading the stream included. Arguments and errors as
    :func:`request`; a worker never redirects, so redirects are not followed unless ``max_redirects`` says so.
    """
    body, sent = _encode(json, data, headers)
    check_request(url, sent)
    watchdog = _Watchdog(deadline)
    try:
        exchange = _open(method.upper(), url, body, sent, watchdog, max_redirects)
    except BaseException:
        watchdog.cancel()
        raise
    stream = Stream(exchange, watchdog)
    try:
        yield stream
    finally:
        stream.close()


__all__ = [
    "ConnectFailed",
    "DeadlineExceeded",
    "NetError",
    "Origin",
    "RedirectRefused",
    "RequestInvalid",
    "Response",
    "ResponseTooLarge",
    "Stream",
    "check_request",
    "is_loopback",
    "open_stream",
    "origin_of",
    "parse_json",
    "request",
    "unsendable_character",
]
