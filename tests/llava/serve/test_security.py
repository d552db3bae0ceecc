"""Fault cases of the serving stack on 127.0.0.1 (real servers, real sockets): K18 the controller as an open relay,
K19 a relay that outlives its client or buffers without bound, K20 bodies that never arrive and connection limits,
K02 requests waiting at the worker, K22 non-image uploads to the page and its cache, C24 ``--device cuda`` without
a GPU, and the entry modules run as files."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack, closing
from pathlib import Path

import pytest
import torch

from llava import net
from llava.serve.admission import AllowedHosts
from llava.serve.controller import Controller, create_app
from llava.serve.model_worker import ConcurrencyGate
from llava.serve.model_worker import create_app as create_worker_app
from llava.serve.webapi import ServerLimits

from ..http_server import Handled, scripted_server
from .conftest import ROOT, free_port, png_bytes, serve_in_thread, start_server, wait_for
from .fake_worker import answer, fake_worker, status


def _post(url: str, payload: dict, deadline: float = 10) -> net.Response:
    return net.request("POST", url, json=payload, deadline=deadline, max_bytes=1 << 20)


def _register(controller_url: str, worker: str, **extra) -> net.Response:
    return _post(controller_url + "/register_worker", {"worker_name": worker, "check_heart_beat": False, **extra})


def _record(handled: Handled) -> None:
    handled.reply(200, b'{"secret": "INTERNAL-SECRET-DATA"}', {"Content-Type": "application/json"})


# ---------------------------------------------------------------------------------------------- K18


def test_k18_an_address_with_a_path_or_query_is_refused_and_never_contacted() -> None:
    fake_status = {"model_names": ["evil"], "speed": 1, "queue_length": 0}
    with scripted_server(_record) as internal, serve_in_thread(create_app(Controller())) as controller:
        for address in (internal.url + "/internal/admin?q=", internal.url + "/admin", "http://user@127.0.0.1:1",
                        internal.url + "#x", "file:///etc/passwd"):
            refused = _register(controller, address, worker_status=fake_status)
            assert refused.status == 400, address
            assert refused.json()["registered"] is False and "must be an origin" in refused.json()["error"]
        assert _post(controller + "/list_models", {}).json() == {"models": []}
        relayed = _post(controller + "/worker_generate_stream", {"model": "evil", "prompt": "x"})
        assert json.loads(relayed.body.rstrip(b"\0"))["error_code"] == 2 and b"SECRET" not in relayed.body
    assert internal.requests == []


def test_k18_a_self_declared_status_is_never_used() -> None:
    lie = {"model_names": ["evil"], "speed": 100, "queue_length": 0}
    with ExitStack() as stack:
        internal = stack.enter_context(scripted_server(_record))  # answers JSON, but not a worker's status
        worker = stack.enter_context(fake_worker(status("real")))
        controller = stack.enter_context(serve_in_thread(create_app(Controller())))
        answer_ = _register(controller, internal.url, worker_status=lie)
        assert answer_.status == 200 and answer_.json()["registered"] is False
        assert "could not get a model worker's status" in answer_.json()["error"]
        assert _register(controller, worker.url, worker_status=lie).json() == {"registered": True}
        assert _post(controller + "/list_models", {}).json() == {"models": ["real"]}  # what it answered, not the lie
        relayed = _post(controller + "/worker_generate_stream", {"model": "evil", "prompt": "x"})
        assert json.loads(relayed.body.rstrip(b"\0"))["error_code"] == 2
    assert [seen.path for seen in internal.requests] == ["/worker_get_status"]  # asked once, never used


def test_k18_hosts_off_the_allow_list_are_refused_before_any_contact() -> None:
    hostname = socket.gethostname()  # a name (not "localhost"): on no allow-list unless given
    assert hostname.lower() != "localhost"
    with fake_worker(status("m")) as worker:
        port = worker.port
        with serve_in_thread(create_app(Controller())) as controller:
            refused = _register(controller, f"http://{hostname}:{port}")
            assert refused.status == 403 and "is not on the controller's allow-list (loopback only)" in refused.json()["error"]
            assert _post(controller + "/receive_heart_beat", {"worker_name": f"http://{hostname}:{port}"}).json() == {"exist": False}
        assert worker.requests == []
    hosts = AllowedHosts.parse(["gpu-node-1,10.0.0.0/24", "10.1.2.3"])
    assert hosts.allows("GPU-node-1") and hosts.allows("10.0.0.77") and hosts.allows("10.1.2.3") and hosts.allows("::1")
    assert not hosts.allows("10.0.1.1") and not hosts.allows("gpu-node-2") and not hosts.allows("example.com")
    assert AllowedHosts.parse(["*"]).allows("example.com")
    with pytest.raises(ValueError, match=r"--allowed-worker-hosts entry 'http://x:1' is not a host name"):
        AllowedHosts.parse(["http://x:1"])


def test_k18_the_allow_list_admits_a_named_host() -> None:
    hostname = socket.gethostname()
    with scripted_server(lambda handled: handled.reply(200, json.dumps(status("m")).encode()), host="0.0.0.0") as worker:
        controller = Controller(allowed_hosts=AllowedHosts.parse([hostname]))
        assert controller.register_worker(f"http://{hostname}:{worker.port}", False)
        assert controller.list_models() == ["m"]


# ---------------------------------------------------------------------------------------------- K19


def _one_chunk_then_trickle(handled: Handled) -> None:
    handled.start(200)
    handled.write(answer("hi there"))
    for _ in range(100):  # 20 s of one byte every 0.2 s and no delimiter: a relay waiting for one never returns
        time.sleep(0.2)
        handled.write(b"x")


def test_k19_the_relay_stops_when_its_client_leaves() -> None:
    with fake_worker(status("m"), _one_chunk_then_trickle) as worker, serve_in_thread(create_app(Controller())) as controller:
        assert _register(controller, worker.url).json()["registered"] is True
        with net.open_stream("POST", controller + "/worker_generate_stream", json={"model": "m", "prompt": "p"}, deadline=30) as stream:
            assert json.loads(next(stream.pieces(b"\0", 1 << 20)))["text"] == "hi there"
        left = time.monotonic()  # the client has closed its connection
        wait_for(lambda: bool(worker.client_gone_at), 10, "the controller to close its connection to the worker", 0.05)
        assert worker.client_gone_at[0] - left < 3


def _endless_line(handled: Handled) -> None:
    handled.start(200)
    block = b"y" * 65536
    for _ in range(16384):  # up to 1 GiB without a NUL, unless the reader stops
        handled.write(block)


def test_k19_a_chunk_without_delimiter_is_cut_at_the_bound() -> None:
    with fake_worker(status("m"), _endless_line) as worker, serve_in_thread(create_app(Controller())) as controller:
        assert _register(controller, worker.url).json()["registered"] is True
        start = time.monotonic()
        with net.open_stream("POST", controller + "/worker_generate_stream", json={"model": "m", "prompt": "p"}, deadline=30) as stream:
            pieces = list(stream.pieces(b"\0", 64 << 20))
        elapsed = time.monotonic() - start
        assert [json.loads(piece)["error_code"] for piece in pieces] == [1]
        assert "sent an answer chunk over the size bound" in json.loads(pieces[0])["text"]
        assert elapsed < 15, f"{elapsed:.1f} s"
        wait_for(lambda: bool(worker.client_gone_at), 10, "the controller to stop reading the worker", 0.05)


# ---------------------------------------------------------------------------------------------- K20


def _headers_without_body(port: int, path: str, content_type: str = "application/json") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\nContent-Length: 1000\r\n\r\n".encode())
    return sock


def _read_all(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_k20_headers_without_a_body_get_408_and_connections_are_limited(tmp_path: Path) -> None:
    port = free_port()
    server = start_server("controller", "llava.serve.controller",
                          ["--port", str(port), "--body-timeout", "1", "--limit-concurrency", "6"], tmp_path)
    try:
        wait_for(lambda: _post(f"http://127.0.0.1:{port}/list_models", {}, 2).ok, 60, "the controller")
        sockets = [_headers_without_body(port, "/worker_generate_stream") for _ in range(5)]
        start = time.monotonic()
        replies = [_read_all(sock) for sock in sockets]  # each ends when the server closes the connection
        assert time.monotonic() - start < 6
        for reply in replies:
            assert reply.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1 s (--body-timeout)" in reply
        for sock in sockets:
            sock.close()
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(5)]  # 5 held + this one = 6
        with closing(socket.create_connection(("127.0.0.1", port), timeout=10)) as sock:
            sock.sendall(b"POST /list_models HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 503 ")
        for sock in idle:
            sock.close()
        server.check_alive()
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------- K02


def _declaring(port: int, length: int) -> socket.socket:
    """A request that sends its headers (declaring ``length`` body bytes) and holds back the body."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"POST /worker_generate_stream HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
    time.sleep(0.3)
    return sock


