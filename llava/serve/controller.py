"""The controller: keeps track of model workers and tells clients where to send requests.

    python -m llava.serve.controller [--host 127.0.0.1] [--port 21001] [--dispatch-method shortest_queue|lottery]
                                     [--heartbeat-expiration 30]

Upstream's endpoints (all POST, JSON): ``/register_worker`` {worker_name, check_heart_beat, worker_status?},
``/refresh_all_workers``, ``/list_models`` -> {models}, ``/get_worker_address`` {model} -> {address} (``""``
when none), ``/receive_heart_beat`` {worker_name, queue_length} -> {exist}, ``/worker_generate_stream`` (passed
on to a worker; see :mod:`llava.serve.protocol`) and ``/worker_get_status`` (the sum over all workers).
A worker that registered with ``check_heart_beat`` and has been silent for ``--heartbeat-expiration``
seconds is dropped.
"""

from __future__ import annotations

import argparse
import logging
import random
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import requests
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from llava.constants import CONTROLLER_HEART_BEAT_EXPIRATION
from llava.utils import cli_main, setup_logging

from .flags import add_bind_flags, add_flag, add_request_limit_flags, request_limit
from .protocol import CHUNK_DELIMITER, NO_WORKER, WORKER_UNREACHABLE, StreamChunk, no_model_message, unreachable_message
from .webapi import DEFAULT_MAX_REQUEST_BYTES, bad_request, read_body

logger = logging.getLogger(__name__)

DISPATCH_METHODS = ("shortest_queue", "lottery")


@dataclass
class WorkerInfo:
    model_names: list[str]
    speed: float
    queue_length: int
    check_heart_beat: bool
    last_heart_beat: float


