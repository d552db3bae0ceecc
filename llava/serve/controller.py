"""The controller: keeps track of model workers and tells clients where to send requests.

    python -m llava.serve.controller [--host 127.0.0.1] [--port 21001] [--dispatch-method shortest_queue|lottery]
        [--heartbeat-expiration 30] [--allowed-worker-hosts HOST ...] [--max-workers 128] [--stream-timeout 600]
        [--limit-concurrency 256] [--timeout-keep-alive 5] [--body-timeout 60] [--max-request-mb 32]

Upstream's endpoints (all POST, JSON): ``/register_worker`` {worker_name, check_heart_beat, worker_status?},
``/refresh_all_workers``, ``/list_models`` -> {models}, ``/get_worker_address`` {model} -> {address} (``""``
when none), ``/receive_heart_beat`` {worker_name, queue_length} -> {exist}, ``/worker_generate_stream`` (passed
on to a worker; see :mod:`llava.serve.protocol`) and ``/worker_get_status`` (the sum over all workers).
A worker that registered with ``check_heart_beat`` and has been silent for ``--heartbeat-expiration``
seconds is dropped; one that registered without heartbeats is asked for its status again after that long and
dropped when it does not answer. One worker is one entry, whatever spelling of its address it registers with
(:func:`~llava.serve.admission.worker_identity`: a new spelling replaces the old one), and at most
``--max-workers`` workers are listed (a registration beyond that is refused with HTTP 503 in one sentence).

Admission (see :mod:`llava.serve.admission`): a worker address must be a bare origin on the allow-list
(loopback, plus ``--allowed-worker-hosts``), and the controller lists it only after fetching a well-formed
status from it itself; a ``worker_status`` in the registration body is ignored. Every call to a worker goes
through :mod:`llava.net` (total deadline, size cap, no redirects), and a relayed answer stops when its client
leaves, when a chunk exceeds the size bound, or after ``--stream-timeout`` seconds.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # started as a file: run as ``python -m llava.serve.<name>``
    import os  # noqa: E401
    import sys
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    from llava.serve import run_as_module
    run_as_module(__file__)

import argparse
import logging
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from llava import net
from llava.constants import CONTROLLER_HEART_BEAT_EXPIRATION
from llava.numeric import check_seconds
from llava.utils import cli_main, setup_logging

from .admission import AllowedHosts, WorkerRefused, parse_status, worker_identity, worker_origin
from .flags import (
    COUNT,
    SECONDS,
    add_bind_flags,
    add_flag,
    add_request_limit_flags,
    add_server_limit_flags,
    check_bind,
    request_limit,
    server_limits,
)
from .protocol import (
    CHUNK_DELIMITER,
    NO_WORKER,
    WORKER_ERROR,
    WORKER_UNREACHABLE,
    StreamChunk,
    no_model_message,
    sentence,
    unreachable_message,
)
from .webapi import DEFAULT_MAX_REQUEST_BYTES, bad_request, read_body, uvicorn_server

logger = logging.getLogger(__name__)

DISPATCH_METHODS = ("shortest_queue", "lottery")
#: Default of ``--max-workers``: workers one controller lists at most.
DEFAULT_MAX_WORKERS = 128


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
        allowed_hosts: Hosts workers may live on (loopback always).
        status_timeout: Seconds, in all, for a worker's ``/worker_get_status``.
        stream_timeout: Seconds, in all, for one answer relayed from a worker.
        max_chunk_bytes: Largest chunk of a relayed answer (a chunk carries the prompt and the answer so far).
        max_workers: Workers listed at most; a registration beyond that is refused (HTTP 503).
    """

    def __init__(
        self,
        dispatch_method: str = "shortest_queue",
        heartbeat_expiration: float = CONTROLLER_HEART_BEAT_EXPIRATION,
        *,
        allowed_hosts: AllowedHosts = AllowedHosts(),
        status_timeout: float = 5.0,
        stream_timeout: float = 600.0,
        max_chunk_bytes: int = DEFAULT_MAX_REQUEST_BYTES + 1024 * 1024,
        max_workers: int = DEFAULT_MAX_WORKERS,
    ) -> None:
        if dispatch_method not in DISPATCH_METHODS:
            raise ValueError(
                f"unknown dispatch method {dispatch_method!r}; expected one of {', '.join(DISPATCH_METHODS)}"
            )
        check_seconds(heartbeat_expiration, "heartbeat_expiration (--heartbeat-expiration)")
        check_seconds(status_timeout, "status_timeout")
        check_seconds(stream_timeout, "stream_timeout (--stream-timeout)")
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be a positive integer, got {max_workers!r} (--max-workers)")
        self.dispatch_method = dispatch_method
        self.heartbeat_expiration = float(heartbeat_expiration)
        self.allowed_hosts = allowed_hosts
        self.status_timeout = status_timeout
        self.stream_timeout = stream_timeout
        self.max_chunk_bytes = max_chunk_bytes
        self.max_workers = max_workers
        self._workers: dict[str, WorkerInfo] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------ registry

    def register_worker(self, worker_name: Any, check_heart_beat: bool, worker_status: Any = None) -> bool:
        """Add or update a worker once it answers ``/worker_get_status`` itself; False if it does not.

        ``worker_status`` (upstream's self-declared status) is accepted for compatibility and ignored: only a
        status fetched from the worker is used. An address that is another spelling of a listed worker's
        (:func:`worker_identity`) replaces that entry.

        Raises:
            WorkerRefused: For an address that is not a bare origin on the allow-list (400/403; nothing is sent to
                it), or a new worker when ``max_workers`` are listed (503).
        """
        name = worker_origin(worker_name, self.allowed_hosts)
        if worker_status is not None:
            logger.debug("ignoring the status %s sent with its own registration; asking it", name)
        with self._lock:
            self._check_room(name)
        status = self.get_worker_status(name)
        if status is None:
            return False
        info = WorkerInfo(
            model_names=status["model_names"], speed=status["speed"], queue_length=status["queue_length"],
            check_heart_beat=bool(check_heart_beat), last_heart_beat=time.monotonic(),
        )
        with self._lock:
            self._check_room(name)
            listed = self._listed_as(name)
            if listed is not None and listed != name:
                del self._workers[listed]
                logger.info("worker %s is %s under another spelling (same address and port); replaced", name, listed)
            self._workers[name] = info
        logger.info("%s worker %s serving %s", "updated" if listed else "registered", name, info.model_names)
        return True

    def _listed_as(self, name: str) -> str | None:
        """The name under which the worker at ``name`` is listed (another spelling of it, or itself), else None;
        called under the lock."""
        identity = worker_identity(name)
        return next((listed for listed in self._workers if worker_identity(listed) == identity), None)

    def _check_room(self, name: str) -> None:
        """Refuse a worker not yet listed when ``max_workers`` are (called under the lock)."""
        if len(self._workers) >= self.max_workers and self._listed_as(name) is None:
            raise WorkerRefused(
                f"the controller already lists {len(self._workers)} workers, as many as it accepts (--max-workers "
                f"{self.max_workers}); stop one, or start the controller with a larger --max-workers", 503,
            )

    def get_worker_status(self, worker_name: str) -> dict[str, Any] | None:
        """The worker's ``/worker_get_status`` answer, checked (:func:`parse_status`), or ``None``."""
        try:
            response = net.request("POST", worker_name + "/worker_get_status", deadline=self.status_timeout,
                                   max_bytes=64 * 1024, max_redirects=0)
            status = parse_status(response.json()) if response.status == 200 else None
        except (net.NetError, ValueError) as error:
            logger.warning("cannot get the status of worker %s: %s", worker_name, error)
            return None
        if status is None:
            logger.warning("%s did not answer /worker_get_status like a model worker (HTTP %d)", worker_name, response.status)
        return status

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
            if not self.register_worker(name, info.check_heart_beat):
                logger.info("removing unresponsive worker %s", name)
                self.remove_worker(name)

    def receive_heart_beat(self, worker_name: Any, queue_length: int) -> bool:
        """Record a heartbeat; False tells an unknown worker to register again."""
        try:
            name = worker_origin(worker_name, self.allowed_hosts)
        except WorkerRefused:
            return False
        with self._lock:
            listed = self._listed_as(name)
            info = self._workers.get(listed) if listed is not None else None
            if info is None:
                return False
            info.queue_length = max(int(queue_length), 0)
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

    def recheck_silent_workers(self) -> list[str]:
        """Ask each worker registered without heartbeats, and not heard from for longer than the expiration, for its
        status again: update it when it answers, drop it when not; returns the names dropped."""
        deadline = time.monotonic() - self.heartbeat_expiration
        dropped = []
        for name, info in self.workers().items():
            if info.check_heart_beat or info.last_heart_beat >= deadline:
                continue
            status = self.get_worker_status(name)
            with self._lock:
                if self._workers.get(name) is not info:
                    continue  # replaced or removed meanwhile
                if status is None:
                    del self._workers[name]
                    dropped.append(name)
                    continue
                info.model_names, info.speed = status["model_names"], status["speed"]
                info.queue_length, info.last_heart_beat = status["queue_length"], time.monotonic()
        for name in dropped:
            logger.info("worker %s (registered without heartbeats) no longer answers; removed", name)
        return dropped

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
                self.recheck_silent_workers()

        self._sweeper = threading.Thread(target=sweep, name="controller-sweeper", daemon=True)
        self._sweeper.start()

    def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------------------------------ acting as a worker

    def relay(self, params: dict[str, Any]) -> Relay:
        """A generation request passed on to a worker for ``params["model"]`` (see :class:`Relay`)."""
        return Relay(self, params)

    def generate_stream(self, params: dict[str, Any]) -> Iterator[bytes]:
        """The relayed answer's NUL-terminated chunks (iterated in the calling thread)."""
        relay = self.relay(params)
        try:
            yield from relay
        finally:
            relay.close()

    def aggregate_status(self) -> dict[str, Any]:
        """Status of all workers together, so that a controller can register with another controller."""
        models: set[str] = set()
        speed, queue_length = 0.0, 0
        for name in self.workers():
            status = self.get_worker_status(name)
            if status:
                models.update(status["model_names"])
                speed += status["speed"]
                queue_length += status["queue_length"]
        return {"model_names": sorted(models), "speed": speed, "queue_length": queue_length}