def test_k02_requests_beyond_the_waiting_bound_are_refused_at_once(braco_engine) -> None:
    app = create_worker_app(braco_engine, ConcurrencyGate(1), max_request_bytes=1 << 20, max_waiting=1,
                            max_pending_bytes=1 << 20)  # 1 running + 1 waiting; 1 MiB of bodies held at most
    with serve_in_thread(app, ServerLimits(body_timeout=30)) as url:
        port = int(url.rsplit(":", 1)[1])
        first, second = _declaring(port, 600_000), _declaring(port, 1000)  # both held, 601 KB declared
        start = time.monotonic()
        refused = net.request("POST", url + "/worker_generate_stream", data=b'{"prompt": "x"}', deadline=10, max_bytes=1 << 20)
        assert refused.status == 503 and refused.json()["error_code"] == 1  # upstream's error JSON
        assert refused.json()["text"].startswith("The server is busy: it already holds 2 requests (0.6 MiB)")
        second.close()
        time.sleep(0.3)
        # A slot is free again, but 600 KB + 500 KB of body exceed the 1 MiB bound: refused before it is read.
        body = b'{"prompt": "' + b"a" * 500_000 + b'"}'
        too_much = net.request("POST", url + "/worker_generate_stream", data=body, deadline=10, max_bytes=1 << 20)
        assert too_much.status == 503 and "busy" in too_much.json()["text"]
        assert time.monotonic() - start < 5
        first.close()
        time.sleep(0.3)
        served = net.request("POST", url + "/worker_generate_stream", data=body, deadline=10, max_bytes=1 << 20)
        assert served.status == 200 and json.loads(served.body.rstrip(b"\0"))["error_code"] == 1  # admitted and read