class Controller:
    """The registry of workers, safe to use from several threads.

    Args:
        dispatch_method: ``"shortest_queue"`` (fewest queued requests per unit of speed) or ``"lottery"``
            (random, weighted by speed).
        heartbeat_expiration: Seconds of silence after which a heartbeat-checked worker is dropped.
        status_timeout: Seconds to wait for a worker's ``/worker_get_status``.
        stream_timeout: ``(connect, read)`` seconds for requests passed on to workers.
    """

    def __init__(
        self,
        dispatch_method: str = "shortest_queue",
        heartbeat_expiration: float = CONTROLLER_HEART_BEAT_EXPIRATION,
        *,
        status_timeout: float = 5.0,
        stream_timeout: tuple[float, float] = (5.0, 120.0),
    ) -> None:
        if dispatch_method not in DISPATCH_METHODS:
            raise ValueError(
                f"unknown dispatch method {dispatch_method!r}; expected one of {', '.join(DISPATCH_METHODS)}"
            )
        if not heartbeat_expiration > 0:
            raise ValueError(f"heartbeat_expiration must be positive, got {heartbeat_expiration!r}")
        self.dispatch_method = dispatch_method
        self.heartbeat_expiration = float(heartbeat_expiration)
        self.status_timeout = status_timeout
        self.stream_timeout = stream_timeout
        self._workers: dict[str, WorkerInfo] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------ registry

    def register_worker(self, worker_name: str, check_heart_beat: bool, worker_status: dict[str, Any] | None) -> bool:
        """Add or update a worker; without ``worker_status`` the worker is asked for it. False if that fails."""
        status = worker_status or self.get_worker_status(worker_name)
        if not status:
            return False
        try:
            info = WorkerInfo(
                model_names=[str(name) for name in status["model_names"]],
                speed=float(status.get("speed", 1)),
                queue_length=int(status.get("queue_length", 0)),
                check_heart_beat=bool(check_heart_beat),
                last_heart_beat=time.monotonic(),
            )
        except (KeyError, TypeError, ValueError):
            logger.error("worker %s sent an unusable status: %r", worker_name, status)
            return False
        with self._lock:
            known = worker_name in self._workers
            self._workers[worker_name] = info
        logger.info("%s worker %s serving %s", "updated" if known else "registered", worker_name, info.model_names)
        return True

    def get_worker_status(self, worker_name: str) -> dict[str, Any] | None:
        """The worker's ``/worker_get_status`` answer, or ``None`` if it does not answer properly."""
        try:
            response = requests.post(worker_name + "/worker_get_status", timeout=self.status_timeout)
            response.raise_for_status()
            status = response.json()
        except (requests.RequestException, ValueError) as error:
            logger.warning("cannot get the status of worker %s: %s", worker_name, error)
            return None
        return status if isinstance(status, dict) else None

    def remove_worker(self, worker_name: str) -> None:
        with self._lock:
            self._workers.pop(worker_name, None)

    def workers(self) -> dict[str, WorkerInfo]:
        """A snapshot of the registry."""
        with self._lock:
            return dict(self._workers)

    def refresh_all_workers(self) -> None:
        """Ask every worker for its status again; drop those that do not answer."""
        for name, info in self.workers().items():
            if not self.register_worker(name, info.check_heart_beat, None):
                logger.info("removing unresponsive worker %s", name)
                self.remove_worker(name)

    def receive_heart_beat(self, worker_name: str, queue_length: int) -> bool:
        """Record a heartbeat; False tells an unknown worker to register again."""
        with self._lock:
            info = self._workers.get(worker_name)
            if info is None:
                return False
            info.queue_length = int(queue_length)
            info.last_heart_beat = time.monotonic()
            return True

    def remove_expired_workers(self) -> list[str]:
        """Drop heartbeat-checked workers silent for longer than the expiration; returns their names."""
        deadline = time.monotonic() - self.heartbeat_expiration
        with self._lock:
            expired = [
                name for name, info in self._workers.items()
                if info.check_heart_beat and info.last_heart_beat < deadline
            ]
            for name in expired:
                del self._workers[name]
        for name in expired:
            logger.info("worker %s missed its heartbeats; removed", name)
        return expired

    def list_models(self) -> list[str]:
        self.remove_expired_workers()
        return sorted({name for info in self.workers().values() for name in info.model_names})

    def get_worker_address(self, model_name: str) -> str:
        """A worker for ``model_name`` chosen by the dispatch method, or ``""`` when none serves it."""
        self.remove_expired_workers()
        with self._lock:
            candidates = [
                (name, info) for name, info in self._workers.items()
                if model_name in info.model_names and info.speed > 0
            ]
            if not candidates:
                return ""
            if self.dispatch_method == "lottery":
                names, speeds = zip(*((name, info.speed) for name, info in candidates))
                return random.choices(names, weights=speeds)[0]
            name, info = min(candidates, key=lambda item: item[1].queue_length / item[1].speed)
            info.queue_length += 1  # until the worker's next heartbeat reports the real length
            return name

    # ------------------------------------------------------------------------------------------ sweeping

    def start(self) -> None:
        """Start the thread that drops expired workers (every third of the expiration)."""
        if self._sweeper is not None:
            return
        period = max(self.heartbeat_expiration / 3, 0.1)

        def sweep() -> None:
            while not self._stop.wait(period):
                self.remove_expired_workers()

        self._sweeper = threading.Thread(target=sweep, name="controller-sweeper", daemon=True)
        self._sweeper.start()

    def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------------------------------ acting as a worker

    def generate_stream(self, params: dict[str, Any]) -> Iterator[bytes]:
        """Pass a generation request on to a worker for ``params["model"]`` and relay its chunks."""
        model = str(params.get("model") or "")
        address = self.get_worker_address(model)
        if not address:
            yield StreamChunk(no_model_message(model), NO_WORKER).encode()
            return
        try:
            url = address + "/worker_generate_stream"
            with requests.post(url, json=params, stream=True, timeout=self.stream_timeout) as response:
                for piece in response.iter_lines(delimiter=CHUNK_DELIMITER):
                    if piece:
                        yield piece + CHUNK_DELIMITER
        except requests.RequestException as error:
            logger.warning("worker %s failed: %s", address, error)
            yield StreamChunk(unreachable_message(address), WORKER_UNREACHABLE).encode()

    def aggregate_status(self) -> dict[str, Any]:
        """Status of all workers together, so that a controller can register with another controller."""
        models: set[str] = set()
        speed, queue_length = 0.0, 0
        for name in self.workers():
            status = self.get_worker_status(name)
            if status:
                models.update(status.get("model_names", []))
                speed += float(status.get("speed", 0))
                queue_length += int(status.get("queue_length", 0))
        return {"model_names": sorted(models), "speed": speed, "queue_length": queue_length}