class Relay:
    """One answer passed on from a worker: iterate it (in a worker thread) for NUL-terminated chunks.

    :meth:`close` may be called from any thread while another one iterates: it closes the connection to the
    worker at once, so a read blocked on a silent worker returns and the iteration ends.
    """

    def __init__(self, controller: Controller, params: dict[str, Any]) -> None:
        self.controller, self.params = controller, params
        self._stream: net.Stream | None = None
        self._closed = False

    def close(self) -> None:
        self._closed = True
        if self._stream is not None:
            self._stream.interrupt()  # the reading thread closes the connection itself as the read returns

    def __iter__(self) -> Iterator[bytes]:
        model = str(self.params.get("model") or "")
        address = self.controller.get_worker_address(model)
        if not address:
            yield StreamChunk(no_model_message(model), NO_WORKER).encode()
            return
        deadline = self.controller.stream_timeout
        try:
            with net.open_stream("POST", address + "/worker_generate_stream", json=self.params, deadline=deadline) as stream:
                self._stream = stream
                if self._closed:
                    return
                if stream.status != 200:
                    yield _refusal_chunk(stream).encode()
                    return
                for piece in stream.pieces(CHUNK_DELIMITER, self.controller.max_chunk_bytes):
                    yield piece + CHUNK_DELIMITER
        except net.ResponseTooLarge as error:
            logger.warning("worker %s: %s", address, error)
            yield StreamChunk(f"The model worker at {address} sent an answer chunk over the size bound; the answer was "
                              "cut.", WORKER_ERROR).encode()
        except net.DeadlineExceeded:
            logger.warning("worker %s did not finish an answer within %g s", address, deadline)
            yield StreamChunk(f"The model worker at {address} did not finish the answer within {deadline:g} s "
                              "(--stream-timeout); ask for fewer tokens or try again.", WORKER_UNREACHABLE).encode()
        except net.NetError as error:
            if self._closed:
                return  # the client left; nobody reads this any more
            logger.warning("worker %s failed: %s", address, error)
            yield StreamChunk(unreachable_message(address), WORKER_UNREACHABLE).encode()