# ---------------------------------------------------------------------------------------------- K22 and the page


def _upload(url: str, name: str, data: bytes):
    import httpx

    return httpx.post(url + "/gradio_api/upload", files={"files": (name, data)}, timeout=30)


def _files_under(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*") if path.is_file()}


def test_k22_page_refuses_non_images_and_cleans_its_cache_at_shutdown(tmp_path: Path) -> None:
    cache = tmp_path / "gradio-cache"
    port = free_port()
    page = start_server("web", "llava.serve.gradio_web_server",
                        ["--port", str(port), "--controller-url", f"http://127.0.0.1:{free_port()}", "--body-timeout", "1"],
                        tmp_path, extra_env={"GRADIO_TEMP_DIR": str(cache)})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: page.check_alive() or net.request("GET", url, deadline=5, max_bytes=1 << 24).ok, 120, "the page")
        before = _files_under(cache)
        for index in range(3):
            refused = _upload(url, f"random{index}.png", os.urandom(256 * 1024))
            assert refused.status_code == 400 and "not an image this server can read" in refused.text
        assert _files_under(cache) == before  # nothing of the refused uploads is kept
        accepted = _upload(url, "red.png", png_bytes((32, 32)))
        assert accepted.status_code == 200
        stored = Path(accepted.json()[0])
        assert stored.is_file()
        with closing(_headers_without_body(port, "/gradio_api/upload", "multipart/form-data; boundary=b")) as slow:
            start = time.monotonic()
            assert _read_all(slow).startswith(b"HTTP/1.1 408 ") and time.monotonic() - start < 5
        page.process.send_signal(signal.SIGTERM)
        page.process.wait(timeout=30)
        assert not stored.exists(), "the upload outlived the server"
    finally:
        page.stop()


# ---------------------------------------------------------------------------------------------- C24 and files


@pytest.mark.parametrize("module", ["model_worker", "demo", "cli"])
def test_c24_a_gpu_that_is_not_there_is_refused_before_loading(module: str, tmp_path: Path) -> None:
    from importlib import import_module

    main = import_module(f"llava.serve.{module}").main
    extra = ["--image-file", str(tmp_path / "missing.png")] if module == "cli" else []
    devices = ["cuda:99"] + ([] if torch.cuda.is_available() else ["cuda"])
    for device in devices:
        with pytest.raises(ValueError, match=rf"^--device {device} (needs a GPU|names GPU 99)"):
            main(["--model-path", str(tmp_path / "no-model-here"), "--device", device, *extra])


def test_entry_modules_run_as_files(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    for name in ("controller", "register_worker", "test_message"):  # each entry module has the same hook
        done = subprocess.run([sys.executable, str(ROOT / "llava" / "serve" / f"{name}.py"), "--help"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0 and done.stdout.startswith(f"usage: python -m llava.serve.{name}"), done.stderr[-2000:]
    done = subprocess.run([sys.executable, str(ROOT / "llava" / "serve" / "cli.py"), "--model-path", "m", "--image-file",
                           str(tmp_path / "missing.png"), "--device", "cpu"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "missing.png" in done.stderr


def test_addresses_are_checked_before_anything_starts(tmp_path: Path) -> None:
    from llava.serve import gradio_web_server, model_worker

    model = ["--model-path", str(tmp_path / "no-model-here"), "--device", "cpu"]
    with pytest.raises(ValueError, match=r"^--worker-address: worker address 'http://localhost:1/x' must be an origin"):
        model_worker.main(model + ["--worker-address", "http://localhost:1/x"])
    with pytest.raises(ValueError, match=r"^--controller-address: 'localhost:21001' is not an http:// or https:// URL"):
        model_worker.main(model + ["--controller-address", "localhost:21001"])
    with pytest.raises(ValueError, match=r"^--max-pending-mb must be at least --max-request-mb \(32\), got 8"):
        model_worker.main(model + ["--max-pending-mb", "8"])
    with pytest.raises(ValueError, match=r"^--controller-url: 'localhost:1' is not an http:// or https:// URL"):
        gradio_web_server.main(["--controller-url", "localhost:1"], block=False)
    with pytest.raises(SystemExit):  # argparse: "argument --limit-concurrency: expected an integer from 2 to 1000000, got 0"
        gradio_web_server.main(["--limit-concurrency", "0"], block=False)
    with pytest.raises(ValueError, match=r"^--limit-concurrency must be an integer from 2 to 1000000, got 0"):
        ServerLimits(limit_concurrency=0)
