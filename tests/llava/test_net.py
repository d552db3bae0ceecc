"""llava.net, the one outgoing HTTP client, against scripted servers on 127.0.0.1: total deadlines (also against a
server that trickles), size caps, redirects (never to another origin), streams split in linear time, proxies."""

from __future__ import annotations

import json
import threading
import time

import pytest

from llava import net

from .http_server import Handled, scripted_server


def _json(handled: Handled) -> None:
    handled.reply(200, json.dumps({"path": handled.seen.path, "method": handled.seen.method}).encode(),
                  {"Content-Type": "application/json"})


def test_request_reads_the_reply_and_sends_json() -> None:
    with scripted_server(_json) as server:
        response = net.request("POST", server.url + "/a?b=1", json={"x": 1}, headers={"Authorization": "Bearer k"},
                               deadline=5, max_bytes=1024)
    assert response.ok and response.json() == {"path": "/a?b=1", "method": "POST"}
    assert response.headers["content-type"] == "application/json"
    seen = server.requests[0]
    assert json.loads(seen.body) == {"x": 1} and seen.headers["Content-Type"] == "application/json"
    assert seen.headers["Authorization"] == "Bearer k"


def _trickle_body(handled: Handled) -> None:
    handled.start(200)
    for _ in range(40):  # 1 byte every 0.25 s: each read succeeds, so a per-read timeout never trips
        handled.write(b"x")
        time.sleep(0.25)


def _trickle_headers(handled: Handled) -> None:
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 40:
        handled.handler.wfile.write(bytes([byte]))
        handled.handler.wfile.flush()
        time.sleep(0.25)


@pytest.mark.parametrize("handler", [_trickle_body, _trickle_headers], ids=["body", "headers"])
def test_a_trickling_server_is_cut_at_the_total_deadline(handler) -> None:
    with scripted_server(handler) as server:
        start = time.monotonic()
        with pytest.raises(net.DeadlineExceeded, match=r"did not answer within 1 s$"):
            net.request("GET", server.url, deadline=1.0, max_bytes=1 << 20)
        assert time.monotonic() - start < 2.5


def test_a_stream_has_a_total_deadline_too() -> None:
    with scripted_server(_trickle_body) as server:
        start = time.monotonic()
        with pytest.raises(net.DeadlineExceeded):
            with net.open_stream("GET", server.url, deadline=1.0) as stream:
                list(stream.pieces(b"\0", 1 << 20))
        assert time.monotonic() - start < 2.5


def _big(declared: bool):
    def handle(handled: Handled) -> None:
        size = 8 * 1024 * 1024
        if declared:
            handled.handler.send_response(200)
            handled.handler.send_header("Content-Length", str(size))
            handled.handler.end_headers()
        else:
            handled.start(200)
        for _ in range(size // 65536):
            handled.write(b"z" * 65536)
    return handle


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "until-close"])
def test_replies_over_the_cap_are_refused_without_reading_them(declared: bool) -> None:
    with scripted_server(_big(declared)) as server:
        with pytest.raises(net.ResponseTooLarge, match=r"more than the 1.0 MiB accepted|larger than the 1.0 MiB accepted"):
            net.request("GET", server.url, deadline=10, max_bytes=1 << 20)
        deadline = time.monotonic() + 5
        while not server.client_gone_at and time.monotonic() < deadline:
            time.sleep(0.05)
    assert server.client_gone_at, "the client kept reading the 8 MiB reply"


def test_no_redirect_to_another_origin_and_no_key_sent_there() -> None:
    with scripted_server(_json) as elsewhere:
        def redirect(handled: Handled) -> None:
            handled.reply(302, b"", {"Location": elsewhere.url.replace("127.0.0.1", "localhost") + "/steal"})

        with scripted_server(redirect) as server:
            with pytest.raises(net.RedirectRefused, match=r"redirected to another origin \(http://localhost:\d+/steal\); "
                                                         r"the redirect was not followed"):
                net.request("POST", server.url + "/v1/chat", json={}, headers={"Authorization": "Bearer secret"},
                            deadline=5, max_bytes=1024)
    assert elsewhere.requests == []


