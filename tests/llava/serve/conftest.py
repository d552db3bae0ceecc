"""Serving fixtures: free loopback ports, server subprocesses with teardown, and one shared serving stack.

The stack (controller + model worker + gradio web server on 127.0.0.1, tiny Braco checkpoint) starts once per
test session, all three processes in parallel; the controller drops silent workers after
``HEARTBEAT_EXPIRATION`` seconds so that the dead-worker test is fast. Logs of every process go to files
under the session's temp dir and are shown when a process fails to come up.
"""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from llava.net import NetError

ROOT = Path(__file__).resolve().parents[3]
BRACO_PROJECTOR = "braco_c2s5"
HEARTBEAT_EXPIRATION = 4.0
HEARTBEAT_INTERVAL = 0.5
STARTUP_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> float:
    """Poll ``predicate`` until it is true; returns the seconds waited or fails naming ``what``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if predicate():
                return time.monotonic() - start
        except (requests.RequestException, NetError):
            pass
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@dataclass
class ServerProcess:
    """A server started with ``python -m module args``; ``log`` holds its stdout and stderr."""

    name: str
    process: subprocess.Popen
    log: Path

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{self.tail()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)


def start_server(name: str, module: str, args: list[str], log_dir: Path, extra_env: dict[str, str] | None = None) -> ServerProcess:
    env = {
        **os.environ,
        **(extra_env or {}),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "OMP_NUM_THREADS": "1",
    }
    log = log_dir / f"{name}.log"
    handle = open(log, "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args], stdout=handle, stderr=subprocess.STDOUT, cwd=str(log_dir), env=env,
        start_new_session=True,
    )
    handle.close()
    return ServerProcess(name, process, log)


@dataclass
class ServingStack:
    controller_url: str
    worker_url: str
    web_url: str
    model_name: str
    checkpoint: Path
    processes: dict[str, ServerProcess]
    log_dir: Path

    def models(self) -> list[str]:
        return requests.post(self.controller_url + "/list_models", timeout=10).json()["models"]


def start_worker(
    stack_dir: Path, controller_url: str, checkpoint: Path, name: str, model_name: str | None = None
) -> tuple[ServerProcess, str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [
        "--host", "127.0.0.1", "--port", str(port), "--worker-address", url, "--controller-address", controller_url,
        "--model-path", str(checkpoint), "--device", "cpu", "--limit-model-concurrency", "5",
        "--heartbeat-interval", str(HEARTBEAT_INTERVAL),
    ]
    if model_name:
        args += ["--model-name", model_name]
    return start_server(name, "llava.serve.model_worker", args, stack_dir), url


@pytest.fixture(scope="session")
def braco_checkpoint(tiny_llava_checkpoint) -> Path:
    return tiny_llava_checkpoint(BRACO_PROJECTOR)


@pytest.fixture(scope="session")
def serving_stack(braco_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingStack]:
    """Controller, worker and web server (``--model-list-mode reload``) on loopback, torn down at the end."""
    stack_dir = tmp_path_factory.mktemp("serving_stack")
    controller_port, web_port = free_port(), free_port()
    controller_url = f"http://127.0.0.1:{controller_port}"
    processes: dict[str, ServerProcess] = {}
    try:
        processes["controller"] = start_server(
            "controller", "llava.serve.controller",
            ["--host", "127.0.0.1", "--port", str(controller_port),
             "--heartbeat-expiration", str(HEARTBEAT_EXPIRATION)],
            stack_dir,
        )
        processes["worker"], worker_url = start_worker(stack_dir, controller_url, braco_checkpoint, "worker")
        processes["web"] = start_server(
            "web", "llava.serve.gradio_web_server",
            ["--host", "127.0.0.1", "--port", str(web_port), "--controller-url", controller_url,
             "--model-list-mode", "reload", "--concurrency-count", "4"],
            stack_dir,
        )
        web_url = f"http://127.0.0.1:{web_port}"
        stack = ServingStack(
            controller_url, worker_url, web_url, braco_checkpoint.name, braco_checkpoint, processes, stack_dir
        )

        def registered() -> bool:
            for process in processes.values():
                process.check_alive()
            return braco_checkpoint.name in stack.models()

        wait_for(registered, STARTUP_TIMEOUT, "the worker to register with the controller")
        def page_served() -> bool:
            processes["web"].check_alive()
            return requests.get(web_url, timeout=5).ok

        wait_for(page_served, STARTUP_TIMEOUT, "the web server")
        yield stack
    finally:
        for process in processes.values():
            process.stop()


def png_bytes(size: tuple[int, int], mode: str = "RGB", color: object = (200, 40, 30)) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new(mode, size, color).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="session")
def huge_png(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 50-megapixel PNG (7072 x 7072, one grey level: small on disk, 50 MB once decoded)."""
    path = tmp_path_factory.mktemp("huge") / "fifty_megapixels.png"
    path.write_bytes(png_bytes((7072, 7072), mode="L", color=128))
    return path


@pytest.fixture(scope="session")
def not_an_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("upload") / "notes.png"
    path.write_text("this is a text file with an image extension\n")
    return path


@pytest.fixture(scope="session")
def braco_engine(braco_checkpoint: Path):
    """The tiny Braco checkpoint loaded in this process (CPU)."""
    from llava.serve.engine import ModelEngine

    return ModelEngine.load(str(braco_checkpoint), device="cpu")


@pytest.fixture(scope="session")
def mlp_engine(tiny_llava_checkpoint):
    """A tiny mlp2x_gelu checkpoint (no token coder, so no Braco panel)."""
    from llava.serve.engine import ModelEngine

    return ModelEngine.load(str(tiny_llava_checkpoint("mlp2x_gelu")), device="cpu")


@contextmanager
def serve_in_thread(app, limits=None) -> Iterator[str]:
    """Serve an ASGI app with :func:`llava.serve.webapi.uvicorn_server` (the servers' own limits) on a free
    loopback port in a thread; yields its URL."""
    import threading

    from llava.serve.webapi import ServerLimits, uvicorn_server

    port = free_port()
    server = uvicorn_server(app, "127.0.0.1", port, limits or ServerLimits())
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 20, "the test server to start", interval=0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