def _refusal_chunk(stream: net.Stream) -> StreamChunk:
    """A worker's non-200 answer as one error chunk: its own ``{"text", "error_code"}`` or ``{"error"}``."""
    try:
        data = net.parse_json(stream.read(64 * 1024))
    except (net.NetError, ValueError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("text"), str) and isinstance(data.get("error_code"), int):
        return StreamChunk(data["text"], data["error_code"] or WORKER_ERROR)
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return StreamChunk(sentence(data["error"]), WORKER_ERROR)
    return StreamChunk(f"The model worker at {stream.url} answered HTTP {stream.status}.", WORKER_ERROR)


async def pump(relay: Relay) -> AsyncIterator[bytes]:
    """The relay's chunks for a ``StreamingResponse``; when the client leaves (the response task is cancelled)
    the thread reading from the worker is abandoned and the relay closed, which ends that read at once."""
    chunks = iter(relay)
    try:
        while (piece := await anyio.to_thread.run_sync(next, chunks, None, abandon_on_cancel=True)) is not None:
            yield piece
    finally:
        relay.close()


# ---------------------------------------------------------------------------------------------- HTTP


def create_app(controller: Controller, *, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> FastAPI:
    """The controller's FastAPI app (upstream's endpoints); bodies over ``max_request_bytes`` get a 413 answer."""
    app = FastAPI(title="LLaVA controller")

    @app.post("/register_worker")
    async def register_worker(request: Request) -> Any:
        data = await read_body(request, "worker_name", max_bytes=max_request_bytes)
        if isinstance(data, JSONResponse):
            return data
        try:
            ok = await run_in_threadpool(
                controller.register_worker, data["worker_name"], bool(data.get("check_heart_beat", True)),
                data.get("worker_status"),
            )
        except WorkerRefused as error:
            logger.warning("refused to register %r: %s", data["worker_name"], error)
            return JSONResponse({"registered": False, "error": sentence(str(error))}, status_code=error.status)
        if not ok:
            message = (f"the controller could not get a model worker's status from {data['worker_name']}; "
                       "it registers the worker once that answers")
            return {"registered": False, "error": sentence(message)}
        return {"registered": True}

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
        return {"exist": controller.receive_heart_beat(data["worker_name"], queue_length)}

    @app.post("/worker_generate_stream")
    async def worker_generate_stream(request: Request) -> Any:
        data = await read_body(request, max_bytes=max_request_bytes)
        if isinstance(data, JSONResponse):
            return data
        return StreamingResponse(pump(controller.relay(data)))

    @app.post("/worker_get_status")
    async def worker_get_status() -> Any:
        return await run_in_threadpool(controller.aggregate_status)

    return app


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.serve.controller", description=__doc__.splitlines()[0])
    add_bind_flags(parser, 21001)
    add_flag(parser, "--dispatch-method", choices=DISPATCH_METHODS, default="shortest_queue")
    add_flag(parser, "--heartbeat-expiration", type=SECONDS, default=CONTROLLER_HEART_BEAT_EXPIRATION,
             help="seconds of silence before a worker is dropped")
    add_flag(parser, "--allowed-worker-hosts", "--allow-worker", nargs="+", action="extend", default=[], metavar="HOST",
             help="hosts (names, IP addresses, CIDR networks, or *) workers may register from besides loopback")
    add_flag(parser, "--max-workers", type=COUNT, default=DEFAULT_MAX_WORKERS,
             help="workers listed at most; a registration beyond that is refused (default %(default)s)")
    add_flag(parser, "--stream-timeout", type=SECONDS, default=600.0, help="seconds one relayed answer may take in all")
    add_request_limit_flags(parser)
    add_server_limit_flags(parser)
    return parser


def allowed_hosts(entries: Sequence[str]) -> AllowedHosts:
    """``--allowed-worker-hosts`` parsed; an allow-list that admits every address (``*``, ``0.0.0.0/0``, ``::/0``)
    is warned about, whichever way it is spelled."""
    allowed = AllowedHosts.parse(entries)
    if allowed.match_all:
        logger.warning("--allowed-worker-hosts %s admits every address: any host that can reach this controller can "
                       "register a worker (link-local and metadata addresses only when named)", " ".join(entries))
    return allowed


def main(argv: Sequence[str] | None = None) -> None:
    """Parse ``argv`` (default ``sys.argv[1:]``) and serve until interrupted."""
    args = build_parser().parse_args(argv)
    setup_logging(logging.INFO)
    logger.info("args: %s", args)
    max_request_bytes, limits = request_limit(args), server_limits(args)
    check_bind(args.host, args.port)
    allowed = allowed_hosts(args.allowed_worker_hosts)
    controller = Controller(
        args.dispatch_method, args.heartbeat_expiration, allowed_hosts=allowed, stream_timeout=args.stream_timeout,
        max_chunk_bytes=max_request_bytes + 1024 * 1024, max_workers=args.max_workers,
    )
    logger.info("workers admitted from %s", allowed.describe())
    controller.start()
    try:
        uvicorn_server(create_app(controller, max_request_bytes=max_request_bytes), args.host, args.port, limits).run()
    finally:
        controller.stop()


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