def test_redirects_within_the_origin_are_followed_with_their_method() -> None:
    def handle(handled: Handled) -> None:
        path = handled.seen.path
        if path == "/old":
            handled.reply(307, b"", {"Location": "/kept"})
        elif path == "/kept":
            handled.reply(303, b"", {"Location": "/other"})
        else:
            _json(handled)

    with scripted_server(handle) as server:
        response = net.request("POST", server.url + "/old", json={"q": 1}, headers={"Authorization": "Bearer k"},
                               deadline=5, max_bytes=1024)
        with pytest.raises(net.RedirectRefused, match="redirected more than 0 times"):
            net.request("POST", server.url + "/old", json={}, deadline=5, max_bytes=1024, max_redirects=0)
    assert response.json() == {"path": "/other", "method": "GET"}  # 307 keeps POST, 303 turns it into GET
    assert [(seen.method, seen.path) for seen in server.requests[:3]] == [("POST", "/old"), ("POST", "/kept"), ("GET", "/other")]
    assert server.requests[1].body == b'{"q": 1}' and all(s.headers["Authorization"] == "Bearer k" for s in server.requests[:3])


def test_unreachable_server_and_bad_urls() -> None:
    with scripted_server(_json) as server:
        port = server.port
    with pytest.raises(net.ConnectFailed, match=rf"http://127.0.0.1:{port} cannot be reached"):
        net.request("GET", f"http://127.0.0.1:{port}", deadline=5, max_bytes=10)
    with pytest.raises(net.NetError, match="is not an http:// or https:// URL"):
        net.request("GET", "file:///etc/passwd", deadline=5, max_bytes=10)


def test_stream_pieces_split_across_reads_and_cap_a_piece() -> None:
    parts = [b"ab", b"c\r", b"\nde\r\n\r\n", b"f" * 10, b"\r\ng"]

    def handle(handled: Handled) -> None:
        handled.start(200)
        for part in parts:
            handled.write(part)
            time.sleep(0.05)

    with scripted_server(handle) as server:
        with net.open_stream("GET", server.url, deadline=5) as stream:
            assert list(stream.pieces(b"\r\n", 100)) == [b"abc", b"de", b"f" * 10, b"g"]
        with net.open_stream("GET", server.url, deadline=5) as stream:
            with pytest.raises(net.ResponseTooLarge, match="piece larger than 8 bytes without a delimiter"):
                list(stream.pieces(b"\r\n", 8))


def test_stream_splitting_is_linear_in_the_stream_length() -> None:
    size = 48 * 1024 * 1024  # one piece, no delimiter, in 4 KiB writes: a re-scanning splitter copies ~300 GB

    def handle(handled: Handled) -> None:
        handled.start(200)
        block = b"q" * 4096
        for _ in range(size // 4096):
            handled.write(block)

    with scripted_server(handle) as server:
        start = time.monotonic()
        with net.open_stream("GET", server.url, deadline=60) as stream:
            pieces = list(stream.pieces(b"\0", size + 1))
        elapsed = time.monotonic() - start
    assert [len(piece) for piece in pieces] == [size]
    assert elapsed < 15, f"splitting 48 MiB took {elapsed:.1f} s"


def test_interrupt_from_another_thread_ends_a_blocked_read() -> None:
    def handle(handled: Handled) -> None:
        handled.start(200)
        handled.write(b"first\0")
        time.sleep(10)

    with scripted_server(handle) as server:
        with net.open_stream("GET", server.url, deadline=30) as stream:
            pieces = stream.pieces(b"\0", 1024)
            assert next(pieces) == b"first"
            threading.Timer(0.3, stream.interrupt).start()
            start = time.monotonic()
            with pytest.raises(net.NetError):
                next(pieces)
            assert time.monotonic() - start < 2


def test_http_proxy_from_the_environment_but_never_for_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    with scripted_server(_json) as proxy:
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        response = net.request("GET", "http://example.invalid:8080/x?y=1", deadline=5, max_bytes=1024)
        assert response.json()["path"] == "http://example.invalid:8080/x?y=1"  # absolute form: sent to the proxy
        with scripted_server(_json) as direct:
            assert net.request("GET", direct.url + "/d", deadline=5, max_bytes=1024).json()["path"] == "/d"
        assert len(proxy.requests) == 1 and len(direct.requests) == 1