# ---------------------------------------------------------------------------------------------- HTTP


def create_app(controller: Controller, *, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> FastAPI:
    """The controller's FastAPI app (upstream's endpoints); bodies over ``max_request_bytes`` get a 413 answer."""
    app = FastAPI(title="LLaVA controller")

    @app.post("/register_worker")
    async def register_worker(request: Request) -> Any:
        data = await read_body(request, "worker_name", max_bytes=max_request_bytes)
        if isinstance(data, JSONResponse):
            return data
        ok = await run_in_threadpool(
            controller.register_worker, str(data["worker_name"]), bool(data.get("check_heart_beat", True)),
            data.get("worker_status"),
        )
        return {"registered": ok}

    @app.post("/refresh_all_workers")
    async def refresh_all_workers() -> Any:
        await run_in_threadpool(controller.refresh_all_workers)
        return {}

    @app.post("/list_models")
    async def list_models() -> Any:
        return {"models": controller.list_models()}

    @app.post("/get_worker_address")
    async def get_worker_address(request: Request) -> Any:
        data = await read_body(request, "model", max_bytes=max_request_bytes)
        if isinstance(data, JSONResponse):
            return data
        return {"address": controller.get_worker_address(str(data["model"]))}

    @app.post("/receive_heart_beat")
    async def receive_heart_beat(request: Request) -> Any:
        data = await read_body(request, "worker_name", max_bytes=max_request_bytes)
        if isinstance(data, JSONResponse):
            return data
        try:
            queue_length = int(data.get("queue_length", 0))
        except (TypeError, ValueError):
            return bad_request(f"queue_length must be an integer, got {data.get('queue_length')!r}")
        return {"exist": controller.receive_heart_beat(str(data["worker_name"]), queue_length)}

    @app.post("/worker_generate_stream")
    async def worker_generate_stream(request: Request) -> Any:
        data = await read_body(request, max_bytes=max_request_bytes)
        if isinstance(data, JSONResponse):
            return data
        return StreamingResponse(controller.generate_stream(data))

    @app.post("/worker_get_status")
    async def worker_get_status() -> Any:
        return await run_in_threadpool(controller.aggregate_status)

    return app


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.serve.controller", description=__doc__.splitlines()[0])
    add_bind_flags(parser, 21001)
    add_flag(parser, "--dispatch-method", choices=DISPATCH_METHODS, default="shortest_queue")
    add_flag(parser, "--heartbeat-expiration", type=float, default=CONTROLLER_HEART_BEAT_EXPIRATION,
             help="seconds of silence before a worker is dropped")
    add_request_limit_flags(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Parse ``argv`` (default ``sys.argv[1:]``) and serve until interrupted."""
    import uvicorn

    args = build_parser().parse_args(argv)
    setup_logging(logging.INFO)
    logger.info("args: %s", args)
    controller = Controller(args.dispatch_method, args.heartbeat_expiration)
    controller.start()
    try:
        uvicorn.run(create_app(controller, max_request_bytes=request_limit(args)), host=args.host, port=args.port, log_level="warning")
    finally:
        controller.stop()


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
